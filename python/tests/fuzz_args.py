"""The Python package's argument checks, fuzzed: every public function of
hcomm and hcomm.data called with random handles, sizes, offsets, flags and
types.

    python fuzz_args.py [--time 10s] [--seed N]      (make fuzz, FUZZTIME=10s)
    python fuzz_args.py --seed N --rounds 1          (replays round N)

A seeded random-argument harness in Python's own code (atheris, the
coverage-guided fuzzer, is not installable offline here). Each round is a
worker process with its own seed (the first round's is --seed, default the
time; the next ones count up) that makes a few hundred calls chosen by that
seed: engines of every target (some with absurd configurations), host and
device buffers, views at random offsets, registrations of NumPy arrays,
mmaps and bytearrays, transfers and batches between live, freed, foreign
and forged buffers, copies, waits with random timeouts, DLPack and NumPy
views, notifications sent and waited for, closes in the middle of it all,
and hcomm.data loaders over shards it writes (fixed-size records, .npy
files, truncated, corrupt headers, directories, missing files), most with
arguments that are all valid (so that they are iterated: a few batches or
every epoch to its end), the others with random ones.
Arguments are edge values (0, -1, powers of two and their neighbours,
2^63, 2^64, floats, NaN, strings, None, objects) as often as plausible ones.

What it checks, per call: the call returns, or raises an hcomm.HcommError
(InvalidArgument for a bad argument; the library's own code otherwise) — or,
where Python's protocols fix the exception, BufferError from __dlpack__ and
concurrent.futures.TimeoutError from a wait that ran out. Anything else
(TypeError, AttributeError, ctypes.ArgumentError, OverflowError, ...) is a
failure naming the call. A worker that dies by a signal (a crash) or hangs
(faulthandler ends it after --hang seconds) is a failure, reported with its
seed and its last calls. At the end of a round every engine and loader is
closed and the worker checks that nothing leaked: no transfer pending, no
DLPack tensor alive, no exception lost in a ctypes callback, the same file
descriptors open as before the first call (after a warm-up that opens what
the Go runtime and UCX keep for the life of the process).

What it does not do is what the package's documented rules forbid, as a C
program may not: touch a buffer's memory after free() or the engine's
close() (it touches views right after making them), register memory that is
not the object's, block or wait in a callback.
"""

import argparse
import concurrent.futures
import gc
import json
import mmap
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

EDGE = [0, 1, 2, 3, 7, 8, 63, 64, 65, 511, 512, 4095, 4096, 4097, 8191, 65535, 65536, 1 << 20, (1 << 20) + 1,
        1 << 21, 16 << 20, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 40) + 1, 1 << 44,
        1 << 46, (1 << 46) + 1, 1 << 52, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, 1 << 100]
BIG_OK = 64 << 20  # the largest pool or device memory a call may really get (the machine is shared)


def parse_duration(s):
    """A Go duration (make fuzz's FUZZTIME: "10s", "1m30s", "500ms") in
    seconds; "Nx" (N rounds) as ("rounds", N)."""
    s = s.strip()
    if s.endswith("x") and s[:-1].isdigit():
        return ("rounds", int(s[:-1]))
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)", s)
    if not parts or "".join(a + b for a, b in parts) != s:
        raise SystemExit(f"fuzz_args: duration {s!r}: want a Go duration such as 10s, 1m30s, or Nx")
    return sum(float(a) * units[b] for a, b in parts)


# ---- the worker -------------------------------------------------------------


class Failure(Exception):
    pass


