"""Engine, buffers and transfers over libhcomm (ctypes)."""

import asyncio
import collections
import concurrent.futures
import ctypes
import errno as _errno
import functools
import itertools
import logging
import mmap
import sys
import threading
import time

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _args, _dlpack, _lib
from .errors import CallbackError, HcommError, InvalidArgument, error_for

log = logging.getLogger("hcomm")

TARGETS = {"mock": 0, "file": 1, "vfio": 2, "memory": 3, "remote": 4}
DEV_ADDR_BASE = 0x4000000000000000
TARGET_SHIFT = 52  # a target's device addresses: DEV_ADDR_BASE | target << TARGET_SHIFT | offset
# hcomm_remote_addr(peer, offset) = REMOTE_ADDR_BASE | peer << 44 | offset.
REMOTE_ADDR_BASE = 0x6000000000000000
REMOTE_PEER_SHIFT = 44
REMOTE_MAX_OFFSET = 1 << REMOTE_PEER_SHIFT
REMOTE_MAX_PEER = 0xFFFF
HCOMM_REMOTE_SHM = 1
# hcomm_notify_addr(peer) = NOTIFY_ADDR_BASE | peer << 44: a transfer there of at
# most NOTIFY_MAX bytes is a notification.
NOTIFY_ADDR_BASE = 0x7000000000000000
NOTIFY_MAX = _lib.NOTIFY_MAX
PAGE_SIZE = mmap.PAGESIZE


def _check(lib, rc):
    if rc < 0:
        raise error_for(rc, lib.hcomm_last_error().decode(errors="replace") or lib.hcomm_strerror(rc).decode())
    return rc


# ---- memory -----------------------------------------------------------------


class _Memory:
    """What host buffers, registrations and device buffers share: an address
    (.ptr), a length (.nbytes) and views of a part of it."""

    ptr: int
    nbytes: int

    def view(self, offset: int = 0, nbytes: Optional[int] = None) -> "Region":
        """A Region: nbytes (default: the rest) from offset, for transfers."""
        offset = _args.integer(offset, "view: offset")
        n = self.nbytes - offset if nbytes is None else _args.integer(nbytes, "view: nbytes")
        if n <= 0 or offset + n > self.nbytes:
            raise InvalidArgument(f"hcomm: view({offset}, {n}) of {self.nbytes} bytes")
        return Region(self, offset, n)


class Region(_Memory):
    """nbytes of a buffer from offset (buf.view(offset, n))."""

    def __init__(self, base: "_Memory", offset: int, nbytes: int):
        self.base, self.offset, self.nbytes = base, offset, nbytes
        self.ptr = base.ptr + offset

    def __len__(self):
        return self.nbytes


class HostBuffer(_Memory):
    """Pool memory (Engine.alloc): DMA-mapped once, off the Python heap.

    It is a ctypes array of bytes, so it supports the buffer protocol
    (memoryview(buf), numpy.frombuffer(buf)) without a copy, and DLPack
    (torch.from_dlpack(buf): a uint8 tensor over the same bytes). Every view
    is valid until buf.free() or the engine's close(): using one afterwards
    reads unmapped memory (the process faults)."""

    _eng: "Engine"
    _freed: bool

    def __dlpack__(self, stream: Any = None) -> Any:
        if stream is not None and not (isinstance(stream, int) and stream == -1):
            # BufferError: what the DLPack protocol's consumers expect.
            raise BufferError(f"hcomm host memory is CPU memory: no stream ({stream!r})")
        self._alive()
        return _dlpack.capsule(self, self.ptr, self.nbytes)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_dlpack.kDLCPU, 0)

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        self._alive()
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def memoryview(self) -> memoryview:
        """A memoryview of unsigned bytes over the buffer (no copy). memoryview(buf)
        works too, but ctypes gives it the format "<B", which supports no
        indexing; this one is "B"."""
        self._alive()
        return memoryview(self).cast("B")  # type: ignore[arg-type]  # a ctypes array

    def numpy(self, dtype: Any = "uint8") -> Any:
        """A NumPy array over the buffer (no copy)."""
        import numpy

        self._alive()
        try:
            dt = numpy.dtype(dtype)
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"hcomm: numpy: dtype {dtype!r}: {e}") from None
        if dt.itemsize == 0 or dt.hasobject or self.nbytes % dt.itemsize:
            raise InvalidArgument(f"hcomm: numpy: dtype {dt}: {self.nbytes} bytes are not a whole number of it")
        return numpy.frombuffer(self, dtype=dt)  # type: ignore[call-overload]  # a ctypes array

    def free(self) -> None:
        """Gives the memory back to the pool (not while a transfer uses it)."""
        self._eng._free_host(self)

    def _alive(self):
        if self._freed or self._eng._h is None:
            raise InvalidArgument("hcomm: buffer was freed (or its engine closed)")


@functools.lru_cache(maxsize=512)
def _host_type(n):
    return type("HostBuffer", (HostBuffer, ctypes.c_ubyte * n), {})


def _host_buffer(eng, ptr, n):
    b = _host_type(n).from_address(ptr)
    b._eng, b.ptr, b.nbytes, b._freed = eng, ptr, n, False
    return b


