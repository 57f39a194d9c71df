#!/usr/bin/env python3
"""Transfer/compute overlap with PyTorch, in the seed's spirit.

Batches of tensors are staged in hcomm pool memory (torch.from_dlpack over
the pool: no copy), moved to the device and back (one H2D and one D2H
transfer per batch) while the previous batch computes on the CPU. The
same work runs three ways, in the same process, one after the other:

  transfers only      every batch's round trip, waited for in turn
  serial              round trip, then compute, batch after batch
  overlapped          batch i+1's round trip in flight while batch i computes

overlap = (transfers + compute - overlapped) / min(transfers, compute): the
share of the shorter phase hidden behind the longer one (0: none, 100%:
perfect), and speed-up = serial / overlapped.

    HCOMM_LIBRARY=bin/capi/libhcomm.so python3 python/examples/torch_overlap.py

The device is vfio-mock by default (its DMA engine is a goroutine that
copies); --target memory runs host copies instead. torch uses one thread,
so the other CPU is the device's.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import hcomm  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--batch-mib", type=float, default=4.0, help="MiB per batch")
    ap.add_argument("--reps", type=int, default=5, help="runs of each mode, taking turns; medians are reported")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the test suite)")
    ap.add_argument("--switch-ms", type=float, default=0.5, help="sys.setswitchinterval, in ms (Python's default: 5)")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.batch_mib, args.reps = 6, 0.25, 1
    torch.set_num_threads(1)
    # Completion callbacks (the H2D's submits the D2H) need the GIL; while
    # the main thread runs Python between torch calls, a waiting thread gets
    # it only after the switch interval (5 ms by default): hand it over
    # sooner.
    sys.setswitchinterval(args.switch_ms / 1000)

    nbytes = int(args.batch_mib * (1 << 20)) // 4096 * 4096
    cols = 256
    rows = nbytes // 4 // cols
    slots = 2  # double buffering
    with hcomm.Engine(pool_size=max(64 << 20, 4 * slots * nbytes), queue_depth=64,
                      dev_mem_size=max(16 << 20, 2 * slots * nbytes)) as eng:
        host = [eng.alloc(nbytes) for _ in range(slots)]
        back = [eng.alloc(nbytes) for _ in range(slots)]
        dev = [eng.alloc_dev(nbytes) for _ in range(slots)]
        # Tensors over pool memory: what the device reads and writes is
        # what torch computes on (same addresses).
        x = [torch.from_dlpack(h).view(torch.float32).view(rows, cols) for h in host]
        y = [torch.from_dlpack(b).view(torch.float32).view(rows, cols) for b in back]
        assert x[0].data_ptr() == host[0].ptr
        w = torch.randn(cols, cols)

        def stage(i):
            x[i % slots].copy_(torch.full((rows, cols), float(i)))  # the batch's data

        def round_trip(i):
            s = i % slots
            return _chain(eng, host[s], dev[s], back[s])

        crow = rows  # rows of the batch the compute step uses

        def compute(i, k):
            t = y[i % slots][:crow]
            for _ in range(k):
                t = torch.tanh(t @ w)
            return float(t[0, 0])

        # Calibrate: compute about as long as a round trip (fewer rows, or
        # more repetitions). Medians of 5.
        def med(fn):
            ts = []
            for j in range(5):
                t0 = time.perf_counter()
                fn(j)
                ts.append(time.perf_counter() - t0)
            return sorted(ts)[2]

        for j in range(4):  # warm-up: first transfers and first matmuls are slow
            round_trip(j).result()
            compute(j, 1)
        trip = med(lambda j: round_trip(j).result())
        one = med(lambda j: compute(j, 1))
        k = max(1, round(trip / one))
        if one > trip:
            crow = max(1, int(rows * trip / one))

        def transfers_only():
            for i in range(args.batches):
                stage(i)
                round_trip(i).result()

        def compute_only():
            for i in range(args.batches):
                stage(i)
                compute(i, k)

        def serial():
            for i in range(args.batches):
                stage(i)
                round_trip(i).result()
                compute(i, k)

        def overlapped():
            stage(0)
            pending = round_trip(0)
            for i in range(args.batches):
                pending.result()  # batch i is back in host memory
                if i + 1 < args.batches:
                    stage(i + 1)
                    pending = round_trip(i + 1)  # in flight while batch i computes
                compute(i, k)

        # The four modes take turns, reps times (load changes over time
        # hits them alike); medians.
        modes = [transfers_only, compute_only, serial, overlapped]
        times = [[] for _ in modes]
        for _ in range(args.reps):
            for m, fn in enumerate(modes):
                t0 = time.perf_counter()
                fn()
                times[m].append(time.perf_counter() - t0)
        tt, tc, ts, to = (sorted(t)[len(t) // 2] for t in times)
        # The last round trip moved its batch byte for byte.
        last = args.batches - 1
        assert torch.equal(x[last % slots], y[last % slots]), "round trip through the device changed the batch"

    # The share of the shorter phase hidden behind the longer one: 0 when
    # overlapped takes transfers + compute, 1 when it takes max(transfers,
    # compute). Against the phases measured alone; serial is printed too
    # (it also pays for every switch between the two, e.g. the reaper
    # going to sleep during compute and waking for the next transfer).
    hidden = (tt + tc - to) / min(tt, tc)
    load = os.getloadavg()
    print(f"batches: {args.batches} x {nbytes >> 10} KiB ({rows}x{cols} float32), compute per batch: "
          f"{k} x tanh(x[:{crow}] @ w), w {cols}x{cols}")
    print(f"transfers only  {tt * 1e3:8.1f} ms")
    print(f"compute only    {tc * 1e3:8.1f} ms")
    print(f"serial          {ts * 1e3:8.1f} ms")
    print(f"overlapped      {to * 1e3:8.1f} ms")
    print(f"overlap         {hidden * 100:8.1f} %   ((transfers + compute - overlapped) / min(transfers, compute))")
    print(f"speed-up        {ts / to:8.2f} x   (serial / overlapped)")
    print(f"load average    {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    return hidden


def _chain(eng, host, dev, back):
    """H2D, then D2H from its completion callback: the pair runs without the
    Python thread, which computes meanwhile. Returns the D2H's future."""
    import concurrent.futures

    out = concurrent.futures.Future()

    def h2d_done(t):
        if t.exception() is not None:
            out.set_exception(t.exception())
            return
        eng.submit(dev, back, callback=lambda d: _copy_result(d, out))

    eng.submit(host, dev, callback=h2d_done)
    return out


def _copy_result(src, dst):
    if src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


if __name__ == "__main__":
    main()
