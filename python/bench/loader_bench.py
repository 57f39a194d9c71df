"""hcomm.data's loader against torch's DataLoader on the same shards, side by side in one run.

    python bench/loader_bench.py [--gib 1] [--record-kib 128] [--batch 32] [--reps 3] [--dir DIR]

Writes --gib GiB of --record-kib KiB records (8 shards) once under --dir,
then runs one epoch per mode, the modes taking turns --reps times, each in a
fresh child process (its CPU time and peak RSS its own, workers included):

  hcomm        hcomm.data.Loader(format="torch"): O_DIRECT reads into pool memory, prefetch
               --prefetch (default 2: a pool of 4 batches)
  dataloader0  torch DataLoader(num_workers=0) over a Dataset that reads each record with
               NumPy (numpy.fromfile at its offset), default collate (torch.stack)
  dataloader2  the same with num_workers=2 (fork)

All read the records in the same order (shards shuffled, records shuffled
within shards, one seed) in batches of --batch, and touch every batch (one
byte of each record summed). Before each run the shards' pages are dropped
from the page cache (posix_fadvise DONTNEED), so every run reads the disk.
Reported per mode: the median of the runs of samples/s and GiB/s, CPU
seconds (user + system, the child and its workers) per GiB read, peak RSS
(the child plus its workers, sampled every 20 ms), and hcomm's ratio to
the best DataLoader. The machine's load average is printed: on a shared,
busy machine the numbers are as measured under that load.
"""

import argparse
import json
import os
import resource
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


def _rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


class PeakRSS(threading.Thread):
    """The peak of this process's RSS plus its children's, sampled."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self):
        me = os.getpid()
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, _rss_kib(me) + sum(_rss_kib(c) for c in _children(me)))


def child(mode, paths, rs, batch, seed, prefetch):
    """One epoch of mode; prints a JSON line."""
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
    rss = PeakRSS()
    rss.start()
    t0, c0 = time.perf_counter(), os.times()
    n = 0
    check = 0
    if mode == "hcomm":
        with data.Loader(paths, record_size=rs, batch_size=batch, shuffle=True, seed=seed, format="torch",
                         prefetch=prefetch) as L:
            for x in L:
                check += int(x[:, 1].sum())
                n += x.shape[0]
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
    rss.stop.set()
    rss.join()
    # This process's CPU and its reaped workers'.
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + \
        (c1.children_system - c0.children_system)
    print(json.dumps({"mode": mode, "records": n, "wall": wall, "cpu": cpu, "rss_kib": rss.peak, "check": check}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--record-kib", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=2,
                    help="the loader's prefetch (its pool: keep 1 + 1 + prefetch batches)")
    ap.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/var/tmp"), "hcomm-loader-bench"))
    ap.add_argument("--modes", default="hcomm,dataloader0,dataloader2")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    rs = a.record_kib << 10
    if a.child:
        paths = sorted(os.path.join(a.dir, p) for p in os.listdir(a.dir) if p.endswith(".bin"))
        child(a.child, paths, rs, a.batch, a.seed, a.prefetch)
        return 0
    t = time.time()
    paths = make_shards(a.dir, a.gib, rs)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"loader bench: {total / (1 << 30):.2f} GiB in {len(paths)} shards of {a.record_kib} KiB records "
          f"under {a.dir} (made in {time.time() - t:.1f} s), batch {a.batch}, loader prefetch {a.prefetch} "
          f"({(a.prefetch + 2) * a.batch * rs >> 20} MiB of pool), {a.reps} runs per mode, "
          f"page cache dropped before each run")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          f"(a shared machine: the numbers are as measured under this load)")
    modes = a.modes.split(",")
    runs = {m: [] for m in modes}
    checks = {}
    for rep in range(a.reps):
        for m in modes:
            drop_cache(paths)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", m, "--dir", a.dir,
                                  "--record-kib", str(a.record_kib), "--batch", str(a.batch), "--seed", str(a.seed),
                                  "--prefetch", str(a.prefetch)],
                                 check=True, capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            if r["records"] * rs != total:
                raise SystemExit(f"{m}: read {r['records']} records, want {total // rs}")
            checks.setdefault(m, r["check"])
            runs[m].append(r)
            print(f"  run {rep + 1} {m:12s} {r['records'] / r['wall']:8.0f} samples/s  "
                  f"{total / r['wall'] / (1 << 30):6.2f} GiB/s  {r['cpu'] / (total / (1 << 30)):6.2f} CPU-s/GiB  "
                  f"peak RSS {r['rss_kib'] / 1024:7.1f} MiB", flush=True)
    if len(set(checks.values())) != 1:
        raise SystemExit(f"the modes read different bytes: checksums {checks}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    gib = total / (1 << 30)
    med = {m: {"sps": statistics.median(r["records"] / r["wall"] for r in runs[m]),
               "gibs": statistics.median(total / r["wall"] / (1 << 30) for r in runs[m]),
               "cpu": statistics.median(r["cpu"] / gib for r in runs[m]),
               "rss": statistics.median(r["rss_kib"] / 1024 for r in runs[m])} for m in modes}
    print()
    print("| mode | samples/s | GiB/s | CPU-s per GiB | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for m in modes:
        v = med[m]
        print(f"| {m} | {v['sps']:.0f} | {v['gibs']:.2f} | {v['cpu']:.2f} | {v['rss']:.0f} |")
    peers = [m for m in modes if m != "hcomm"]
    if "hcomm" in med and peers:
        h = med["hcomm"]
        best = max(peers, key=lambda m: med[m]["sps"])
        cheap = min(peers, key=lambda m: med[m]["cpu"])
        small = min(peers, key=lambda m: med[m]["rss"])
        print()
        print(f"hcomm vs the best DataLoader ({best}): samples/s {h['sps'] / med[best]['sps']:.2f}x (goal >= 1.5x); "
              f"CPU-s per GiB vs the cheapest ({cheap}) {h['cpu'] / med[cheap]['cpu']:.2f}x (goal <= 0.5x); "
              f"peak RSS vs the smallest ({small}) {h['rss'] / med[small]['rss']:.2f}x (goal <= 1x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