class DeviceBuffer(_Memory):
    """Device memory (Engine.alloc_dev): a device address, not host-addressable."""

    def __init__(self, eng: "Engine", ptr: int, n: int):
        self._eng, self.ptr, self.nbytes, self._freed = eng, ptr, n, False

    def __len__(self):
        return self.nbytes

    @property
    def offset(self) -> int:
        """The device-memory offset (for a file target: the file offset)."""
        return (self.ptr - DEV_ADDR_BASE) & ((1 << TARGET_SHIFT) - 1)

    @property
    def target(self) -> int:
        """The target whose device memory or file space this is (0: the
        engine's first; Engine.add_target's index otherwise)."""
        return (self.ptr - DEV_ADDR_BASE) >> TARGET_SHIFT

    def free(self) -> None:
        """Gives the device memory back (not while a transfer uses it)."""
        self._eng._free_dev(self)


class Registration(_Memory):
    """Caller memory registered with the engine (Engine.register): transfers
    read and write obj's own bytes. obj stays referenced until unregister."""

    def __init__(self, eng: "Engine", obj: Any, ptr: int, n: int):
        self._eng, self.obj, self.ptr, self.nbytes = eng, obj, ptr, n
        self.registered = True

    def __len__(self):
        return self.nbytes

    def unregister(self) -> None:
        """Engine.unregister(self): Busy while a transfer that uses it is in flight."""
        self._eng.unregister(self)


class Peer:
    """A connected peer (Engine.connect): its pool's window is addressed by
    peer.at(offset, nbytes), usable as src (a get) or dst (a put) with host
    memory at the other end."""

    def __init__(self, eng: "Engine", pid: int, addr: str):
        self._eng, self.id, self.addr = eng, pid, addr

    def at(self, offset: int, nbytes: int) -> "RemoteRegion":
        """nbytes of the peer's window from offset (a RemoteRegion). The
        range is checked against the window when a transfer is submitted
        (BadAddress when it leaves it)."""
        offset = _args.integer(offset, f"peer {self.id}: at: offset", 0, REMOTE_MAX_OFFSET - 1)
        nbytes = _args.integer(nbytes, f"peer {self.id}: at: nbytes", 1, _args.U64)
        return RemoteRegion(self, offset, nbytes)

    @property
    def notification(self) -> "NotifyAddress":
        """The peer's notification address (a NotifyAddress), a transfer's
        destination: at most NOTIFY_MAX (256) bytes of host memory sent
        there are a message the peer's application takes with
        wait_notification, after every put submitted to the peer before it
        is in the peer's memory (Engine.notify and submit(..., notify=msg)
        send one)."""
        return NotifyAddress(self)

    def disconnect(self) -> None:
        """Closes the connection: transfers in flight to it fail with
        PeerGone, later ones are refused with it."""
        _check(self._eng._lib, self._eng._lib.hcomm_disconnect(self._eng._handle(), self.id))

    def __repr__(self):
        return f"<hcomm.Peer {self.id} {self.addr}>"


class RemoteRegion(_Memory):
    """nbytes of a peer's window from offset (Peer.at)."""

    def __init__(self, peer: Peer, offset: int, nbytes: int):
        self.peer, self.offset, self.nbytes = peer, offset, nbytes
        self.ptr = REMOTE_ADDR_BASE | peer.id << REMOTE_PEER_SHIFT | offset

    def __len__(self):
        return self.nbytes


class NotifyAddress(_Memory):
    """A peer's notification address (Peer.notification): the destination
    of a notification, at most NOTIFY_MAX bytes from host memory."""

    def __init__(self, peer: Peer):
        self.peer, self.nbytes = peer, NOTIFY_MAX
        self.ptr = NOTIFY_ADDR_BASE | peer.id << REMOTE_PEER_SHIFT

    def __len__(self):
        return self.nbytes


class Notification(tuple):
    """A notification taken from a peer (Engine.wait_notification): .peer,
    this engine's ID of the sender (its Peer.id where this engine
    connected to it; a listener numbers the peers that connected to it),
    .seq, its number among that sender's notifications to this engine
    (from 0, in order), and .msg, the message (bytes)."""

    __slots__ = ()

    def __new__(cls, peer, seq, msg):
        return tuple.__new__(cls, (peer, seq, msg))

    @property
    def peer(self) -> int:
        """This engine's ID of the sender."""
        return self[0]

    @property
    def seq(self) -> int:
        """The notification's number among the sender's to this engine (from 0)."""
        return self[1]

    @property
    def msg(self) -> bytes:
        """The message."""
        return self[2]

    def __repr__(self):
        return f"Notification(peer={self[0]}, seq={self[1]}, msg={self[2]!r})"


