"""The Python package over libhcomm: zero copy, round trips, futures,
callbacks, errors, fork, leaks."""

import asyncio
import concurrent.futures
import ctypes
import gc
import os
import threading

import pytest

import hcomm

np = pytest.importorskip("numpy", reason="python3-numpy not installed (apt-get install python3-numpy)")


def pattern(n, seed):
    return (np.arange(n, dtype=np.uint32) * 2654435761 + seed).astype(np.uint8)


def test_version():
    assert hcomm.library_version() == hcomm.__version__
    assert tuple(int(x) for x in hcomm.__version__.split(".")) >= (0, 1, 0)


def test_zero_copy_views(eng):
    buf = eng.alloc(1 << 20)
    mv = buf.memoryview()
    arr = np.frombuffer(buf, dtype=np.uint8)
    # Same address: no copy anywhere.
    assert ctypes.addressof(ctypes.c_char.from_buffer(mv)) == buf.ptr
    assert arr.__array_interface__["data"][0] == buf.ptr
    assert np.asarray(buf).__array_interface__["data"][0] == buf.ptr
    arr[:] = 7
    assert mv[12345] == 7 and buf[99] == 7
    assert buf.__dlpack_device__() == (1, 0)


def test_round_trip_device(eng):
    n = 1 << 20
    src, dst, dev = eng.alloc(n), eng.alloc(n), eng.alloc_dev(n)
    want = pattern(n, 3)
    src.numpy()[:] = want
    assert eng.submit(src, dev).result(timeout=10) == n
    assert eng.submit(dev, dst).result(timeout=10) == n
    assert np.array_equal(dst.numpy(), want)
    # Views: a part of each buffer.
    dst.numpy()[:] = 0
    eng.submit(dev.view(4096, 8192), dst.view(4096, 8192)).result(10)
    got = dst.numpy()
    assert np.array_equal(got[4096:12288], want[4096:12288]) and not got[:4096].any()


def test_round_trip_memory_target(mem_eng):
    a, b = mem_eng.alloc(65536), mem_eng.alloc(65536)
    a.numpy()[:] = pattern(65536, 9)
    mem_eng.submit(a, b).result(10)
    assert bytes(a) == bytes(b)


def test_file_target(tmp_path):
    path = tmp_path / "data"
    with hcomm.Engine(pool_size=8 << 20, target="file", path=path, dev_mem_size=1 << 20) as e:
        a, b, off = e.alloc(8192), e.alloc(8192), e.alloc_dev(8192)
        a.numpy()[:] = pattern(8192, 1)
        e.submit(a, off).result(10)
        e.submit(off, b).result(10)
        assert bytes(a) == bytes(b)
        want = bytes(a)
    with open(path, "rb") as f:
        f.seek(off.offset)
        assert f.read(8192) == want


def test_futures_batch_and_callbacks(eng):
    n, k = 4096, 32
    srcs = [eng.alloc(n) for _ in range(k)]
    devs = [eng.alloc_dev(n) for _ in range(k)]
    seen, threads = [], set()
    lock = threading.Lock()

    def cb(t):
        with lock:
            seen.append(t)
            threads.add(threading.get_ident())

    for i, s in enumerate(srcs):
        s.numpy()[:] = i
    futs = eng.submit_batch([(s, d, None, cb) for s, d in zip(srcs, devs)])
    assert len(futs) == k and all(isinstance(f, concurrent.futures.Future) for f in futs)
    done, _ = concurrent.futures.wait(futs, timeout=10)
    assert len(done) == k and all(f.result() == n for f in futs)
    assert sorted(id(t) for t in seen) == sorted(id(f) for f in futs)  # each callback exactly once
    assert threading.get_ident() not in threads  # on engine threads
    assert len({f.id for f in futs}) == k and all(f.id for f in futs)
    assert hcomm.pending() == 0


def test_asyncio(eng):
    buf, dev = eng.alloc(1 << 16), eng.alloc_dev(1 << 16)

    async def main():
        n = await eng.submit(buf, dev)
        results = await asyncio.gather(*(eng.submit(dev, buf) for _ in range(8)))
        return n, results

    n, results = asyncio.run(main())
    assert n == 1 << 16 and results == [1 << 16] * 8


def test_callback_exception_reported(caplog):
    e = hcomm.Engine(pool_size=8 << 20)
    buf, dev = e.alloc(4096), e.alloc_dev(4096)

    def bad(t):
        raise RuntimeError("boom in a callback")

    fut = e.submit(buf, dev, callback=bad)
    assert fut.result(10) == 4096  # the transfer itself succeeded
    e.submit(buf, dev).result(10)
    with pytest.raises(hcomm.CallbackError) as ei:
        e.close()
    assert isinstance(ei.value.errors[0], RuntimeError) and "boom" in str(ei.value.__cause__)
    assert "callback raised" in caplog.text


def test_errors_per_code(eng):
    with pytest.raises(hcomm.InvalidArgument) as ei:
        hcomm.Engine(queue_depth=100)
    assert ei.value.code == -22 and "100" in str(ei.value) and "power of two" in str(ei.value)
    with pytest.raises(hcomm.NotSupported):
        eng.submit(eng.alloc(64), eng.alloc(64))  # host to host on a device
    with pytest.raises(hcomm.OutOfMemory):
        eng.alloc(1 << 40)
    with pytest.raises(hcomm.NoDevice):
        hcomm.Engine(target="vfio", path="0000:7f:1f.7")
    with pytest.raises(hcomm.InvalidArgument):
        hcomm.Engine(target="file", path="/tmp")  # a directory
    buf = eng.alloc(4096)
    buf.free()
    with pytest.raises(ValueError):
        buf.free()
    # Every code has its class, and every class its code.
    for code, cls in hcomm.BY_CODE.items():
        err = hcomm.error_for(code, "x")
        assert type(err) is cls and err.code == code and isinstance(err, hcomm.HcommError)
    e2 = hcomm.Engine(pool_size=8 << 20)
    e2.close()
    with pytest.raises(hcomm.BadHandle):
        e2.alloc(64)


