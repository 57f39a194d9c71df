"""hcomm.data with a device: every batch is copied into device memory (a
ring of batch slots under the lifetime rule); read back from the device, the
bytes are the files', every record once per epoch; close mid-epoch gives the
device memory back."""

import gc

import pytest

import hcomm
from hcomm import data

np = pytest.importorskip("numpy", reason="python3-numpy not installed (apt-get install python3-numpy)")

RS = 8192


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(9)
    recs = []
    for i in range(4):
        a = rng.integers(0, 256, size=(6 + 2 * i, RS), dtype=np.uint8)
        a.tofile(tmp_path / f"shard-{i}.bin")
        recs.append(a)
    return tmp_path, np.concatenate(recs)


class _Dev:
    """The device a loader uses: "mock" (the loader's own engine), "first"
    (a caller's engine's first target, a mock device) or "added" (a mock
    device added to a caller's memory engine with add_target)."""

    def __init__(self, kind, dev_bytes):
        self.kind, self.eng, self.target = kind, None, 0
        if kind == "first":
            self.eng = hcomm.Engine(pool_size=4 << 20, target="mock", dev_mem_size=dev_bytes)
        elif kind == "added":
            self.eng = hcomm.Engine(pool_size=4 << 20, target="memory")
            self.target = self.eng.add_target("mock", dev_mem_size=dev_bytes)

    @property
    def arg(self):
        if self.kind == "mock":
            return "mock"
        return self.eng if self.kind == "first" else (self.eng, self.target)

    def close(self):
        if self.eng is not None:
            self.eng.close()


def _ring_bytes(batch, keep, prefetch):
    return (keep + 1 + prefetch) * (-(-batch * RS // 4096) * 4096)


def _read_back(b, regs):
    """The bytes of DeviceBatch b, read from device memory into registered
    host memory of b's engine."""
    eng = b.engine
    if eng not in regs:
        host = hcomm.empty(1 << 20)
        regs[eng] = (host, eng.register(host))
    host, reg = regs[eng]
    eng.submit(b.device, reg, b.nbytes).result(30)
    return host[:b.nbytes].copy().reshape(b.records, RS)


@pytest.mark.parametrize("kind", ["mock", "first", "added"])
@pytest.mark.parametrize("shuffle,batch,chunk", [(False, 4, None), (True, 5, None), (True, 64, 3 * RS + 100),
                                                 (False, 1, None)])
def test_device_every_record_once_bytes_equal(shards, monkeypatch, kind, shuffle, batch, chunk):
    d, recs = shards
    n = len(recs)
    if chunk is not None:  # batches copied in several transfers
        monkeypatch.setattr(data, "_DEV_CHUNK", chunk)
    keep, prefetch = 1, 2
    dev = _Dev(kind, _ring_bytes(batch, keep, prefetch))
    regs = {}
    try:
        with data.Loader(d, record_size=RS, batch_size=batch, shuffle=shuffle, seed=3, epochs=2, keep=keep,
                         prefetch=prefetch, return_ids=True, device=dev.arg) as L:
            got, prev = [], None
            for b in L:
                assert isinstance(b, data.DeviceBatch)
                assert b.records == len(b.ids) and b.nbytes == len(b.ids) * RS
                assert b.target == dev.target and b.device.ptr == hcomm.DEV_ADDR_BASE + (
                    b.target << hcomm._engine.TARGET_SHIFT) + b.offset
                assert (b.host == recs[b.ids]).all(), "the host view differs from the files'"
                assert (_read_back(b, regs) == recs[b.ids]).all(), "device memory differs from the files'"
                if prev is not None:  # keep=1: the batch before is still valid, on the device too
                    assert (_read_back(prev, regs) == recs[prev.ids]).all(), "the kept batch's device slot was reused"
                prev = b
                got.append(b.ids)
            assert len(got) == len(L)
            half = len(got) // 2
            for e in range(2):
                ids = np.concatenate(got[e * half:(e + 1) * half]).tolist()
                assert sorted(ids) == list(range(n)), "a record twice or missing in an epoch"
            assert L.stats["device_copies"] >= len(got)
            if chunk is not None:
                assert L.stats["device_copies"] > len(got), "no batch was copied in several transfers"
            del b, prev
            for eng, (_, reg) in regs.items():
                eng.unregister(reg)
    finally:
        dev.close()


@pytest.mark.parametrize("kind", ["mock", "first", "added"])
def test_device_close_mid_epoch_releases_device_memory(shards, kind):
    d, _ = shards
    batch, keep, prefetch = 4, 1, 2
    ring = _ring_bytes(batch, keep, prefetch)
    dev = _Dev(kind, ring)
    try:
        L = data.Loader(d, record_size=RS, batch_size=batch, keep=keep, prefetch=prefetch, device=dev.arg)
        assert L.memory_budget == ring
        it = iter(L)
        b = next(it)
        eng = b.engine
        if dev.eng is not None:
            assert eng is dev.eng
            with pytest.raises(hcomm.HcommError):  # the ring holds the whole device memory
                dev.eng.alloc_dev(ring, target=dev.target).free()
        del b
        L.close()
        with pytest.raises(hcomm.BadHandle):
            next(it)
        del it
        gc.collect()
        if dev.eng is None:
            assert eng.closed, "the loader's own engine (and its device memory) outlived close"
        else:
            assert not dev.eng.closed, "close closed the caller's engine"
            dev.eng.alloc_dev(ring, target=dev.target).free()  # the ring is free again
            assert not dev.eng._regs, "the loader's registration outlived close"
        L.close()
    finally:
        dev.close()


def test_device_argument(shards):
    d, _ = shards
    with pytest.raises(hcomm.InvalidArgument, match="device"):
        data.Loader(d, record_size=RS, device="cuda")
    e = hcomm.Engine(pool_size=1 << 20)
    e.close()
    with pytest.raises(hcomm.BadHandle):
        data.Loader(d, record_size=RS, device=e)


def test_host_path_unchanged(shards):
    d, recs = shards
    with data.Loader(d, record_size=RS, batch_size=4) as L:
        for x in L:
            assert isinstance(x, np.ndarray)
        assert L.stats["device_copies"] == 0 and L._ring is None


def test_device_lifetime_rule_debug(shards):
    d, _ = shards
    with data.Loader(d, record_size=RS, batch_size=4, keep=1, debug=True, device="mock") as L:
        it = iter(L)
        first = next(it)  # a DeviceBatch keeps its host view, so the check sees it
        next(it)
        with pytest.raises(hcomm.Busy, match="batch 0.*keep=1"):
            next(it)
        del first
