"""hcomm.data's loader against torch's DataLoader on the same shards, side by side in one run.

    python bench/loader_bench.py [--gib 1] [--record-kib 128] [--batch 32] [--reps 3] [--dir DIR]

Writes --gib GiB of --record-kib KiB records (8 shards) once under --dir,
then runs one epoch per mode, the modes taking turns --reps times, each in a
fresh child process (its CPU time and peak RSS its own, workers included):

  hcomm        hcomm.data.Loader(format="torch"): O_DIRECT reads into pool memory (the run's
               line says in how many of its shard opens O_DIRECT was granted), with the
               loader's own defaults (prefetch 1, keep 1: a pool of keep + 1 + prefetch = 3
               batches) unless --prefetch or --keep is given
  dataloader0  torch DataLoader(num_workers=0) over a Dataset that reads each record with
               NumPy (numpy.fromfile at its offset), default collate (torch.stack)
  dataloader2  the same with num_workers=2 (fork)

All read the records in the same order (shards shuffled, records shuffled
within shards, one seed) in batches of --batch, and touch every batch (one
byte of each record summed). Before each run the shards' pages are dropped
from the page cache (posix_fadvise DONTNEED), so every run reads the disk;
how much of the shards is still resident after the drop is measured
(mincore, fincore's RES) and printed per run ("cached before").
Reported per mode: the median of the runs of samples/s and GiB/s, CPU
seconds (user + system, the child and its workers) per GiB read, and the
memory, sampled every 20 ms during the epoch by this parent process (not by the
child, whose CPU time it would add to): peak RSS, the sum over the child and all its
workers of VmRSS + HugetlbPages (VmRSS leaves hugetlb pages out, and the
loader's pool is in hugetlb pages where the machine has them free), split
into anonymous, file, shmem and hugetlb at the peak; peak PSS + hugetlb
(pages that forked workers share with the parent counted once); and the
epoch's own memory, the peak less the child's RSS + hugetlb just before the
epoch (every mode imports the same modules and opens libhcomm for the order
first). Then hcomm's ratios to the best DataLoader. The machine's load average is printed: on a shared,
busy machine the numbers are as measured under that load.
"""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import threading
import time

SHARDS = 8


