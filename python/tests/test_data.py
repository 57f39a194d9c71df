"""hcomm.data: the loader reads every record once per epoch, byte for byte,
in an order that is a function of the seed, within its memory budget; bad
shards are named; close releases everything; the lifetime rule is checked
in debug mode."""

import gc
import os
import subprocess
import sys

import pytest

import hcomm
from hcomm import data

np = pytest.importorskip("numpy", reason="python3-numpy not installed (apt-get install python3-numpy)")

RS = 8192  # record bytes: 4096-aligned, so O_DIRECT where the file system has it


def _direct_ok(d):
    try:
        fd = os.open(os.path.join(d, ".probe"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(d, ".probe"))
    return True


@pytest.fixture
def shards(tmp_path):
    """5 shards of 7..11 records of RS random bytes; returns (dir, all
    records in global order)."""
    rng = np.random.default_rng(7)
    recs = []
    for i in range(5):
        a = rng.integers(0, 256, size=(7 + i, RS), dtype=np.uint8)
        a.tofile(tmp_path / f"shard-{i}.bin")
        recs.append(a)
    return tmp_path, np.concatenate(recs)


def _epochs(loader):
    """[[ids of batch, ...] per epoch], checking each batch's bytes."""
    out = []
    for x, ids in loader:
        out.append(list(ids))
    return out


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch,drop_last", [(4, False), (4, True), (1, False), (45, False), (64, False)])
def test_every_record_once_bytes_equal(shards, shuffle, batch, drop_last):
    d, recs = shards
    n = len(recs)
    with data.Loader(d, record_size=RS, batch_size=batch, shuffle=shuffle, seed=11, epochs=2, drop_last=drop_last,
                     return_ids=True, prefetch=2) as L:
        assert L.records == n and len(L) == 2 * L.batches_per_epoch()
        got = []
        for x, ids in L:
            assert x.shape == (len(ids), RS) and x.dtype == np.uint8
            assert (x == recs[ids]).all(), "bytes differ from the files'"
            assert len(ids) == batch or (not drop_last and len(ids) == n % batch)
            got.append(ids)
        per_epoch = len(got) // 2
        assert len(got) == len(L)
        for e in range(2):
            ids = np.concatenate(got[e * per_epoch:(e + 1) * per_epoch])
            want = n - (n % batch if drop_last else 0)
            assert len(ids) == want and len(set(ids.tolist())) == want, "a record twice or missing in an epoch"
            if not drop_last:
                assert sorted(ids.tolist()) == list(range(n))
        if not shuffle:
            assert np.concatenate(got[:per_epoch]).tolist() == list(range(n - (n % batch if drop_last else 0)))
        if _direct_ok(str(d)):
            assert L.stats["opened_direct"] == L.stats["opened"] > 0, L.stats


def test_order_by_seed(shards):
    d, _ = shards

    def order(seed, epochs=2):
        with data.Loader(d, record_size=RS, batch_size=8, shuffle=True, seed=seed, epochs=epochs,
                         return_ids=True) as L:
            return [ids.tolist() for _, ids in L]

    a, b, c = order(1), order(1), order(2)
    assert a == b, "the same seed gave another order"
    assert a != c, "another seed gave the same order"
    # Eight seeds, eight orders (45 records: 45! of them).
    firsts = [tuple(i for ids in order(seed, epochs=1) for i in ids) for seed in range(8)]
    assert len(set(firsts)) == 8, "two seeds gave the same order"
    assert firsts[1] == tuple(i for ids in a[:len(a) // 2] for i in ids), "epoch 0 depends on epochs"
    half = len(a) // 2
    assert a[:half] != a[half:], "two epochs in the same order"
    flat = [i for ids in a[:half] for i in ids]
    # Shuffled by shard and within shards: shards stay together.
    L = data.Loader(d, record_size=RS, shuffle=True, seed=1)
    shard_of = [s for s, _ in L.order(0)]
    assert [s for s, r in L.order(0)] == shard_of and sorted(set(shard_of)) == list(range(5))
    runs = [shard_of[0]] + [y for x, y in zip(shard_of, shard_of[1:]) if x != y]
    assert len(runs) == 5, f"a shard's records are not together: {runs}"
    assert flat != sorted(flat)
    L.close()


def test_npy_shards(tmp_path):
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal((5 + i, 3, 4)).astype(np.float32) for i in range(3)]
    for i, a in enumerate(arrs):
        np.save(tmp_path / f"part-{i}.npy", a)
    allr = np.concatenate(arrs)
    with data.Loader(tmp_path, batch_size=4, shuffle=True, seed=5, return_ids=True) as L:
        assert L.record_size == 48 and L.shape == (3, 4)
        seen = []
        for x, ids in L:
            assert x.dtype == np.float32 and x.shape == (len(ids), 3, 4)
            assert np.array_equal(x, allr[ids])
            seen += ids.tolist()
        assert sorted(seen) == list(range(len(allr)))
    np.save(tmp_path / "part-9.npy", np.zeros((2, 5), np.float32))
    with pytest.raises(hcomm.InvalidArgument, match="part-9.npy"):
        data.Loader(tmp_path)


def test_memory_budget(shards):
    d, _ = shards
    slot = 4 * RS
    L = data.Loader(d, record_size=RS, batch_size=4, prefetch=8, keep=1, memory_budget=5 * slot, epochs=2)
    assert L.prefetch == 3, "the budget did not lower prefetch"
    lo = None
    for x in L:
        assert L.stats["max_bytes_in_flight"] <= 5 * slot
        # Not only the loader's own count: every batch it hands out lies in
        # the budget's bytes of pool, one block of them.
        lo = L._base if lo is None else lo
        assert L._base == lo and lo <= x.ctypes.data and x.ctypes.data + x.nbytes <= lo + 5 * slot, \
            f"batch at {x.ctypes.data:#x}+{x.nbytes} outside the budget's {5 * slot} bytes from {lo:#x}"
    assert 0 < L.stats["max_bytes_in_flight"] <= L.memory_budget == 5 * slot
    L.close()
    with pytest.raises(hcomm.InvalidArgument, match="memory_budget"):
        data.Loader(d, record_size=RS, batch_size=4, keep=1, memory_budget=2 * slot)


def test_truncated_and_unreadable(shards):
    d, recs = shards
    with open(d / "shard-2.bin", "r+b") as f:
        f.truncate(9 * RS - 100)
    with pytest.raises(hcomm.InvalidArgument, match="shard-2.bin.*truncated") as e:
        data.Loader(d, record_size=RS)
    assert e.value.path.endswith("shard-2.bin")
    # Go on: the shard is left out, with the reason.
    L = data.Loader(d, record_size=RS, on_error="skip", batch_size=5, return_ids=True)
    assert [os.path.basename(p) for p, _ in L.skipped] == ["shard-2.bin"]
    assert L.records == len(recs) - 9
    assert sum(len(ids) for _, ids in L) == L.records
    L.close()
    # Unreadable: a directory among the shards, a missing file.
    os.mkdir(d / "shard-5.bin")
    with pytest.raises(hcomm.InvalidArgument, match="shard-5.bin.*not a regular file"):
        data.Loader([d / "shard-0.bin", d / "shard-5.bin"], record_size=RS)
    with pytest.raises(hcomm.NoDevice, match="shard-6.bin") as e:
        data.Loader([d / "shard-0.bin", d / "shard-6.bin"], record_size=RS)
    assert e.value.path.endswith("shard-6.bin")
    # A shard truncated after the loader was made: the read raises, naming it.
    L = data.Loader([d / "shard-0.bin", d / "shard-1.bin"], record_size=RS, batch_size=4)
    os.truncate(d / "shard-1.bin", RS)
    with pytest.raises(hcomm.InvalidArgument, match="shard-1.bin.*truncated"):
        for _ in L:
            pass
    L.close()


def test_read_error_names_the_shard(tmp_path):
    """A shard shrunk while it is open: the read past its new end fails
    (DeviceError) naming the file, the iteration ends, and close leaves
    nothing open."""
    rng = np.random.default_rng(5)
    for i in range(2):
        rng.integers(0, 256, size=(64, RS), dtype=np.uint8).tofile(tmp_path / f"s{i}.bin")
    for _ in range(2):  # warm up: the library's own first-use descriptors
        with data.Loader(tmp_path, record_size=RS, batch_size=4) as L:
            next(iter(L))
    gc.collect()
    fds = _fds()
    L = data.Loader(tmp_path, record_size=RS, batch_size=4)
    it = iter(L)
    next(it)
    assert list(L._files_open) == [0], "s0.bin is not the one open"
    os.truncate(tmp_path / "s0.bin", 10 * RS)
    with pytest.raises(hcomm.DeviceError, match="s0.bin.*read failed") as e:
        for _ in it:
            pass
    assert e.value.path == str(tmp_path / "s0.bin")
    assert not L._files_open, "a shard left open after the failed read"
    L.close()
    assert _fds() == fds


_UNREADABLE = r"""
import os, sys
import numpy as np
import hcomm
from hcomm import data

d, rs = sys.argv[1], int(sys.argv[2])
bad = os.path.join(d, "shard-3.bin")
try:
    open(bad, "rb").close()
except PermissionError:
    pass
else:
    sys.exit("shard-3.bin is readable here: the test cannot take its permission away")
try:
    data.Loader(d, record_size=rs)
except hcomm.PermissionDenied as e:
    assert e.path == bad and "shard-3.bin" in str(e) and "permission denied" in str(e), (e.path, str(e))
else:
    sys.exit("an unreadable shard raised nothing")
want = np.concatenate([np.fromfile(os.path.join(d, f"shard-{i}.bin"), np.uint8).reshape(-1, rs)
                       for i in range(5) if i != 3])
with data.Loader(d, record_size=rs, on_error="skip", batch_size=6, return_ids=True) as L:
    assert [p for p, _ in L.skipped] == [bad] and isinstance(L.skipped[0][1], hcomm.PermissionDenied), L.skipped
    got = np.zeros_like(want)
    n = 0
    for x, ids in L:
        got[ids] = x
        n += len(ids)
    assert n == L.records == len(want) and np.array_equal(got, want), "the readable shards not read in full"
print("ok")
"""


def test_unreadable_shard(shards):
    """A shard this process may not read (mode 000, and as root without
    CAP_DAC_OVERRIDE: setpriv drops it for a child process) raises
    PermissionDenied naming it, or with on_error="skip" is left out while
    every other record is read."""
    d, _ = shards
    os.chmod(d / "shard-3.bin", 0)
    cmd = [sys.executable, "-c", _UNREADABLE, str(d), str(RS)]
    if os.geteuid() == 0:
        import shutil

        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root reads any file, and there is no setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        cmd = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


@pytest.mark.parametrize("bad,exc,why", [
    ("truncated", hcomm.InvalidArgument, "truncated"),
    ("directory", hcomm.InvalidArgument, "not a regular file"),
    ("missing", hcomm.NoDevice, ""),
    ("npy", hcomm.InvalidArgument, "not an .npy file"),
])
def test_bad_shard_stop_or_go_on(shards, bad, exc, why):
    """Each kind of bad shard: on_error="raise" stops with an error naming
    it, on_error="skip" goes on without it (the others read in full)."""
    d, recs = shards
    good = [d / f"shard-{i}.bin" for i in range(5)]
    path = d / ("bad.npy" if bad == "npy" else "bad.bin")
    if bad == "truncated":
        path.write_bytes(b"x" * (2 * RS - 1))
    elif bad == "directory":
        path.mkdir()
    elif bad == "npy":
        path.write_bytes(b"not numpy" * 100)
    files = good[:2] + [path] + good[2:]
    kw = {} if bad == "npy" else {"record_size": RS}
    if bad == "npy":  # .npy shards all: the good ones as arrays
        files = []
        for i, g in enumerate(good):
            np.save(d / f"g{i}.npy", np.fromfile(g, np.uint8).reshape(-1, RS))
            files.append(d / f"g{i}.npy")
        files.insert(2, path)
    with pytest.raises(exc, match=f"{path.name}.*{why}") as e:
        data.Loader(files, **kw)
    assert e.value.path == str(path)
    with data.Loader(files, on_error="skip", batch_size=7, return_ids=True, **kw) as L:
        assert [p for p, _ in L.skipped] == [str(path)] and isinstance(L.skipped[0][1], exc)
        assert L.records == len(recs)
        seen = []
        for x, ids in L:
            assert np.array_equal(np.asarray(x).reshape(len(ids), RS), recs[ids])
            seen += ids.tolist()
        assert sorted(seen) == list(range(len(recs)))


def _fds():
    return len(os.listdir("/proc/self/fd"))


def _mapped(addr):
    """Whether addr lies in a mapping of this process (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
    return False


def test_close_mid_epoch_releases_everything(shards):
    d, _ = shards
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    for _ in range(2):  # warm up: the library's own first-use descriptors
        L = data.Loader(d, record_size=RS, batch_size=4, prefetch=3)
        next(iter(L))
        L.close()
    gc.collect()
    fds = _fds()
    L = data.Loader(d, record_size=RS, batch_size=4, prefetch=3, format="torch")
    it = iter(L)
    for _ in range(3):
        t = next(it)
    assert _fds() > fds, "no shard open mid-epoch?"
    base = L._base
    assert _mapped(base), "the pool block is not mapped mid-epoch?"
    L.close()
    assert L.closed and _fds() == fds, "a descriptor left open by close"
    assert not _mapped(base), f"the pool at {base:#x} still mapped after close"
    assert hcomm.pending() == 0
    with pytest.raises(hcomm.BadHandle, match="closed during the iteration"):
        next(it)
    del t, it
    gc.collect()
    assert hcomm._dlpack_live() == 0
    with pytest.raises(hcomm.BadHandle):
        next(iter(L))
    L.close()  # twice is fine
    assert torch is not None


def test_numpy_torch_dlpack(shards):
    d, recs = shards
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    with data.Loader(d, record_size=RS, batch_size=4, return_ids=True, dtype="float32", shape=(RS // 4 // 8, 8)) as L:
        x, ids = next(iter(L))
        assert x.shape == (4, RS // 32, 8) and x.dtype == np.float32
        t = torch.from_dlpack(x)  # NumPy's DLPack: the same memory, no copy
        assert t.data_ptr() == x.ctypes.data and t.dtype == torch.float32
        assert np.array_equal(t.numpy().view(np.uint8).reshape(4, RS), recs[ids])
        del t
    with data.Loader(d, record_size=RS, batch_size=4, return_ids=True, format="torch") as L:
        seen = []
        for t, ids in torch.utils.data.DataLoader(L.torch_dataset(), batch_size=None):
            assert isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.shape == (len(ids), RS)
            assert np.array_equal(t.numpy(), recs[ids.numpy()])
            seen += ids.tolist()
        assert sorted(seen) == list(range(len(recs)))


def test_torch_batches_are_pool_memory(shards):
    """format="torch" batches are tensors over the loader's pool block (batch
    i in slot i mod (keep + 1 + prefetch)), alone and through torch's
    DataLoader, not copies of it; debug mode sees a torch batch held too
    long as it sees a NumPy one."""
    d, recs = shards
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    with data.Loader(d, record_size=RS, batch_size=4, return_ids=True, format="torch", epochs=2) as L:
        slots = L.keep + 1 + L.prefetch
        for via_dataloader in (False, True):
            it = torch.utils.data.DataLoader(L.torch_dataset(), batch_size=None) if via_dataloader else L
            n = 0
            for t, ids in it:
                want = L._base + (n % slots) * L._slot_bytes
                assert t.data_ptr() == want, f"batch {n} at {t.data_ptr():#x}, not in its pool slot at {want:#x}"
                assert torch.from_dlpack(t).data_ptr() == want
                assert np.array_equal(t.numpy(), recs[ids.numpy()])
                n += 1
            assert n == len(L)
            del t
    with data.Loader(d, record_size=RS, batch_size=4, keep=1, debug=True, format="torch") as L:
        it = iter(L)
        first = next(it)[1:2]  # a view of a view
        next(it)
        with pytest.raises(hcomm.Busy, match="batch 0.*keep=1"):
            next(it)
        del first


def test_lifetime_rule_debug(shards):
    d, _ = shards
    with data.Loader(d, record_size=RS, batch_size=4, keep=2, debug=True, epochs=2) as L:
        kept = []
        for x in L:  # batches i-2 .. i in use while the body runs on batch i: allowed
            kept.append(x[1:3])  # a slice is a view too
            assert len(kept) <= 3
            kept = kept[-2:]  # batch i-2 let go before asking for batch i+1
    with data.Loader(d, record_size=RS, batch_size=4, keep=1, debug=True) as L:
        it = iter(L)
        first = next(it)
        next(it)
        with pytest.raises(hcomm.Busy, match="batch 0.*keep=1"):
            next(it)
        del first


def test_defaults_lifetime_rule(shards):
    """The defaults (keep=1, prefetch=1) make a pool of 3 batches, and in it
    the previous batch stays intact while the body runs on the next (the
    loader has already read ahead into the third slot by then), in a plain
    loop and inside torch's DataLoader, with the debug check on. Holding a
    batch one more batch than that raises Busy."""
    d, recs = shards
    slot = data._round(4 * RS)
    loaders = [data.Loader(d, record_size=RS, batch_size=4, return_ids=True, debug=True, shuffle=True, seed=3,
                           epochs=2)]
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None:
        loaders.append(data.Loader(d, record_size=RS, batch_size=4, return_ids=True, debug=True, shuffle=True,
                                   seed=3, epochs=2, format="torch"))
    for L in loaders:
        with L:
            assert (L.keep, L.prefetch, L.memory_budget) == (1, 1, 3 * slot)
            it = L if L.format == "numpy" else torch.utils.data.DataLoader(L.torch_dataset(), batch_size=None)
            prev = None
            n = 0
            for x, ids in it:
                assert np.array_equal(np.asarray(x), recs[np.asarray(ids)])
                if prev is not None:  # batch i-1, while the body runs on batch i
                    assert np.array_equal(np.asarray(prev[0]), recs[np.asarray(prev[1])]), \
                        f"batch {n - 1} was read over while batch {n} was in use"
                prev = (x, ids)
                n += 1
            del x, prev
            assert n == len(L) and L.stats["reads"] > 0
            assert 0 < L.stats["max_bytes_in_flight"] <= 3 * slot
    with data.Loader(d, record_size=RS, batch_size=4, debug=True) as L:
        it = iter(L)
        kept = next(it)
        b1 = next(it)
        with pytest.raises(hcomm.Busy, match="batch 0.*keep=1"):
            next(it)
        del kept, b1


def test_info_and_help():
    out = subprocess.run([sys.executable, "-m", "hcomm", "info"], capture_output=True, text=True, check=True).stdout
    assert f"library: {hcomm.__version__}" in out and "io_uring:" in out and "hugepages:" in out
    assert "memory: ok" in out and "read files (hcomm.data): ok" in out
    assert f"python: {sys.version.split()[0]} ({sys.executable})" in out
    for name in ("numpy", "torch"):  # the version imported, or why not
        try:
            mod = __import__(name)
        except ImportError:
            assert f"  {name}: not importable (" in out, out
        else:
            assert f"  {name}: {mod.__version__} (" in out, out
    from hcomm import __main__ as m

    for size, counts in m.hugepages().items():  # the kernel's counts, one line per page size
        if isinstance(counts, dict):
            assert f"  {size}: " + ", ".join(f"{k} {v}" for k, v in counts.items()) in out, out
    assert "lifetime rule" in data.__doc__ and "memory_budget" in data.Loader.__doc__
    assert os.path.exists(os.path.join(os.path.dirname(hcomm.__file__), "py.typed"))


def test_info_hugepages_in_the_kernels_terms(tmp_path):
    """python -m hcomm info's hugepage counts are the kernel's, under its
    names: total nr_hugepages, reserved resv_hugepages (HugePages_Rsvd,
    not the pool's size), as /proc/meminfo has them for the default size."""
    from hcomm import __main__ as m

    d = tmp_path / "hugepages-2048kB"
    d.mkdir()
    for name, v in (("nr_hugepages", 8), ("free_hugepages", 5), ("resv_hugepages", 2), ("surplus_hugepages", 1)):
        (d / name).write_text(f"{v}\n")
    assert m.hugepages(str(tmp_path))["2048kB"] == {"total": 8, "free": 5, "reserved": 2, "surplus": 1}
    meminfo = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            meminfo[k] = int(v.split()[0])
    size = f"{meminfo['Hugepagesize']}kB"
    got = m.hugepages()
    if size not in got:
        pytest.skip(f"no /sys/kernel/mm/hugepages/hugepages-{size}: {got}")
    assert got[size] == {"total": meminfo["HugePages_Total"], "free": meminfo["HugePages_Free"],
                         "reserved": meminfo["HugePages_Rsvd"], "surplus": meminfo["HugePages_Surp"]}


def test_train_loader_example_runs():
    """The example trains with both loaders on the same batches (its
    throughputs are printed, never asserted)."""
    pytest.importorskip("torch", reason="python3-torch not installed")
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "train_loader.py")
    out = subprocess.run([sys.executable, path, "--quick"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hcomm.data.Loader" in out.stdout and "torch DataLoader" in out.stdout