def test_stale_and_timeout_wait(eng):
    buf, dev = eng.alloc(4096), eng.alloc_dev(4096)
    fut = eng.submit(buf, dev)
    assert fut.result(timeout=10) == 4096
    assert fut.result(timeout=0) == 4096  # done: no wait


def test_register_numpy_and_torch_zero_copy(eng):
    arr = hcomm.empty(1 << 20)
    arr[:] = pattern(1 << 20, 5)
    reg = eng.register(arr)
    assert reg.ptr == arr.__array_interface__["data"][0]  # the array's own memory
    dev = eng.alloc_dev(1 << 20)
    out = hcomm.empty(1 << 20)
    reg_out = eng.register(out)
    eng.submit(reg, dev).result(10)
    eng.submit(dev, reg_out).result(10)
    assert np.array_equal(arr, out)
    eng.unregister(reg)
    with pytest.raises(hcomm.BadAddress):
        eng.submit(reg, dev)  # unregistered
    with pytest.raises(hcomm.InvalidArgument):
        eng.register(np.zeros(100, dtype=np.uint8)[1:])  # not page aligned
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    t = torch.from_numpy(hcomm.empty(1 << 16, dtype=np.float32))
    t.copy_(torch.arange(t.numel(), dtype=torch.float32))
    rt = eng.register(t)
    assert rt.ptr == t.data_ptr()
    eng.submit(rt, dev).result(10)
    t2 = torch.from_numpy(hcomm.empty(1 << 16, dtype=np.float32))
    rt2 = eng.register(t2)
    eng.submit(dev, rt2).result(10)
    assert torch.equal(t, t2)
    eng.unregister(rt)
    eng.unregister(rt2)
    eng.unregister(reg_out)


def test_dlpack_torch(eng):
    torch = pytest.importorskip("torch", reason="python3-torch not installed")
    buf = eng.alloc(1 << 16)
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.ptr and t.dtype == torch.uint8 and t.numel() == 1 << 16
    f = t.view(torch.float32)
    f.copy_(torch.arange(f.numel(), dtype=torch.float32))
    assert np.frombuffer(buf, dtype=np.float32)[1000] == 1000.0
    assert hcomm._dlpack_live() >= 1
    del t, f
    gc.collect()
    assert hcomm._dlpack_live() == 0  # the consumer's deleter ran
    cap = buf.__dlpack__()
    del cap  # never consumed: the capsule's destructor frees it
    assert hcomm._dlpack_live() == 0


def _child(code_q):
    try:
        hcomm.Engine(pool_size=8 << 20)
    except hcomm.ForkError as e:
        os._exit(0 if "fork" in str(e) else 3)
    except BaseException:  # noqa: BLE001
        os._exit(2)
    os._exit(1)


def test_fork_refused():
    parent = hcomm.Engine(pool_size=8 << 20)
    buf = parent.alloc(4096)
    pid = os.fork()
    if pid == 0:
        signal_alarm = __import__("signal").alarm
        signal_alarm(20)  # a hang would end here, as a failure
        try:
            buf.free()  # the parent's engine, from the child
            os._exit(4)
        except hcomm.ForkError:
            pass
        _child(None)
    _, st = os.waitpid(pid, 0)
    assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, f"child status {st:#x} (1: init worked, 2: other error, 4: free worked, killed: hang)"
    dev = parent.alloc_dev(4096)
    parent.submit(buf, dev).result(10)  # the parent is unharmed
    parent.close()


def test_multiprocessing_spawn_works():
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as p:
        assert p.apply(_spawned_round_trip, (os.environ.get("HCOMM_LIBRARY"),), ) == 4096


def _spawned_round_trip(lib):
    import hcomm as h

    with h.Engine(pool_size=8 << 20, library=lib) as e:
        return e.submit(e.alloc(4096), e.alloc_dev(4096)).result(10)


def _fds():
    return len(os.listdir("/proc/self/fd"))


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_100_cycles():
    import weakref

    engines = []

    def cycle():
        with hcomm.Engine(pool_size=8 << 20, queue_depth=64) as e:
            engines.append(weakref.ref(e))
            bufs = [e.alloc(65536) for _ in range(4)]
            dev = e.alloc_dev(65536)
            futs = [e.submit(b, dev, callback=lambda t: None) for b in bufs]
            arr = hcomm.empty(65536)
            r = e.register(arr)
            futs.append(e.submit(r, dev))
            concurrent.futures.wait(futs, timeout=10)
            bufs[0].memoryview()[0] = 1

    for _ in range(5):
        cycle()  # warm-up: the runtime's threads and caches
    gc.collect()
    fds, rss = _fds(), _rss()
    for _ in range(100):
        cycle()
    gc.collect()
    assert _fds() == fds, f"fds {fds} -> {_fds()}"
    assert hcomm.pending() == 0
    grew = _rss() - rss
    # 100 cycles map and unmap 800 MiB of pools; what stays is noise.
    assert grew < 32 << 20, f"RSS grew by {grew >> 20} MiB over 100 cycles"
    assert not [r for r in engines if r() is not None], "engines kept alive after close"
    assert hcomm._dlpack_live() == 0


def test_torch_overlap_example_runs():
    """The example works end to end (its timing is printed, never asserted)."""
    pytest.importorskip("torch", reason="python3-torch not installed")
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "torch_overlap.py")
    spec = importlib.util.spec_from_file_location("torch_overlap", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert isinstance(mod.main(["--quick"]), float)
