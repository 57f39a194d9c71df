"""One engine with several targets (a device and two files) and copies
between them: file → device → file, bytes verified."""

import os

import pytest

import hcomm


def test_device_and_two_files(tmp_path):
    n = 4 << 20
    data = bytes((i * 7 + (i >> 12)) & 0xFF for i in range(n))
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(data)
    with hcomm.Engine(pool_size=16 << 20, align=4096, dev_mem_size=8 << 20) as eng:
        fin = eng.add_target("file", path=src, dev_mem_size=n)
        fout = eng.add_target("file", path=dst, dev_mem_size=n)
        assert (fin, fout) == (1, 2)
        dev = eng.alloc_dev(n)
        a, b = eng.alloc_dev(n, target=fin), eng.alloc_dev(n, target=fout)
        assert (dev.target, a.target, b.target) == (0, fin, fout)
        assert a.offset == 0 and b.offset == 0
        called = []
        assert eng.copy(dev, a, callback=called.append).result(timeout=60) == n  # file → device
        assert eng.copy(b, dev).result(timeout=60) == n  # device → file
        assert len(called) == 1
        # A host buffer reaches the device and both files in place.
        buf = eng.alloc(4096)
        eng.submit(dev, buf).result(timeout=10)
        assert bytes(buf.memoryview()) == data[:4096]
        # Between two targets a transfer is refused: that is a copy.
        with pytest.raises(hcomm.HcommError):
            eng.submit(a, dev, 4096)
        with pytest.raises(ValueError):
            eng.add_target("remote")
    assert dst.read_bytes()[:n] == data
    os.remove(src)


def test_copy_await(tmp_path):
    import asyncio

    with hcomm.Engine(pool_size=16 << 20, dev_mem_size=8 << 20) as eng:
        d1 = eng.add_target("mock", dev_mem_size=8 << 20)
        a, b = eng.alloc_dev(1 << 20), eng.alloc_dev(1 << 20, target=d1)
        buf, back = eng.alloc(1 << 20), eng.alloc(1 << 20)
        buf.memoryview()[:] = bytes(range(256)) * 4096
        eng.submit(buf, a).result(timeout=10)

        async def main():
            return await eng.copy(b, a)

        assert asyncio.run(main()) == 1 << 20
        eng.submit(b, back).result(timeout=10)
        assert bytes(back.memoryview()) == bytes(buf.memoryview())
