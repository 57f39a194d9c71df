"""python/bench/loader_bench.py (make python-bench): the page-cache check it
prints agrees with fincore(1), and the benchmark runs end to end on a small
dataset (its numbers are printed, never asserted)."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "bench", "loader_bench.py"))


def _bench():
    spec = importlib.util.spec_from_file_location("loader_bench", BENCH)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _fincore(path):
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", str(path)], check=True, capture_output=True,
                         text=True).stdout
    return int(out.split()[0])


def test_resident_bytes(tmp_path):
    b = _bench()
    p = tmp_path / "data.bin"
    p.write_bytes(os.urandom(4 << 20))
    b.drop_cache([str(p)])
    if b.resident_bytes([str(p)]) == 4 << 20:
        pytest.skip(f"{tmp_path}: the file system keeps every page (tmpfs?): posix_fadvise DONTNEED drops nothing")
    assert b.resident_bytes([str(p)]) == 0, "pages left in the cache by the drop"
    fd = os.open(p, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead: what is read is what is cached
        for off in range(0, 4 << 20, 1 << 20):  # 256 KiB of each MiB
            assert len(os.pread(fd, 256 << 10, off)) == 256 << 10
    finally:
        os.close(fd)
    got = b.resident_bytes([str(p)])
    assert got == 1 << 20, f"{got} bytes resident after reading 1 MiB of the file"
    if shutil.which("fincore") is None:
        pytest.skip("fincore (util-linux) not installed: resident bytes not compared with it")
    assert got == _fincore(p), "mincore's count differs from fincore's RES"
    b.drop_cache([str(p)])
    assert b.resident_bytes([str(p)]) == _fincore(p) == 0


def test_bench_runs(tmp_path):
    pytest.importorskip("numpy", reason="python3-numpy not installed")
    pytest.importorskip("torch", reason="python3-torch not installed")
    out = subprocess.run([sys.executable, BENCH, "--gib", "0.01", "--reps", "1", "--dir", str(tmp_path / "shards")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for want in ("| hcomm |", "| dataloader0 |", "| dataloader2 |", "hcomm vs the best DataLoader",
                 "page cache after each drop: at most"):
        assert want in out.stdout, f"no {want!r} in:\n{out.stdout}"
    m = re.search(r"O_DIRECT in (\d+) of (\d+) shard opens", out.stdout)
    assert m and int(m.group(2)) == 8, out.stdout  # 8 shards, each opened once in the epoch
    if _direct_ok(tmp_path):
        assert m.group(1) == m.group(2), f"{tmp_path} has O_DIRECT, the loader did not use it:\n{out.stdout}"


def _direct_ok(d):
    try:
        fd = os.open(os.path.join(d, ".probe"), os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(d, ".probe"))
    return True