class Worker:
    def __init__(self, seed, seconds, trace_path, max_ops):
        import hcomm
        import hcomm.data

        self.hcomm, self.data = hcomm, hcomm.data
        self.r = random.Random(seed)
        self.seed, self.deadline, self.max_ops = seed, time.monotonic() + seconds, max_ops
        self.trace = open(trace_path, "w", buffering=1) if trace_path else None
        self.tmp = tempfile.mkdtemp(prefix="hcomm-fuzz-")
        # A path that cannot exist and cannot be created (its directory is
        # missing): the fuzzer runs as root and must not write outside tmp.
        self.missing = os.path.join(self.tmp, "missing-dir", "x")
        self.engines, self.host, self.dev, self.regs, self.views, self.peers = [], [], [], [], [], []
        self.transfers, self.loaders, self.keep = [], [], []
        self.ops = 0
        self.stats = {}  # call -> [returned, raised an HcommError]
        self.cb_calls = 0
        try:
            import numpy

            self.np = numpy
        except ImportError:
            self.np = None
        self.unraisable = []
        sys.unraisablehook = lambda u: self.unraisable.append(f"{u.exc_type.__name__}: {u.exc_value} ({u.object!r})")
        import logging

        for name in ("hcomm", "hcomm.data"):
            lg = logging.getLogger(name)
            lg.propagate = False
            lg.addHandler(logging.NullHandler())
        self.shards = self.make_shards()

    # -- random values
    def anyint(self):
        r = self.r
        k = r.random()
        if k < 0.6:
            v = r.choice(EDGE)
            v += r.choice((0, 0, 0, -1, 1))
            return -v if r.random() < 0.1 else v
        if k < 0.9:
            return r.randrange(0, 1 << r.choice((4, 8, 12, 16, 20, 24)))
        return r.randrange(-(1 << 70), 1 << 70)

    def anyval(self):
        r = self.r
        return r.choice([None, True, False, 1.5, -0.0, float("nan"), float("inf"), "", "x", "12", b"\x00", [1],
                         (1, 2), {}, object(), 2 ** 200, -1, 1j, self.anyint()])

    def size(self, limit=1 << 20):
        """Mostly a plausible size below limit, sometimes an edge value or
        not an int at all."""
        k = self.r.random()
        if k < 0.7:
            return self.r.choice((1, 8, 64, 4096, 8192, 65536, self.r.randrange(1, limit + 1)))
        if k < 0.93:
            return self.anyint()
        return self.anyval()

    def bounded(self, v):
        """v, unless it is an int a call could really get that much memory
        for (> BIG_OK and below where the library refuses): then BIG_OK."""
        if isinstance(v, int) and not isinstance(v, bool) and BIG_OK < v < (1 << 47):
            return BIG_OK
        return v

    def timeout(self):
        return self.r.choice([None, 0, 0.001, 0.05, 0.5, 2, -1, -0.5, float("nan"), float("inf"), 1e30, "1", True,
                              1 << 80])

    def pick(self, xs):
        return self.r.choice(xs) if xs else None

    # -- memory handles: live, freed, foreign, forged, or not memory at all
    def memory(self):
        r, hc = self.r, self.hcomm
        pools = [self.host, self.dev, self.regs, self.views]
        k = r.random()
        if k < 0.75:
            xs = r.choice(pools) or self.host or self.dev
            m = self.pick(xs)
            if m is not None:
                return m
        if k < 0.85 and (self.host or self.dev):
            base = self.pick(self.host or self.dev)
            f = hc.Region.__new__(hc.Region)  # a forged view: any address, any length
            f.base, f.offset, f.nbytes = base, self.anyint(), self.anyint()
            f.ptr = base.ptr + r.choice((0, -1, 1, 4096, -4096, 1 << 40, r.randrange(1 << 20)))
            return f
        if k < 0.9:
            f = hc.Region.__new__(hc.Region)
            f.base, f.offset, f.nbytes = None, 0, self.anyint()
            f.ptr = r.choice((0, 1, hc.DEV_ADDR_BASE, hc.DEV_ADDR_BASE + self.anyint(), hc.REMOTE_ADDR_BASE,
                              hc.REMOTE_ADDR_BASE | r.randrange(1 << 16) << 44, self.anyint(), -1, None, "x"))
            return f
        if k < 0.95 and self.peers:
            p = self.pick(self.peers)
            if r.random() < 0.2:
                return p.notification
            try:
                return p.at(self.anyint() & ((1 << 44) - 1), self.size())
            except hc.HcommError:
                pass
        return self.anyval()

    def engine(self):
        e = self.pick(self.engines)
        return e if e is not None and self.r.random() < 0.95 else None

    def callback(self):
        k = self.r.random()
        if k < 0.5:
            return None
        if k < 0.8:
            def cb(t):
                self.cb_calls += 1
            return cb
        if k < 0.9:
            def bad(t):
                raise RuntimeError("a callback that raises")
            return bad
        return self.anyval()

    # -- shards for hcomm.data
    def make_shards(self):
        d = os.path.join(self.tmp, "shards")
        os.makedirs(d)
        out = {"dir": d, "files": []}
        for i in range(3):
            p = os.path.join(d, f"rec-{i}.bin")
            with open(p, "wb") as f:
                f.write(os.urandom(4096 * (3 + i)))
            out["files"].append(p)
        p = os.path.join(self.tmp, "odd.bin")
        with open(p, "wb") as f:
            f.write(os.urandom(1000))
        out["odd"] = p
        out["empty"] = os.path.join(self.tmp, "empty.bin")
        open(out["empty"], "wb").close()
        out["npy"] = []
        for j, hdr in enumerate(self.npy_headers()):
            p = os.path.join(self.tmp, f"a{j}.npy")
            with open(p, "wb") as f:
                f.write(hdr)
                f.write(os.urandom(self.r.choice((0, 64, 4096, 10000))))
            out["npy"].append(p)
        sub = os.path.join(self.tmp, "subdir")
        os.makedirs(sub)
        out["subdir"] = sub
        # Valid .npy shards, alike (float32 rows of 16), in a directory of their own.
        out["npy_ok"] = []
        if self.np is not None:
            good = os.path.join(self.tmp, "npy-ok")
            os.makedirs(good)
            for j, rows in enumerate((5, 12, 1)):
                p = os.path.join(good, f"ok{j}.npy")
                self.np.save(p, self.np.arange(rows * 16, dtype=self.np.float32).reshape(rows, 16))
                out["npy_ok"].append(p)
        return out

    def npy_headers(self):
        r = self.r
        heads = []
        for _ in range(6):
            descr = r.choice(["'<f4'", "'|u1'", "'|O'", "'<f0'", "'<U3'", "'>i8'", "[('a', '<f4')]", "'xyz'", "1"])
            shape = r.choice(["(4, 16)", "(0,)", "()", "(-1, 4)", "(3, 0)", "(2**40, 8)", "(5,)", "'a'", "(1, 2, 3)"])
            fortran = r.choice(["False", "True", "'x'"])
            text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"
            if r.random() < 0.2:
                text = text[: r.randrange(len(text))]
            body = text.encode("latin1")
            major = r.choice((1, 1, 2, 3, 4))
            pad = (64 - (10 + len(body) + 1) % 64) % 64
            body = body + b" " * pad + b"\n"
            if major == 1:
                h = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little")
            else:
                h = b"\x93NUMPY" + bytes((major, 0)) + len(body).to_bytes(4, "little")
            if r.random() < 0.1:
                h = h[: r.randrange(len(h))]
            elif r.random() < 0.1:
                h = b"\x93NUMPX" + h[6:]
            heads.append(h + body)
        return heads

    # -- the calls
    def op_engine(self):
        r, hc = self.r, self.hcomm
        target = r.choice(["mock", "mock", "memory", "memory", "file", "vfio", "remote", "nope", None, 3, ["mock"]])
        kw = {}
        if r.random() < 0.7:
            kw["pool_size"] = self.bounded(r.choice((64 << 10, 1 << 20, 4 << 20, self.anyint(), self.anyval())))
        if r.random() < 0.4:
            kw["queue_depth"] = r.choice((1, 2, 64, 100, 0, self.anyint(), self.anyval()))
        if r.random() < 0.4:
            kw["align"] = r.choice((8, 64, 4096, 3, 0, self.anyint(), self.anyval()))
        if r.random() < 0.4:
            kw["dev_mem_size"] = self.bounded(r.choice((0, 1 << 20, self.anyint(), self.anyval())))
        if target == "file" or r.random() < 0.15:
            kw["path"] = r.choice([os.path.join(self.tmp, f"target-{r.randrange(4)}.bin"), self.shards["subdir"],
                                   self.missing, "", "a\0b", "\udcff", os.fsencode(os.path.join(self.tmp, "target-b.bin")), 5, None, "0000:00:00.0",
                                   "127.0.0.1:0", "300.1.1.1:1", ":::"])
        if target == "remote":
            kw.setdefault("path", r.choice([None, "127.0.0.1:0"]))
            kw["shm"] = r.choice((False, True, 0, "x"))
        self.log("Engine", target, kw)
        e = hc.Engine(target=target, **kw)
        self.engines.append(e)
        if len(self.engines) > 6:
            self.close_engine(self.engines[0])

    def close_engine(self, e):
        try:
            e.close(timeout=self.r.choice((None, 0, 0.01, 1)))
        except self.hcomm.HcommError:
            pass
        if e in self.engines:
            self.engines.remove(e)
        self.host = [b for b in self.host if b._eng is not e]
        self.dev = [b for b in self.dev if b._eng is not e]

    def op_close(self):
        e = self.engine()
        if e is None:
            return
        t = self.timeout()
        self.log("close", t)
        try:
            e.close(t)
        finally:
            if e.closed:
                self.close_engine(e)

    def op_alloc(self):
        e = self.engine()
        if e is None:
            return
        n = self.bounded(self.size())
        self.log("alloc", n)
        self.host.append(e.alloc(n))

    def op_alloc_dev(self):
        e = self.engine()
        if e is None:
            return
        n = self.bounded(self.size())
        tgt = self.r.choice((0, 0, 1, 2, self.anyint(), self.anyval()))
        self.log("alloc_dev", n, tgt)
        self.dev.append(e.alloc_dev(n, target=tgt))

    def op_free(self):
        xs = self.r.choice([self.host, self.dev])
        b = self.pick(xs)
        if b is None:
            return
        self.log("free", type(b).__name__, b.nbytes)
        try:
            b.free()
        finally:
            if b._freed:  # the buffer stays in the list: a freed handle for later calls
                self.views = [v for v in self.views if getattr(v, "base", None) is not b]

    def op_view(self):
        m = self.pick(self.host + self.dev + self.regs + self.views)
        if m is None:
            return
        off = self.r.choice((0, 1, 4096, self.anyint(), self.anyval()))
        n = self.r.choice((None, 1, 4096, self.anyint(), self.anyval()))
        self.log("view", type(m).__name__, m.nbytes, off, n)
        self.views.append(m.view(off, n))
        if len(self.views) > 64:
            self.views.pop(0)

    def op_register(self):
        e = self.engine()
        if e is None:
            return
        r, np = self.r, self.np
        n = r.choice((4096, 8192, 65536, 4095, 1, 0))
        k = r.random()
        if np is not None and k < 0.35:
            obj = self.hcomm.empty(max(1, n), r.choice(("uint8", "float32", "int64")))
            if r.random() < 0.2:
                obj = obj[::2]  # not contiguous
            elif r.random() < 0.2:
                obj = obj[1:]  # not aligned
            elif r.random() < 0.1:
                obj.flags.writeable = False
        elif k < 0.55:
            obj = mmap.mmap(-1, max(1, n))
        elif k < 0.7:
            obj = bytearray(n)
        elif k < 0.8:
            obj = bytes(n)
        elif k < 0.85 and np is not None:
            obj = np.zeros(0)
        else:
            obj = self.anyval()
        self.log("register", type(obj).__name__, n)
        reg = e.register(obj)
        self.regs.append(reg)
        self.keep.append(obj)

    def op_unregister(self):
        e = self.engine()
        if e is None:
            return
        reg = self.pick(self.regs) if self.r.random() < 0.85 else self.memory()
        self.log("unregister", type(reg).__name__)
        e.unregister(reg)

    def op_submit(self):
        e = self.engine()
        if e is None:
            return
        src, dst = self.memory(), self.memory()
        n = self.r.choice((None, None, 1, 4096, self.anyint(), self.anyval()))
        self.log("submit", type(src).__name__, type(dst).__name__, n)
        self.transfers.append(e.submit(src, dst, n, self.callback()))

    def op_batch(self):
        e = self.engine()
        if e is None:
            return
        r = self.r
        k = r.random()
        if k < 0.1:
            arg = self.anyval()
        else:
            arg = []
            for _ in range(r.choice((0, 1, 2, 8, 33))):
                ent = [self.memory(), self.memory(), r.choice((None, 4096, self.anyint())), self.callback()]
                arg.append(tuple(ent[: r.choice((2, 2, 3, 4, 1, 5))]) if r.random() < 0.95 else self.anyval())
        self.log("submit_batch", len(arg) if isinstance(arg, list) else arg)
        self.transfers += e.submit_batch(arg)

    def op_copy(self):
        e = self.engine()
        if e is None:
            return
        r = self.r
        dst, src = self.memory(), self.memory()
        n = r.choice((None, 4096, self.anyint(), self.anyval()))
        chunk = r.choice((0, 4096, 1 << 20, self.anyint(), self.anyval()))
        depth = r.choice((0, 1, 4, self.anyint(), self.anyval()))
        self.log("copy", type(dst).__name__, type(src).__name__, n, chunk, depth)
        self.transfers.append(e.copy(dst, src, n, chunk, depth, self.callback()))

    def op_add_target(self):
        e = self.engine()
        if e is None:
            return
        r = self.r
        t = r.choice(["mock", "memory", "file", "vfio", "remote", "x", None, 1])
        path = r.choice([None, None, os.path.join(self.tmp, f"t{r.randrange(3)}.bin"), self.missing, "a\0",
                         self.anyval()])
        dm = self.bounded(r.choice((0, 1 << 20, self.anyint(), self.anyval())))
        self.log("add_target", t, path, dm)
        e.add_target(t, path, dm)

    def op_wait(self):
        t = self.pick(self.transfers)
        if t is None:
            return
        to = self.timeout()
        self.log("result", t.id, to)
        try:
            t.result(to)
        except concurrent.futures.TimeoutError:
            pass
        if t.done():
            self.transfers.remove(t)

    def op_remote(self):
        e = self.engine()
        if e is None:
            return
        r = self.r
        k = r.random()
        if k < 0.3:
            self.log("listen_addr")
            _ = e.listen_addr
        elif k < 0.6:
            m = self.memory()
            self.log("remote_offset", type(m).__name__)
            e.remote_offset(m)
        elif k < 0.85:
            addr = r.choice(["127.0.0.1:1", "127.0.0.1:0", "", "x", "1.2.3.4", "[::1]:5", "a\0b", self.anyval()])
            others = [o for o in self.engines if o is not e and not o.closed]
            if others and r.random() < 0.5:
                try:
                    addr = self.pick(others).listen_addr or addr
                except self.hcomm.HcommError:
                    pass
            to = r.choice((0, 0.05, 0.3, -1, float("nan"), None if addr == "127.0.0.1:1" else 0.3, "x"))
            self.log("connect", addr, to)
            self.peers.append(e.connect(addr, to))
        else:
            p = self.pick(self.peers)
            if p is not None:
                if r.random() < 0.5:
                    self.log("disconnect", p.id)
                    p.disconnect()
                else:
                    off, n = self.anyint(), self.anyval() if r.random() < 0.3 else self.size()
                    self.log("at", p.id, off, n)
                    self.views.append(p.at(off, n))

    def op_notify(self):
        """Notifications: sent to live, disconnected and forged peers with
        messages of every size and type, after puts or alone; waited for
        (bounded timeouts only: nobody may send), as futures (cancelled) and
        in asyncio."""
        e = self.engine()
        if e is None:
            return
        r, hc = self.r, self.hcomm
        k = r.random()
        msg = r.choice((b"x", b"", b"y" * 256, b"z" * 257, bytearray(8), memoryview(b"abcd")[::2], "str", 5, None,
                        self.memory(), self.anyval()))
        if k < 0.25:
            p = self.pick(self.peers) if r.random() < 0.9 else r.choice((None, 0, self.anyval(),
                                                                         hc.Peer(e, r.randrange(1 << 16), "")))
            self.log("notify", p, type(msg).__name__)
            self.transfers.append(e.notify(p, msg, self.callback()))
        elif k < 0.45:
            src, dst = self.memory(), self.memory()
            p = self.pick(self.peers)
            if p is not None and r.random() < 0.7:
                dst = p.at(r.choice((0, 4096, self.anyint() & ((1 << 44) - 1))), r.choice((1, 64, 4096)))
            n = r.choice((None, 64, self.anyint(), self.anyval()))
            self.log("submit notify=", type(src).__name__, type(dst).__name__, n, type(msg).__name__)
            self.transfers.append(e.submit(src, dst, n, self.callback(), notify=msg))
        else:
            to = r.choice((0, 0, 0.001, 0.01, -1, -0.5, float("nan"), "x", True, [1]))
            how = r.choice(("wait", "future", "async"))
            self.log("notification", how, to)
            try:
                if how == "wait":
                    e.wait_notification(to)
                elif how == "future":
                    f = e.notification_future()
                    try:
                        f.result(0.001)
                    finally:
                        f.cancel()
                else:
                    import asyncio

                    try:
                        asyncio.run(e.next_notification(to))
                    except asyncio.TimeoutError:
                        pass
            except concurrent.futures.TimeoutError:
                pass

    def op_touch(self):
        """The buffer protocol, NumPy and DLPack views of a live buffer,
        touched at once and let go."""
        b = self.pick([x for x in self.host if not x._freed and not x._eng.closed] or self.host)
        if b is None:
            return
        r = self.r
        k = r.random()
        if k < 0.3:
            self.log("memoryview", b.nbytes)
            mv = b.memoryview()
            mv[0] = mv[-1]
            del mv
        elif k < 0.55 and self.np is not None:
            dt = r.choice(("uint8", "float32", "int64", "complex128", "O", "V0", "nonsense", None, 5, self.anyval()))
            self.log("numpy", b.nbytes, dt)
            a = b.numpy(dt)
            _ = a[:1].tobytes()
            del a
        elif k < 0.8:
            stream = r.choice((None, -1, 0, 1, "x", -1.0))
            self.log("__dlpack__", b.nbytes, stream)
            try:
                cap = b.__dlpack__(stream=stream)
            except BufferError:
                return
            del cap  # unconsumed: the capsule's destructor frees it
        elif self.np is not None and hasattr(self.np, "from_dlpack"):
            self.log("from_dlpack", b.nbytes)
            a = self.np.from_dlpack(b)  # read-only in NumPy
            _ = int(a[0]) + int(a[-1])
            del a
        else:
            self.log("__array_interface__", b.nbytes)
            _ = b.__array_interface__

    def op_misc(self):
        r, hc = self.r, self.hcomm
        k = r.random()
        if k < 0.3:
            code = r.choice((-22, -1001, -5, 0, -99999, 7, self.anyint(), self.anyval()))
            self.log("error_for", code)
            e = hc.error_for(code, "fuzz")
            assert isinstance(e, hc.HcommError), e
        elif k < 0.6:
            n = self.bounded(self.size())
            dt = r.choice(("uint8", "float64", "O", "V0", None, self.anyval()))
            self.log("empty", n, dt)
            if self.np is not None:
                self.keep.append(hc.empty(n, dt))
        elif k < 0.8:
            self.log("library_version")
            assert hc.library_version() == hc.__version__
        else:
            self.log("pending")
            hc.pending()

    def op_loader(self):
        """A loader: mostly (VALID_LOADER of the calls) one whose arguments
        are all valid, so that iteration (reads, batches, the lifetime
        rule, close mid-epoch) is exercised; else any arguments at all."""
        if self.r.random() < self.VALID_LOADER:
            files, kw = self.valid_loader_args()
        else:
            files, kw = self.any_loader_args()
        self.iterate_loader(files, kw)

    VALID_LOADER = 0.6

    def valid_loader_args(self):
        """Shards that exist and hold whole records, and arguments in
        range that fit one another (each one picked from several)."""
        r, sh = self.r, self.shards
        kw = {}
        if sh["npy_ok"] and r.random() < 0.3:
            files = r.sample(sh["npy_ok"], r.randrange(1, len(sh["npy_ok"]) + 1))
        else:
            files = r.choice([sh["dir"], r.sample(sh["files"], r.randrange(1, len(sh["files"]) + 1))])
            kw["record_size"] = 4096
            dt, shape = r.choice([(None, None), ("uint8", None), ("float32", None), ("float32", (1024,)),
                                  ("<f4", (32, 32)), ("int64", (512,)), ("uint8", (64, 64))])
            if dt is not None:
                kw["dtype"] = dt
            if shape is not None:
                kw["shape"] = shape
        for name, vals in (("batch_size", (1, 2, 3, 5, 7, 16)), ("prefetch", (0, 1, 2, 4)), ("keep", (0, 1, 2)),
                           ("epochs", (1, 1, 2, 3)), ("seed", (0, 1, 7, 1 << 40))):
            if r.random() < 0.7:
                kw[name] = r.choice(vals)
        if r.random() < 0.2:
            # At least keep + 2 batches of 4096-byte records; sometimes less
            # than the prefetch asks (it is lowered to fit).
            b, k = kw.get("batch_size", 32), kw.get("keep", 1)
            kw["memory_budget"] = (k + 2 + r.choice((0, 1, 3))) * b * 4096
        for name in ("shuffle", "drop_last", "return_ids", "direct", "debug"):
            if r.random() < 0.4:
                kw[name] = r.random() < 0.5
        if r.random() < 0.3:
            kw["on_error"] = r.choice(("raise", "skip"))
        if r.random() < 0.1:
            kw["device"] = "mock"
        return files, kw

    def any_loader_args(self):
        r, sh = self.r, self.shards
        k = r.random()
        if k < 0.35:
            files = sh["dir"]
        elif k < 0.5:
            files = r.sample(sh["files"], r.randrange(1, 4)) + r.choice([[], [sh["odd"]], [sh["empty"]],
                                                                          [sh["subdir"]], [self.missing]])
        elif k < 0.75:
            files = r.sample(sh["npy"], r.randrange(1, 3))
        else:
            files = r.choice([[], "", self.missing, os.fsencode(self.tmp), sh["subdir"], [5], 5, None, ["a\0b"], ["\udcff"],
                              self.anyval()])
        kw = {}
        npy = isinstance(files, list) and files and all(str(f).endswith(".npy") for f in files)
        if not npy or r.random() < 0.1:
            kw["record_size"] = r.choice((4096, 4096, 1024, 1000, 8192, 0, -1, self.anyint(), self.anyval()))
        for name, vals in (("batch_size", (1, 2, 3, 7, 0, -1)), ("prefetch", (0, 1, 2, 4, -1)), ("keep", (0, 1, 2, -1)),
                           ("epochs", (0, 1, 2, -1)), ("seed", (0, 1, -5, 1 << 70)),
                           ("memory_budget", (None, 0, 4096, 1 << 20, -1))):
            if r.random() < 0.5:
                kw[name] = r.choice(vals + (self.anyint(), self.anyval()))
        if isinstance(kw.get("memory_budget"), int):
            kw["memory_budget"] = self.bounded(kw["memory_budget"])
        for name, vals in (("dtype", ("uint8", "float32", "<f4", "|O8", "O", "<f0", "V4", "nonsense", 3)),
                           ("shape", (None, (1024,), (32, 32), (0,), (-1,), "ab", 5, (1.5,))),
                           ("format", ("numpy", "torch", "x", None)), ("on_error", ("raise", "skip", "x")),
                           ("shuffle", (True, False)), ("drop_last", (True, False)), ("return_ids", (True, False)),
                           ("direct", (True, False)), ("debug", (True, False))):
            if r.random() < 0.3:
                kw[name] = r.choice(vals)
        if kw.get("format") == "torch":
            kw["format"] = "numpy"  # torch is a second heavy import; the numpy path is the same reads
        if r.random() < 0.2:
            e = self.engine()
            kw["device"] = r.choice(["mock", e, (e, r.choice((0, 1, 5, -1, "x"))), "gpu", 3])
        return files, kw

    def iterate_loader(self, files, kw):
        r, data = self.r, self.data
        self.log("Loader", files, kw)
        L = data.Loader(files, **kw)
        self.loaders.append(L)
        L.order(r.choice((0, 1, 1, 2, self.anyint(), self.anyval())) if r.random() < 0.5 else 0)
        len(L)
        keep = []
        n = r.choice((0, 1, 3, 10, 40, 1 << 30))  # 1 << 30: every epoch to its end
        self.log("iterate", n)
        batches = self.stats.setdefault("op_loader_batches", [0, 0])
        try:
            for i, b in enumerate(L):
                batches[0] += 1
                x = b.host if isinstance(b, data.DeviceBatch) else b
                x = x[0] if isinstance(x, tuple) else x
                _ = bytes(memoryview(x).cast("B")[:1]) if hasattr(x, "__array_interface__") else None
                if r.random() < 0.3 and not kw.get("debug"):
                    keep.append(b)  # kept past the lifetime rule without debug: allowed, its bytes go stale
                if i + 1 >= n:
                    break
                if r.random() < 0.05:
                    self.log("close mid-epoch")
                    L.close()
        finally:
            keep.clear()
            if r.random() < 0.7:
                L.close()

    OPS = [("op_engine", 8), ("op_alloc", 12), ("op_alloc_dev", 8), ("op_free", 5), ("op_view", 8),
           ("op_register", 6), ("op_unregister", 4), ("op_submit", 16), ("op_batch", 6), ("op_copy", 5),
           ("op_add_target", 3), ("op_wait", 8), ("op_close", 2), ("op_remote", 3), ("op_touch", 8), ("op_misc", 3),
           ("op_loader", 5), ("op_notify", 3)]

    def log(self, *what):
        if self.trace:
            self.trace.write(f"{self.ops}: " + " ".join(repr(w)[:160] for w in what) + "\n")

    def call(self, name):
        hc = self.hcomm
        st = self.stats.setdefault(name, [0, 0])
        try:
            getattr(self, name)()
            st[0] += 1
        except hc.HcommError:
            st[1] += 1
        except Exception as e:  # noqa: BLE001 - the point: anything else is a failure
            raise Failure(f"call {self.ops} ({name}) raised {type(e).__module__}.{type(e).__name__}, not an "
                          f"hcomm.HcommError:\n" + "".join(traceback.format_exception(e))) from None

    def warm_up(self):
        """What the Go runtime, io_uring and UCX keep open for the process's
        life, opened once before the descriptors are counted."""
        hc = self.hcomm
        for t in ("mock", "memory", "remote"):
            try:
                with hc.Engine(target=t, pool_size=1 << 20) as e:
                    b = e.alloc(4096)
                    if t != "remote":
                        e.submit(b, e.alloc_dev(4096) if t == "mock" else e.alloc(4096)).result(5)
            except hc.HcommError:
                pass
        try:
            with self.data.Loader(self.shards["files"], record_size=4096, batch_size=2) as L:
                for _ in L:
                    pass
        except hc.HcommError:
            pass
        gc.collect()

    def run(self):
        self.warm_up()
        fds0 = fds()
        names = [n for n, w in self.OPS for _ in range(w)]
        while self.ops < self.max_ops and time.monotonic() < self.deadline:
            self.call(self.r.choice(names))
            self.ops += 1
        self.log("cleanup")
        self.finish()
        shutil.rmtree(self.tmp, ignore_errors=True)
        gc.collect()
        problems = []
        if self.hcomm.pending():
            problems.append(f"{self.hcomm.pending()} transfers still pending after every engine closed")
        from hcomm import _dlpack

        if _dlpack.live():
            problems.append(f"{_dlpack.live()} DLPack tensors alive after every consumer let go")
        if self.unraisable:
            problems.append("exceptions lost in callbacks (sys.unraisablehook):\n  " + "\n  ".join(self.unraisable))
        fds1 = fds()
        if fds1 != fds0:
            extra = {k: v for k, v in fds1.items() if fds0.get(k) != v}
            gone = {k: v for k, v in fds0.items() if fds1.get(k) != v}
            problems.append(f"file descriptors leaked: now open {extra}, closed {gone}")
        if problems:
            raise Failure("; ".join(problems))
        return self.ops

    def finish(self):
        hc = self.hcomm
        for L in self.loaders:
            try:
                L.close()
            except hc.HcommError:
                pass
        for e in list(self.engines):
            try:
                e.close()
            except hc.HcommError:
                pass
        for t in self.transfers:
            if not t.done():
                raise Failure(f"transfer {t.id} not done after its engine closed")
        self.engines, self.host, self.dev, self.regs, self.views, self.peers = [], [], [], [], [], []
        self.transfers, self.loaders, self.keep = [], [], []