def _address_of(obj):
    """(address, bytes) of a CPU array: a torch tensor (data_ptr), anything
    with __array_interface__ (NumPy), or a writable buffer (bytearray, mmap)."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):
        if getattr(obj, "device", None) is not None and str(obj.device) != "cpu":
            raise InvalidArgument(f"hcomm: register: a tensor on {obj.device}: want CPU memory")
        if not obj.is_contiguous():
            raise InvalidArgument("hcomm: register: the tensor is not contiguous")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        if ai.get("strides") is not None and not obj.flags["C_CONTIGUOUS"]:
            raise InvalidArgument("hcomm: register: the array is not contiguous")
        ptr, readonly = ai["data"]
        if readonly:
            raise InvalidArgument("hcomm: register: the array is read-only")
        return ptr, obj.nbytes
    try:
        mv = memoryview(obj)
    except TypeError:
        raise InvalidArgument(f"hcomm: register: a {type(obj).__name__}: want an array, a CPU tensor or a "
                              f"writable buffer") from None
    if mv.readonly or not mv.contiguous:
        raise InvalidArgument("hcomm: register: want a writable, contiguous buffer")
    if mv.nbytes == 0:
        raise InvalidArgument("hcomm: register: an empty buffer")
    return ctypes.addressof(ctypes.c_char.from_buffer(mv)), mv.nbytes


def empty(nbytes: int, dtype: Any = "uint8") -> Any:
    """A NumPy array of nbytes (rounded up to whole pages) in fresh
    page-aligned memory, ready for Engine.register (torch.from_numpy shares
    it). The memory lives as long as the array."""
    import numpy

    nbytes = _args.integer(nbytes, "empty: nbytes", 1, _args.I64)
    try:
        dt = numpy.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"hcomm: empty: dtype {dtype!r}: {e}") from None
    n = -(-nbytes // PAGE_SIZE) * PAGE_SIZE
    if dt.itemsize == 0 or dt.hasobject or n % dt.itemsize:
        raise InvalidArgument(f"hcomm: empty: dtype {dt}: not a whole number of it in {n} bytes")
    try:
        m = mmap.mmap(-1, n)
    except (OSError, OverflowError, ValueError) as e:
        raise error_for(-12, f"hcomm: empty({nbytes}): {e}") from None
    return numpy.frombuffer(m, dtype=dt)


# ---- transfers --------------------------------------------------------------


class Transfer(concurrent.futures.Future):
    """A submitted transfer: a concurrent.futures.Future whose result is
    the number of bytes moved, or the HcommError of its failure. await it in
    asyncio. result(timeout) waits in hcomm_wait_completion_timeout."""

    def __init__(self, eng: "Engine", nbytes: int, callback: Optional[Callable[["Transfer"], Any]]):
        super().__init__()
        self._eng, self.nbytes, self._cb, self.id = eng, nbytes, callback, 0
        self.set_running_or_notify_cancel()

    def result(self, timeout: Optional[float] = None) -> int:
        """The bytes moved, waiting at most timeout seconds (None: no limit)
        in hcomm_wait_completion_timeout; the transfer's HcommError if it
        failed, concurrent.futures.TimeoutError if it is not done by then."""
        ms = _args.timeout_ms(timeout)
        timeout = _args.seconds(timeout)
        if not self.done() and self.id and self._eng._h is not None:
            t0 = time.monotonic()
            self._eng._lib.hcomm_wait_completion_timeout(self._eng._h, self.id, ms)
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - t0))
        # The callback ran before the wait returned (or the slot was
        # reused: the future holds the result anyway).
        return super().result(timeout)

    def cancel(self) -> bool:
        """False: a submitted transfer runs to its end."""
        return False

    def __await__(self):
        return asyncio.wrap_future(self).__await__()


# ---- notifications ----------------------------------------------------------


class NotificationFuture(concurrent.futures.Future):
    """The next notification (Engine.notification_future): a
    concurrent.futures.Future whose result is a Notification, or BadHandle
    when the engine is closed first. Awaitable in asyncio. Futures get
    notifications in the order they were made; cancel() (or a cancelled
    await) withdraws it, and a notification that came as it was cancelled
    goes to the next waiter: none is lost, none taken twice."""

    def __init__(self, notifier: "_Notifier"):
        super().__init__()
        self._notifier = notifier

    def cancel(self) -> bool:
        """Withdraws this future's place (True), or False once it has its
        notification: that one then goes to the next waiter."""
        return self._notifier.withdraw(self)

    def __await__(self):
        return self._await().__await__()

    async def _await(self):
        try:
            return await asyncio.shield(asyncio.wrap_future(self))
        except BaseException:
            self._notifier.abandon(self)
            raise


class _Notifier:
    """An engine's notification waiters. One thread waits in
    hcomm_wait_notification (no time limit: it sleeps in the library until
    a notification comes or the engine is finalized, never polls) while
    futures wait, and hands each notification to the oldest waiting future.
    A future is claimed (taken off the line) under the lock that withdraw
    (cancel, a timed-out wait) takes, and resolved after it, so that its
    done-callbacks may call in again: a notification goes to exactly one
    future. It keeps no notification ahead of the application but the one
    it took as the last waiter withdrew (or one given back): the library's
    queue (its acknowledgements to the senders) stays the backpressure. It
    holds the library and the handle, not the Engine."""

    _CLOSED = "hcomm: wait_notification: the engine was closed"

    def __init__(self, lib, h):
        self._lib, self._h = lib, h
        self._lock = threading.Lock()
        self._waiters = collections.deque()
        self._ready = collections.deque()
        self._claimed = set()  # futures taken off the line, being resolved
        self._thread = None
        self._closed = False

    def future(self):
        fut = NotificationFuture(self)
        note = None
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                if self._ready:
                    note = self._ready.popleft()
                else:
                    self._waiters.append(fut)
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._run, name="hcomm-notify", daemon=True)
                        self._thread.start()
        if closed:
            fut.set_exception(error_for(-_errno.EBADF, "hcomm: wait_notification: the engine is closed"))
        elif note is not None:
            fut.set_result(note)
        return fut

    def poll(self):
        """A notification that has come, or None (timeout 0: just look)."""
        with self._lock:
            if self._closed:
                raise error_for(-_errno.EBADF, "hcomm: wait_notification: the engine is closed")
            if self._ready:
                return self._ready.popleft()
            if self._thread is not None:
                return None  # the thread takes whatever comes
            n = _lib.NotificationStruct()
            rc = self._lib.hcomm_wait_notification(self._h, ctypes.byref(n), 0)
            if rc == -_errno.ETIMEDOUT:
                return None
            _check(self._lib, rc)
            return Notification(n.peer, n.seq, bytes(n.msg[:n.size]))

    def withdraw(self, fut):
        """Cancels fut unless it has (or is getting) its notification or
        error."""
        with self._lock:
            if fut.done() or fut in self._claimed:
                return fut.cancelled()
            try:
                self._waiters.remove(fut)
            except ValueError:
                pass
            return concurrent.futures.Future.cancel(fut)

    def abandon(self, fut):
        """Nobody will read fut: withdraw it, or give back the notification
        it got meanwhile (to the oldest waiter, else first in line)."""
        if self.withdraw(fut) or fut.exception() is not None:
            return
        self._deliver(fut.result(), front=True)

    def _claim(self):
        """(under the lock) The oldest waiting future, claimed, or None."""
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                self._claimed.add(w)
                return w
        return None

    def _resolve(self, w, note=None, exc=None):
        if exc is None:
            w.set_result(note)
        else:
            w.set_exception(exc)
        with self._lock:
            self._claimed.discard(w)

    def _deliver(self, note, front=False):
        with self._lock:
            w = self._claim()
            if w is None:
                if front:
                    self._ready.appendleft(note)
                else:
                    self._ready.append(note)
                return
        self._resolve(w, note)

    def _fail_all(self, code, msg):
        """Every waiting future gets the error (the lock not held)."""
        with self._lock:
            ws = []
            while True:
                w = self._claim()
                if w is None:
                    break
                ws.append(w)
        for w in ws:
            self._resolve(w, exc=error_for(code, msg))

    def _run(self):
        n = _lib.NotificationStruct()
        while True:
            with self._lock:
                closed = self._closed
                while self._waiters and self._waiters[0].done():
                    self._waiters.popleft()
                end = closed or not self._waiters
                if end:
                    self._thread = None  # the next future starts another
            if closed:
                self._fail_all(-_errno.EBADF, self._CLOSED)
            if end:
                return
            rc = self._lib.hcomm_wait_notification(self._h, ctypes.byref(n), -1)
            if rc == 0:
                self._deliver(Notification(n.peer, n.seq, bytes(n.msg[:n.size])))
                continue
            if rc == -_errno.EBADF:
                msg = self._CLOSED
            else:
                msg = self._lib.hcomm_last_error().decode(errors="replace") or self._lib.hcomm_strerror(rc).decode()
            with self._lock:
                self._closed = True
                self._thread = None
            self._fail_all(rc, msg)
            return

    def close(self):
        """Before the handle is finalized: no new waiters, and none left
        waiting when no thread is in the library. After it, the thread
        (returned, if any) ends: its wait returns EBADF."""
        with self._lock:
            self._closed = True
            self._ready.clear()
            t = self._thread
        if t is None:
            self._fail_all(-_errno.EBADF, self._CLOSED)
        return t


# ---- engine -----------------------------------------------------------------

_BATCH_MAX = (1 << 31) - 1  # hcomm_submit_batch's count is an int


class Engine:
    """An hcomm engine: a pool of host memory and a target to move it to.

        with hcomm.Engine(pool_size=256 << 20, queue_depth=64, align=64) as eng:
            buf = eng.alloc(n)
            dev = eng.alloc_dev(n)
            eng.submit(buf, dev).result()

    target: "mock" (default: a software HDMA device), "file" (path), "vfio"
    (path: a PCI address), "memory" (host to host), "remote" (other
    processes' pools through UCX; path: the address to listen on,
    "127.0.0.1:0" for any free port, None for no listener; shm=True for
    UCX's shared-memory transports between processes of one host, with
    UCX_TLS=shm,tcp). library: an explicit libhcomm path (else
    $HCOMM_LIBRARY, pkg-config, the loader's search).
    """

    def __init__(self, pool_size: int = 256 << 20, queue_depth: int = 64, align: int = 64, target: str = "mock",
                 path: Optional[str] = None, dev_mem_size: int = 0, library: Optional[str] = None, shm: bool = False):
        self._h = None
        self._lib = lib = _lib.load(library)
        _args.choice(target, TARGETS, "target")
        cfg = _lib.Config(mem_pool_size=_args.integer(pool_size, "pool_size"),
                          queue_depth=_args.integer(queue_depth, "queue_depth", 0, _args.U32),
                          align_size=_args.integer(align, "align", 0, _args.U32),
                          target=TARGETS[target], dev_mem_size=_args.integer(dev_mem_size, "dev_mem_size"),
                          target_path=None if path is None else _args.path(path),
                          flags=HCOMM_REMOTE_SHM if shm else 0)
        h = _lib.handle_t()
        _check(lib, lib.hcomm_init(ctypes.byref(h), ctypes.byref(cfg)))
        self._h = h.value
        self._host: Dict[int, HostBuffer] = {}  # ptr -> HostBuffer
        self._dev: Dict[int, DeviceBuffer] = {}
        self._regs: Dict[int, Registration] = {}  # ptr -> Registration
        self.callback_errors: List[BaseException] = []
        self._target = target
        self._notifier: Optional[_Notifier] = None
        self._notifier_lock = threading.Lock()

    # context manager
    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _handle(self):
        if self._h is None:
            raise error_for(-9, "hcomm: engine is closed")
        return self._h

    # memory
    def alloc(self, nbytes: int) -> HostBuffer:
        """nbytes of pool memory (a HostBuffer)."""
        nbytes = _args.integer(nbytes, "alloc: nbytes")
        h = self._handle()
        ctypes.set_errno(0)
        p = self._lib.hcomm_alloc_host_mem(h, nbytes)
        if not p:
            self._failed_alloc(f"alloc({nbytes})")
        b = _host_buffer(self, p, nbytes)
        self._host[p] = b
        return b

    def _failed_alloc(self, what):
        code = -ctypes.get_errno()
        _check(self._lib, code if code < 0 else -12)
        raise error_for(-12, f"hcomm: {what}: no memory")

    def _mine(self, m, what, kinds=None):
        """m if it is memory of the package's (a buffer, a view, a
        registration, a peer's region) with a pointer C can hold."""
        if not isinstance(m, _Memory) or (kinds is not None and not isinstance(m, kinds)):
            want = "a HostBuffer, DeviceBuffer, Registration, a view of one or a RemoteRegion" if kinds is None \
                else " or ".join(k.__name__ for k in kinds)
            raise InvalidArgument(f"hcomm: {what}: {type(m).__name__}: want {want}")
        _args.integer(getattr(m, "ptr", None), f"{what}: address")
        return m

    def _free_host(self, b):
        if b._freed:
            raise InvalidArgument("hcomm: buffer freed twice")
        _check(self._lib, self._lib.hcomm_free_host_mem(self._handle(), b.ptr))
        b._freed = True
        self._host.pop(b.ptr, None)

    def alloc_dev(self, nbytes: int, target: int = 0) -> DeviceBuffer:
        """nbytes of device memory, or of a file target's file space (a
        DeviceBuffer), of target (0: the engine's first; an index
        add_target returned)."""
        nbytes = _args.integer(nbytes, "alloc_dev: nbytes")
        target = _args.integer(target, "alloc_dev: target", 0, _args.U32)
        h = self._handle()
        ctypes.set_errno(0)
        if target:
            self._need("hcomm_alloc_target_mem")
            p = self._lib.hcomm_alloc_target_mem(h, target, nbytes)
        else:
            p = self._lib.hcomm_alloc_dev_mem(h, nbytes)
        if not p:
            self._failed_alloc(f"alloc_dev({nbytes}, target={target})")
        d = DeviceBuffer(self, p, nbytes)
        self._dev[p] = d
        return d

    def _free_dev(self, d):
        if d._freed:
            raise InvalidArgument("hcomm: device buffer freed twice")
        _check(self._lib, self._lib.hcomm_free_dev_mem(self._handle(), d.ptr))
        d._freed = True
        self._dev.pop(d.ptr, None)

    def register(self, obj: Any) -> Registration:
        """Registers obj's memory (a NumPy array, a CPU tensor, an mmap) so
        that transfers use it in place. It must be page aligned and whole
        pages long (hcomm.empty makes such arrays). Unregister before the
        memory goes away; obj is kept alive until then."""
        h = self._handle()
        ptr, n = _address_of(obj)
        _check(self._lib, self._lib.hcomm_register_host_mem(h, ptr, n))
        r = Registration(self, obj, ptr, n)
        self._regs[ptr] = r
        return r

    def unregister(self, reg: Registration) -> None:
        """Busy (nothing changed) while a transfer that uses it is in flight."""
        self._mine(reg, "unregister", (Registration,))
        _check(self._lib, self._lib.hcomm_unregister_host_mem(self._handle(), reg.ptr))
        reg.registered = False
        self._regs.pop(reg.ptr, None)
        reg.obj = None

    # several targets
    def _need(self, fn):
        if not hasattr(self._lib, fn) or getattr(self._lib, fn).argtypes is None:
            raise error_for(-95, f"hcomm: {fn}: the loaded libhcomm ({self._lib.path}) predates it")

    def add_target(self, target: str, path: Optional[str] = None, dev_mem_size: int = 0) -> int:
        """Adds a target to this engine ("mock", "file", "vfio" or
        "memory"; path and dev_mem_size as for Engine()) and returns its
        index: the whole pool is usable with it at once, alloc_dev(n,
        target=index) hands out its device memory or file space, a transfer
        goes to the target its device end belongs to, and copy() moves data
        between two targets."""
        self._need("hcomm_add_target")
        _args.choice(target, ("mock", "file", "vfio", "memory"), "add_target: target")
        tc = _lib.TargetConfig(target=TARGETS[target],
                               dev_mem_size=_args.integer(dev_mem_size, "add_target: dev_mem_size"),
                               target_path=None if path is None else _args.path(path, "add_target: path"))
        idx = ctypes.c_uint32()
        _check(self._lib, self._lib.hcomm_add_target(self._handle(), ctypes.byref(tc), ctypes.byref(idx)))
        return idx.value

    def copy(self, dst: _Memory, src: _Memory, nbytes: Optional[int] = None, chunk: int = 0, depth: int = 0,
             callback: Optional[Callable[["Transfer"], Any]] = None) -> "Transfer":
        """Copies nbytes (default: the smaller length) from src to dst, two
        DeviceBuffers (usually of two targets: a file into device memory,
        device memory out to a file), streamed through the engine's pool in
        chunks (chunk bytes, depth in flight; 0: 1 MiB and 4) with no CPU
        copy. Returns a Transfer future (await it, or result()); callback
        as for submit. The first failed chunk fails it with its error."""
        self._need("hcomm_copy")
        self._mine(dst, "copy: dst")
        self._mine(src, "copy: src")
        nbytes = min(src.nbytes, dst.nbytes) if nbytes is None else _args.integer(nbytes, "copy: nbytes")
        chunk = _args.integer(chunk, "copy: chunk")
        depth = _args.integer(depth, "copy: depth", 0, _args.U32)
        h = self._handle()
        fut = Transfer(self, nbytes, _args.callback(callback))
        with _pending_lock:
            key = next(_keys)
            _pending[key] = (self, fut)
        cid = ctypes.c_uint64()
        rc = self._lib.hcomm_copy(h, dst.ptr, src.ptr, nbytes, chunk, depth, _on_complete, key,
                                  ctypes.byref(cid))
        if rc < 0:
            with _pending_lock:
                _pending.pop(key, None)
            _check(self._lib, rc)
        fut.id = cid.value
        return fut

    # remote target
    def connect(self, addr: str, timeout: Optional[float] = None) -> Peer:
        """Connects to the engine listening at addr ("ip:port", its
        listen_addr) and returns a Peer. InvalidArgument for a malformed
        address, ConnectFailed when nothing listens there, TransferTimeout
        after timeout seconds without a handshake, NotSupported unless
        target="remote"."""
        ms = _args.timeout_ms(timeout)
        a = _args.path(addr, "connect: address")
        pid = ctypes.c_uint32()
        _check(self._lib, self._lib.hcomm_connect_timeout(self._handle(), a, ms, ctypes.byref(pid)))
        return Peer(self, pid.value, addr)

    @property
    def listen_addr(self) -> str:
        """The address peers connect to ("127.0.0.1:40123"), "" without a
        listener."""
        buf = ctypes.create_string_buffer(128)
        _check(self._lib, self._lib.hcomm_listen_addr(self._handle(), buf, len(buf)))
        return buf.value.decode()

    def remote_offset(self, mem: _Memory) -> int:
        """Where host memory mem (a HostBuffer, a Registration or a view of
        one) lies in the window this engine exports: a peer that connects
        from now on reaches it at peer.at(offset, n)."""
        self._mine(mem, "remote_offset")
        off = ctypes.c_uint64()
        _check(self._lib, self._lib.hcomm_remote_offset(self._handle(), mem.ptr, ctypes.byref(off)))
        return off.value

    # transfers
    def _prepare(self, t, src, dst, nbytes, callback):
        self._mine(src, "submit: src")
        self._mine(dst, "submit: dst")
        nbytes = min(src.nbytes, dst.nbytes) if nbytes is None else _args.integer(nbytes, "submit: nbytes")
        fut = Transfer(self, nbytes, _args.callback(callback))
        with _pending_lock:
            key = next(_keys)
            _pending[key] = (self, fut)
        t.src_ptr, t.dst_ptr, t.size = src.ptr, dst.ptr, nbytes
        t.callback, t.user_data = _on_complete, key
        return fut, key

    def submit(self, src: _Memory, dst: _Memory, nbytes: Optional[int] = None,
               callback: Optional[Callable[["Transfer"], Any]] = None, notify: Any = None) -> "Transfer":
        """Moves nbytes (default: the smaller length) from src to dst
        (HostBuffer, DeviceBuffer, Registration or a view of one, or a
        peer's RemoteRegion) and
        returns a Transfer future. callback(transfer) runs once, on an
        engine thread, when it ends; what it raises is logged and kept in
        engine.callback_errors (close() raises CallbackError).

        notify (a put to a peer only): a message (bytes, at most
        NOTIFY_MAX) sent after the put in the same batch, as notify()
        sends one: the peer takes it (wait_notification) once the put's
        bytes are in its memory. The future then ends when both have: its
        result is the put's byte count, its exception the put's error, else
        the notification's. QueueFull as for submit_batch (err.submitted:
        the put's future when only it went)."""
        if notify is not None:
            return self._submit_notified(src, dst, nbytes, callback, notify)
        h = self._handle()
        t = _lib.TransferStruct()
        fut, key = self._prepare(t, src, dst, nbytes, callback)
        rc = self._lib.hcomm_submit_transfer(h, ctypes.byref(t))
        if rc < 0:
            with _pending_lock:
                _pending.pop(key, None)
            _check(self._lib, rc)
        fut.id = t.id
        return fut

    def submit_batch(self, transfers: Sequence[Sequence[Any]]) -> List["Transfer"]:
        """Submits [(src, dst[, nbytes[, callback]]), ...] with one
        doorbell per queue_depth; returns their futures. All are checked
        first: one invalid entry and none is submitted. QueueFull when the
        queue filled up: the futures of the prefix that went are in
        err.submitted."""
        h = self._handle()
        try:
            entries = [tuple(tr) for tr in transfers]
        except TypeError:
            raise InvalidArgument("hcomm: submit_batch: want a list of (src, dst[, nbytes[, callback]])") from None
        n = len(entries)
        for i, tr in enumerate(entries):
            if not 2 <= len(tr) <= 4:
                raise InvalidArgument(f"hcomm: submit_batch: entry {i} has {len(tr)} items: want (src, dst[, nbytes"
                                      f"[, callback]])")
        if n > _BATCH_MAX:
            raise InvalidArgument(f"hcomm: submit_batch: {n} entries: at most {_BATCH_MAX}")
        arr = (_lib.TransferStruct * n)()
        futs, keys = [], []
        try:
            for i, tr in enumerate(entries):
                src, dst, nbytes, cb = (tr + (None, None))[:4]
                f, k = self._prepare(arr[i], src, dst, nbytes, cb)
                futs.append(f)
                keys.append(k)
        except BaseException:
            with _pending_lock:
                for k in keys:
                    _pending.pop(k, None)
            raise
        rc = self._lib.hcomm_submit_batch(h, arr, n)
        for i, f in enumerate(futs):
            f.id = arr[i].id
        if rc < 0:
            with _pending_lock:
                for i, k in enumerate(keys):
                    if arr[i].id == 0:
                        _pending.pop(k, None)
            try:
                _check(self._lib, rc)
            except HcommError as e:
                e.submitted = [f for f in futs if f.id]  # type: ignore[attr-defined]
                raise
        return futs

    def _complete(self, fut, status):
        self._finish(fut, None if status == 0 else error_for(status, self._lib.hcomm_strerror(status).decode()))

    def _finish(self, fut, exc):
        """fut ends (its bytes, or exc), then its callback runs."""
        if exc is None:
            fut.set_result(fut.nbytes)
        else:
            fut.set_exception(exc)
        if fut._cb is not None:
            try:
                fut._cb(fut)
            except BaseException as e:  # noqa: BLE001 - reported, never lost
                self.callback_errors.append(e)
                log.exception("hcomm: transfer callback raised")

    # notifications (remote target)
    def _message(self, msg, what):
        """(source memory, nbytes, pool block to free after, or None) of a
        notification's message: bytes-like, copied into a pool block, or
        host memory of this engine, used in place."""
        if isinstance(msg, _Memory):
            self._mine(msg, what, (HostBuffer, Registration, Region))
            n = msg.nbytes
            if not 1 <= n <= NOTIFY_MAX:
                raise InvalidArgument(f"hcomm: {what}: {n} bytes: a notification is 1..{NOTIFY_MAX} bytes")
            return msg, n, None
        try:
            data = memoryview(msg).cast("B")
        except TypeError:
            raise InvalidArgument(f"hcomm: {what}: a {type(msg).__name__}: want bytes (or host memory of this "
                                  f"engine)") from None
        n = data.nbytes
        if not 1 <= n <= NOTIFY_MAX:
            raise InvalidArgument(f"hcomm: {what}: {n} bytes: a notification is 1..{NOTIFY_MAX} bytes")
        blk = self.alloc(n)
        ctypes.memmove(blk.ptr, bytes(data), n)
        return blk, n, blk

    def _release(self, blk):
        """Frees a message's pool block once its transfer ended (on an
        engine thread; after close the pool is gone anyway)."""
        if blk is not None and self._h is not None and not blk._freed:
            try:
                self._free_host(blk)
            except HcommError:
                pass  # the engine closed meanwhile

    def notify(self, peer: Peer, msg: Any, callback: Optional[Callable[["Transfer"], Any]] = None) -> "Transfer":
        """Sends a notification to peer (a Peer of this engine): msg, 1 to
        NOTIFY_MAX (256) bytes (bytes-like, copied into the pool; or host
        memory of this engine, which must not change until it completes).
        The peer takes it with wait_notification, notification_future or
        next_notification after every put submitted to it before this one
        is in its memory, in order, exactly once. Returns a Transfer that
        completes when the peer's library has queued it; PeerGone when the
        peer died or was disconnected first."""
        if not isinstance(peer, Peer) or peer._eng is not self:
            raise InvalidArgument(f"hcomm: notify: peer {peer!r}: want a Peer of this engine")
        _args.callback(callback)
        src, n, blk = self._message(msg, "notify: msg")

        def done(t):
            self._release(blk)
            if callback is not None:
                callback(t)

        try:
            return self.submit(src, peer.notification, n, done)
        except BaseException:
            self._release(blk)
            raise

    def _submit_notified(self, src, dst, nbytes, callback, notify):
        if not isinstance(dst, RemoteRegion):
            raise InvalidArgument(f"hcomm: submit: notify= with dst {type(dst).__name__}: a notification follows "
                                  f"a put to a peer (a RemoteRegion)")
        self._mine(src, "submit: src")
        _args.callback(callback)
        nbytes = min(src.nbytes, dst.nbytes) if nbytes is None else _args.integer(nbytes, "submit: nbytes")
        msg, n, blk = self._message(notify, "submit: notify")
        outer = Transfer(self, nbytes, callback)
        state = {"left": 2, "exc": [None, None]}
        lock = threading.Lock()

        def part(i):
            def done(t):
                if i == 1:
                    self._release(blk)
                with lock:
                    state["exc"][i] = t.exception()
                    state["left"] -= 1
                    last = state["left"] == 0
                if last:
                    put_exc, note_exc = state["exc"]
                    self._finish(outer, put_exc if put_exc is not None else note_exc)
            return done

        try:
            put, note = self.submit_batch([(src, dst, nbytes, part(0)), (msg, dst.peer.notification, n, part(1))])
        except HcommError as e:
            went = getattr(e, "submitted", [])
            if len(went) < 2:
                self._release(blk)  # the notification did not go
            raise
        except BaseException:
            self._release(blk)
            raise
        outer.id = note.id  # result() waits in the library for the later of the two
        return outer

    def _notes(self):
        """The notifier (made on first use)."""
        h = self._handle()
        if self._target != "remote":
            raise error_for(-95, f"hcomm: wait_notification: the {self._target} target has no peers "
                                 f"(use target=\"remote\")")
        self._need("hcomm_wait_notification")
        with self._notifier_lock:
            if self._notifier is None:
                self._notifier = _Notifier(self._lib, h)
            return self._notifier

    def notification_future(self) -> NotificationFuture:
        """The next notification as a NotificationFuture (a
        concurrent.futures.Future, awaitable): result() is a Notification,
        BadHandle if the engine closes first. Futures get notifications in
        the order they were made; cancel() one you will not read."""
        return self._notes().future()

    def wait_notification(self, timeout: Optional[float] = None) -> Notification:
        """Takes the next notification (a Notification: .peer, .seq, .msg),
        from any peer, in order per peer, waiting at most timeout seconds
        (None: no limit; 0: just look). concurrent.futures.TimeoutError
        (TimeoutError) when none came; BadHandle when the engine is (or
        gets) closed; NotSupported unless target="remote". The wait sleeps
        in the library (a thread of the engine's waits in
        hcomm_wait_notification), it does not poll."""
        ms = _args.timeout_ms(timeout)
        wait = _args.seconds(timeout)
        notes = self._notes()
        if ms == 0:
            n = notes.poll()
            if n is None:
                raise concurrent.futures.TimeoutError("hcomm: wait_notification: none has come")
            return n
        fut = notes.future()
        try:
            return fut.result(wait)
        except concurrent.futures.TimeoutError:
            if fut.cancel():
                raise concurrent.futures.TimeoutError(
                    f"hcomm: wait_notification: none came in {timeout} s") from None
            return fut.result()  # it came as the time ran out
        except BaseException:
            notes.abandon(fut)
            raise

    async def next_notification(self, timeout: Optional[float] = None) -> Notification:
        """In asyncio: the next notification (as wait_notification), without
        blocking the event loop; asyncio.TimeoutError (TimeoutError) after
        timeout seconds. A cancelled or timed-out await loses no
        notification."""
        _args.timeout_ms(timeout)
        wait = _args.seconds(timeout)
        fut = self._notes().future()
        if wait is None:
            return await fut
        return await asyncio.wait_for(fut, wait)

    def close(self, timeout: Optional[float] = None) -> None:
        """Finalizes the engine: waits for transfers in flight (at most
        timeout seconds, then cancels the rest: their futures get
        Canceled), runs every callback, frees all memory. Raises
        CallbackError if a callback raised."""
        if self._h is None:
            return
        ms = _args.timeout_ms(timeout)
        notes = self._notifier
        waiter = notes.close() if notes is not None else None
        h, self._h = self._h, None
        rc = self._lib.hcomm_finalize_timeout(h, ms)
        if waiter is not None and waiter is not threading.current_thread() and not sys.is_finalizing():
            # Its wait in the library ended with the handle. (Not at
            # interpreter exit: a daemon thread may never run again then.)
            waiter.join()
        for b in self._host.values():
            b._freed = True
        self._host.clear()
        self._dev.clear()
        for r in self._regs.values():
            r.registered, r.obj = False, None
        self._regs.clear()
        _check(self._lib, rc)
        if self.callback_errors:
            errs, self.callback_errors = self.callback_errors, []
            raise CallbackError(f"hcomm: {len(errs)} transfer callbacks raised", errs) from errs[0]

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - nothing to report to at GC time
                pass

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._h is None


# One C callback for every transfer of every engine: user_data is the key of
# the transfer's (engine, future) in _pending. ctypes takes the GIL for it
# (it runs on an engine thread); the library's calls release it, so a thread
# waiting in hcomm_wait_completion or hcomm_finalize never blocks it.
_pending: Dict[int, Any] = {}
_keys = itertools.count(1)
_pending_lock = threading.Lock()


@_lib.callback_t
def _on_complete(tid, status, user_data):
    with _pending_lock:
        entry = _pending.pop(user_data, None)
    if entry is not None:
        entry[0]._complete(entry[1], status)


def pending() -> int:
    """Transfers submitted and not yet completed, over all engines (tests)."""
    return len(_pending)
