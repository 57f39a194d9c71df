#!/usr/bin/env python3
"""Transfer/compute overlap with PyTorch, in the seed's spirit.

Batches of tensors are staged in hcomm pool memory (torch.from_dlpack over
the pool: no copy), moved to the device and back (one H2D and one D2H
transfer per batch) while the previous batch computes on the CPU. The
same work runs three ways, in the same process, one after the other:

  transfers only      every batch's round trip, waited for in turn
  serial              round trip, then compute, batch after batch
  overlapped          batch i+1's round trip in flight while batch i computes

overlap = (serial - overlapped) / min(transfers, compute): the share of the
shorter of the two that was hidden behind the other (100%: perfect).

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
    ap.add_argument("--reps", type=int, default=3, help="runs of each mode; the median is reported")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the test suite)")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.batch_mib, args.reps = 6, 0.25, 1
    torch.set_num_threads(1)

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

        def compute(i, k):
            t = y[i % slots]
            for _ in range(k):
                t = torch.tanh(t @ w) if t.shape[1] == cols else t
            return float(t[0, 0])

        # Calibrate: compute as long as a round trip.
        t0 = time.perf_counter()
        for i in range(4):
            round_trip(i).result()
        trip = (time.perf_counter() - t0) / 4
        t0 = time.perf_counter()
        compute(0, 1)
        one = time.perf_counter() - t0
        k = max(1, round(trip / one))

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

        def timed(fn):
            ts = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            return sorted(ts)[len(ts) // 2]

        tt, tc, ts, to = timed(transfers_only), timed(compute_only), timed(serial), timed(overlapped)
        # The last round trip moved its batch byte for byte.
        last = args.batches - 1
        assert torch.equal(x[last % slots], y[last % slots]), "round trip through the device changed the batch"

    hidden = (ts - to) / min(tt, tc)
    load = os.getloadavg()
    print(f"batches: {args.batches} x {nbytes >> 10} KiB ({rows}x{cols} float32), compute: {k} x (tanh(x @ w)) per batch")
    print(f"transfers only  {tt * 1e3:8.1f} ms")
    print(f"compute only    {tc * 1e3:8.1f} ms")
    print(f"serial          {ts * 1e3:8.1f} ms")
    print(f"overlapped      {to * 1e3:8.1f} ms")
    print(f"overlap         {hidden * 100:8.1f} %   ((serial - overlapped) / min(transfers, compute))")
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