def make_shards(d, gib, rs):
    import numpy as np

    os.makedirs(d, exist_ok=True)
    total = int(gib * (1 << 30)) // rs
    per = -(-total // SHARDS)
    paths = []
    rng = np.random.default_rng(0)
    chunk = rng.integers(0, 256, size=(64, rs), dtype=np.uint8)
    for i in range(SHARDS):
        p = os.path.join(d, f"shard-{i:02d}.bin")
        n = min(per, total - i * per)
        if not (os.path.exists(p) and os.path.getsize(p) == n * rs):
            with open(p + ".tmp", "wb") as f:
                for k in range(0, n, 64):
                    chunk[:, 0] = (k + i) & 0xFF
                    f.write(chunk[: min(64, n - k)].tobytes())
            os.replace(p + ".tmp", p)
        paths.append(p)
    return paths


def drop_cache(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(paths):
    """Bytes of paths in the page cache now: mincore(2) over a mapping of
    each file (what fincore(1) reports as RES), counted in pages."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            if addr is None or addr == ctypes.c_void_p(-1).value:
                raise OSError(ctypes.get_errno(), f"mmap {p}")
            try:
                vec = (ctypes.c_ubyte * (-(-size // page)))()
                if libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {p}")
                total += sum(b & 1 for b in bytes(vec)) * page
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


_STATUS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "HugetlbPages", "VmHWM")


def status_kib(pid="self"):
    """The memory lines of /proc/PID/status, in KiB. VmRSS is RssAnon +
    RssFile + RssShmem: hugetlb pages (HugetlbPages) are not in it."""
    out = dict.fromkeys(_STATUS, 0)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in out:
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def pss_kib(pid="self"):
    """Pss plus the hugetlb pages (which Pss leaves out) of
    /proc/PID/smaps_rollup, in KiB."""
    pss = huge = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k == "Pss":
                    pss = int(v.split()[0])
                elif k in ("Private_Hugetlb", "Shared_Hugetlb"):
                    huge += int(v.split()[0])
    except OSError:
        pass
    return pss + huge


def _tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


class Memory(threading.Thread):
    """Samples a child's process tree every 20 ms from the parent (so the
    sampling costs the measured process nothing) until stop: the peak of
    the sum over the tree of RSS + hugetlb pages (VmRSS + HugetlbPages:
    every resident page, a hugetlb pool's too), with the sum of RssAnon,
    RssFile, RssShmem and HugetlbPages at that sample, and the peak of the
    sum of PSS + hugetlb (pages shared by several processes of the tree,
    forked workers', counted once)."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.stop = pid, threading.Event()
        self.rss, self.pss, self.at_peak, self.procs = 0, 0, {}, 0

    def sample(self):
        tree = _tree(self.pid)
        st = [status_kib(p) for p in tree]
        tot = {k: sum(x[k] for x in st) for k in _STATUS}
        rss = tot["VmRSS"] + tot["HugetlbPages"]
        if rss > self.rss:
            self.rss, self.at_peak, self.procs = rss, tot, len(tree)
        self.pss = max(self.pss, sum(pss_kib(p) for p in tree))

    def run(self):
        self.sample()
        while not self.stop.wait(0.02):
            self.sample()
        self.sample()


def child(mode, paths, rs, batch, seed, prefetch, keep):
    """One epoch of mode; prints a JSON line. prefetch, keep: None for the
    loader's defaults."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from hcomm import data

    # The order: hcomm's (shards shuffled, rows shuffled within them), for every mode.
    order_loader = data.Loader(paths, record_size=rs, batch_size=batch, shuffle=True, seed=seed)
    first = [sh.first for sh in order_loader.shards]
    order = [first[s] + r for s, r in order_loader.order(0)]
    per = [sh.count for sh in order_loader.shards]
    order_loader.close()
    before = status_kib()
    before["pss"] = pss_kib()
    pool, settings, opened = 0, None, None
    kw = {k: v for k, v in (("prefetch", prefetch), ("keep", keep)) if v is not None}
    print("epoch", flush=True)  # the parent samples the memory from here to "done"
    t0, c0 = time.perf_counter(), os.times()
    n = 0
    check = 0
    if mode == "hcomm":
        with data.Loader(paths, record_size=rs, batch_size=batch, shuffle=True, seed=seed, format="torch",
                         **kw) as L:
            pool, settings = L.memory_budget, (L.prefetch, L.keep)
            for x in L:
                check += int(x[:, 1].sum())
                n += x.shape[0]
            opened = (L.stats["opened_direct"], L.stats["opened"])
    else:
        starts = np.cumsum([0] + per)

        class Records(torch.utils.data.Dataset):
            def __init__(self):
                self.files = {}

            def __len__(self):
                return int(starts[-1])

            def __getitem__(self, i):
                s = int(np.searchsorted(starts, i, side="right") - 1)
                f = self.files.get(s)
                if f is None:
                    f = self.files[s] = open(paths[s], "rb", buffering=0)
                f.seek((i - int(starts[s])) * rs)
                return torch.from_numpy(np.fromfile(f, dtype=np.uint8, count=rs))

        workers = int(mode[-1])
        kw = {"prefetch_factor": 4} if workers else {}
        dl = torch.utils.data.DataLoader(Records(), batch_size=batch, sampler=order, num_workers=workers, **kw)
        for x in dl:
            check += int(x[:, 1].sum())
            n += x.shape[0]
    wall = time.perf_counter() - t0
    c1 = os.times()
    print("done", flush=True)
    # This process's CPU and its reaped workers'.
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + \
        (c1.children_system - c0.children_system)
    print(json.dumps({"mode": mode, "records": n, "wall": wall, "cpu": cpu, "check": check, "before": before,
                      "pool": pool, "settings": settings, "opened": opened, "hwm_kib": status_kib()["VmHWM"]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--record-kib", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=None,
                    help="the loader's prefetch (default: the loader's own; its pool: keep + 1 + prefetch batches)")
    ap.add_argument("--keep", type=int, default=None, help="the loader's keep (default: the loader's own)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/var/tmp"), "hcomm-loader-bench"))
    ap.add_argument("--modes", default="hcomm,dataloader0,dataloader2")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    rs = a.record_kib << 10
    if a.child:
        paths = sorted(os.path.join(a.dir, p) for p in os.listdir(a.dir) if p.endswith(".bin"))
        child(a.child, paths, rs, a.batch, a.seed, a.prefetch, a.keep)
        return 0
    from hcomm import data

    # What the loader will run with: the options given, else its defaults.
    defaults = inspect.signature(data.Loader).parameters
    prefetch = a.prefetch if a.prefetch is not None else defaults["prefetch"].default
    keep = a.keep if a.keep is not None else defaults["keep"].default
    given = [f"--{k} {v}" for k, v in (("prefetch", a.prefetch), ("keep", a.keep)) if v is not None]
    t = time.time()
    paths = make_shards(a.dir, a.gib, rs)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"loader bench: {total / (1 << 30):.2f} GiB in {len(paths)} shards of {a.record_kib} KiB records "
          f"under {a.dir} (made in {time.time() - t:.1f} s), batch {a.batch}, loader prefetch {prefetch} keep {keep} "
          f"({' '.join(given) if given else 'the loader defaults'}: "
          f"{(prefetch + keep + 1) * a.batch * rs >> 20} MiB of pool), {a.reps} runs per mode, "
          f"page cache dropped before each run")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          f"(a shared machine: the numbers are as measured under this load)")
    modes = a.modes.split(",")
    runs = {m: [] for m in modes}
    checks = {}
    for rep in range(a.reps):
        for m in modes:
            drop_cache(paths)
            cached = resident_bytes(paths)
            p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", m, "--dir", a.dir,
                                  "--record-kib", str(a.record_kib), "--batch", str(a.batch), "--seed", str(a.seed)]
                                 + " ".join(given).split(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # Sampled during the epoch only: not while the child starts (its
            # pkg-config and ldconfig children, vforked, show the child's
            # own memory as theirs until they exec).
            errs = []
            drain = threading.Thread(target=lambda: errs.append(p.stderr.read()), daemon=True)
            drain.start()
            mem = Memory(p.pid)
            for line in p.stdout:
                if line.strip() == "epoch":
                    mem.start()
                    break
            for line in p.stdout:
                if line.strip() == "done":
                    break
            mem.stop.set()
            if mem.is_alive():
                mem.join()
            # The rest through the same buffered file object (the loops
            # above may have read the result line ahead into its buffer,
            # which communicate(), reading the descriptor, would miss).
            stdout = p.stdout.read()
            p.wait()
            drain.join()
            stderr = "".join(errs)
            if p.returncode:
                raise SystemExit(f"{m}: exit status {p.returncode}\n{stderr}")
            if not stdout.strip():
                raise SystemExit(f"{m}: no result line\n{stderr}")
            r = json.loads(stdout.strip().splitlines()[-1])
            r["rss_kib"], r["pss_kib"], r["at_peak"], r["procs"] = mem.rss, mem.pss, mem.at_peak, mem.procs
            r["cached"] = cached
            b = r["before"]
            r["own_kib"] = mem.rss - b["VmRSS"] - b["HugetlbPages"]
            if r["records"] * rs != total:
                raise SystemExit(f"{m}: read {r['records']} records, want {total // rs}")
            checks.setdefault(m, r["check"])
            runs[m].append(r)
            print(f"  run {rep + 1} {m:12s} {r['records'] / r['wall']:8.0f} samples/s  "
                  f"{total / r['wall'] / (1 << 30):6.2f} GiB/s  {r['cpu'] / (total / (1 << 30)):6.2f} CPU-s/GiB  "
                  f"peak RSS {r['rss_kib'] / 1024:6.1f} MiB (epoch's own {r['own_kib'] / 1024:5.1f}; "
                  f"anon {r['at_peak']['RssAnon'] / 1024:.1f}, file {r['at_peak']['RssFile'] / 1024:.1f}, "
                  f"shmem {r['at_peak']['RssShmem'] / 1024:.1f}, hugetlb {r['at_peak']['HugetlbPages'] / 1024:.1f}; "
                  f"{r['procs']} processes)  peak PSS {r['pss_kib'] / 1024:6.1f} MiB  "
                  f"cached before {cached / total:.1%}"
                  + (f"  pool {r['pool'] >> 20} MiB (prefetch {r['settings'][0]}, keep {r['settings'][1]}), "
                     f"O_DIRECT in {r['opened'][0]} of {r['opened'][1]} shard opens"
                     if r["pool"] else ""), flush=True)
    if len(set(checks.values())) != 1:
        raise SystemExit(f"the modes read different bytes: checksums {checks}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    worst = max(r["cached"] for rs_ in runs.values() for r in rs_)
    print(f"page cache after each drop: at most {worst / total:.2%} of the shards resident (mincore, {worst >> 10} KiB)"
          + ("" if worst <= total // 100 else
             ": WARNING: the cache was not dropped, the DataLoader's reads were partly from memory"))
    gib = total / (1 << 30)
    med = {m: {"sps": statistics.median(r["records"] / r["wall"] for r in runs[m]),
               "gibs": statistics.median(total / r["wall"] / (1 << 30) for r in runs[m]),
               "cpu": statistics.median(r["cpu"] / gib for r in runs[m]),
               "rss": statistics.median(r["rss_kib"] / 1024 for r in runs[m]),
               "pss": statistics.median(r["pss_kib"] / 1024 for r in runs[m]),
               "own": statistics.median(r["own_kib"] / 1024 for r in runs[m]),
               "huge": statistics.median(r["at_peak"]["HugetlbPages"] / 1024 for r in runs[m])} for m in modes}
    print()
    print("| mode | samples/s | GiB/s | CPU-s per GiB | peak RSS MiB | of it hugetlb | peak PSS MiB | epoch's own MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in modes:
        v = med[m]
        print(f"| {m} | {v['sps']:.0f} | {v['gibs']:.2f} | {v['cpu']:.2f} | {v['rss']:.1f} | {v['huge']:.0f} | "
              f"{v['pss']:.1f} | {v['own']:.1f} |")
    peers = [m for m in modes if m != "hcomm"]
    if "hcomm" in med and peers:
        h = med["hcomm"]
        best = max(peers, key=lambda m: med[m]["sps"])
        cheap = min(peers, key=lambda m: med[m]["cpu"])
        small = min(peers, key=lambda m: med[m]["rss"])
        small_pss = min(peers, key=lambda m: med[m]["pss"])
        print()
        print(f"hcomm vs the best DataLoader ({best}): samples/s {h['sps'] / med[best]['sps']:.2f}x (goal >= 1.5x); "
              f"CPU-s per GiB vs the cheapest ({cheap}) {h['cpu'] / med[cheap]['cpu']:.2f}x (goal <= 0.5x); "
              f"peak RSS vs the smallest ({small}) {h['rss'] / med[small]['rss']:.3f}x (goal <= 1x; "
              f"{h['rss'] - med[small]['rss']:+.1f} MiB); peak PSS vs the smallest ({small_pss}) "
              f"{h['pss'] / med[small_pss]['pss']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