def fds():
    out = {}
    for n in os.listdir("/proc/self/fd"):
        try:
            out[int(n)] = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            pass
    return {k: v for k, v in out.items() if not (v.startswith("/proc/") and v.endswith("/fd"))}


def worker_main(a):
    import faulthandler

    faulthandler.enable()
    faulthandler.dump_traceback_later(a.hang, exit=True)
    w = Worker(a.seed, a.seconds, a.trace, a.ops)
    try:
        n = w.run()
    except Failure as e:
        print(f"fuzz_args: seed {a.seed}: FAILED: {e}", file=sys.stderr)
        return 3
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(f"fuzz_args: seed {a.seed}: {n} calls, every error an hcomm.HcommError, nothing leaked")
    print("stats " + json.dumps(w.stats))
    return 0


# ---- the driver -------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time", default=os.environ.get("FUZZTIME", "10s"),
                    help="how long to fuzz, a Go duration (10s, 1m) or Nx for N rounds (default $FUZZTIME or 10s)")
    ap.add_argument("--seed", type=int, help="the first round's seed (default: from the clock); replays a failure")
    ap.add_argument("--rounds", type=int, help="at most this many rounds")
    ap.add_argument("--round-time", type=float, default=5.0, help="seconds of calls per round (worker)")
    ap.add_argument("--ops", type=int, default=2000, help="at most this many calls per round")
    ap.add_argument("--hang", type=float, default=120.0, help="a round that has not ended after this many "
                                                              "seconds more than --round-time has hung")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker_main(a)
    budget = parse_duration(a.time)
    rounds = a.rounds
    if isinstance(budget, tuple):
        rounds, budget = budget[1] if rounds is None else min(rounds, budget[1]), float("inf")
    seed = a.seed if a.seed is not None else int(time.time()) % 1000000
    end = time.monotonic() + budget
    n = 0
    calls = 0
    totals = {}
    tmp = tempfile.mkdtemp(prefix="hcomm-fuzz-trace-")
    print(f"fuzz_args: {a.time} from seed {seed} ({sys.executable}, "
          f"HCOMM_LIBRARY={os.environ.get('HCOMM_LIBRARY', '')})", flush=True)
    while (rounds is None or n < rounds) and (n == 0 or time.monotonic() < end):
        s = seed + n
        secs = max(0.5, min(a.round_time, end - time.monotonic()))
        trace = os.path.join(tmp, f"trace-{s}.txt")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(s), "--seconds", str(secs),
               "--ops", str(a.ops), "--trace", trace, "--hang", str(secs + a.hang)]
        env = dict(os.environ)
        env.setdefault("HCOMM_LOG", "off")  # the library's warnings for every refused call
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        n += 1
        m = re.search(r"seed \d+: (\d+) calls", p.stdout)
        calls += int(m.group(1)) if m else 0
        for line in p.stdout.splitlines():
            if line.startswith("stats "):
                for k, (ok, err) in json.loads(line[6:]).items():
                    t = totals.setdefault(k[3:], [0, 0])
                    t[0] += ok
                    t[1] += err
        if p.returncode != 0:
            how = f"killed by signal {-p.returncode} (a crash)" if p.returncode < 0 else \
                ("hung (faulthandler's timeout)" if "Timeout (" in p.stderr else f"exit status {p.returncode}")
            try:
                with open(trace) as f:
                    last = f.readlines()[-25:]
            except OSError:
                last = []
            print(f"fuzz_args: FAILED: round seed {s} {how}\n--- its last calls:\n{''.join(last)}--- stderr:\n"
                  f"{p.stderr[-6000:]}\nreplay: python3 {os.path.relpath(__file__)} --seed {s} --rounds 1",
                  file=sys.stderr)
            return 1
        os.unlink(trace)
    print(f"fuzz_args: {n} rounds (seeds {seed}..{seed + n - 1}), {calls} calls: no crash, no hang, every error an "
          f"hcomm.HcommError, nothing leaked")
    print("fuzz_args: calls that returned / raised an HcommError: " +
          ", ".join(f"{k} {ok}/{err}" for k, (ok, err) in sorted(totals.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
