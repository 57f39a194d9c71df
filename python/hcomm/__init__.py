"""hcomm: host-device data movement with few copies and system calls.

A pure-Python package over libhcomm.so (ctypes; no compiler needed):

    import hcomm
    with hcomm.Engine(pool_size=256 << 20, queue_depth=64, align=64) as eng:
        buf = eng.alloc(n)                  # pool memory: memoryview(buf), numpy, torch.from_dlpack(buf)
        dev = eng.alloc_dev(n)              # device memory
        fut = eng.submit(buf, dev)          # a concurrent.futures.Future; await it in asyncio
        fut.result(timeout=1.0)

    # another process's pool (UCX): one side listens, the other connects
    with hcomm.Engine(target="remote", path="10.0.0.5:13337") as a: ...
    with hcomm.Engine(target="remote") as b:
        peer = b.connect("10.0.0.5:13337")
        b.submit(buf, peer.at(offset, n)).result()   # a put into a's pool (a.remote_offset(its_buf))
        b.submit(buf, peer.at(offset, n), notify=b"kv 7").result()   # a put a's application hears about:
    # on a's side: n = a.wait_notification(timeout=10); n.msg == b"kv 7" (or a.notification_future(),
    # await a.next_notification()), after the put's bytes are in a's pool

See docs/python.md. The library is found through Engine(library=...),
$HCOMM_LIBRARY, pkg-config (make install), or the dynamic loader.
"""

from typing import Optional

from . import _lib
from ._dlpack import live as _dlpack_live
from ._engine import (DEV_ADDR_BASE, NOTIFY_MAX, PAGE_SIZE, REMOTE_ADDR_BASE, DeviceBuffer, Engine, HostBuffer,
                      Notification, NotificationFuture, NotifyAddress, Peer, Region, Registration, RemoteRegion,
                      Transfer, empty, pending)
from .errors import (BY_CODE, BadAddress, BadHandle, Busy, CallbackError, Canceled, ConnectFailed, DeviceError,
                     ForkError, HcommError, InProgress, InvalidArgument, NoDevice, NoPeer, NotFound, NotSupported,
                     OutOfMemory, PeerGone, PermissionDenied, QueueFull, ShuttingDown, StaleID, TooManyHandles,
                     TransferTimeout, error_for)

__version__ = "0.1.0"


def library_version(library: Optional[str] = None) -> str:
    """The loaded libhcomm's version (hcomm_version()); equals __version__."""
    return _lib.load(library).hcomm_version(None, None, None).decode()


__all__ = [
    "Engine", "HostBuffer", "DeviceBuffer", "Registration", "Region", "Transfer", "empty", "pending",
    "Peer", "RemoteRegion", "REMOTE_ADDR_BASE", "ConnectFailed", "NoPeer", "PeerGone",
    "Notification", "NotificationFuture", "NotifyAddress", "NOTIFY_MAX",
    "library_version", "DEV_ADDR_BASE", "PAGE_SIZE", "HcommError", "CallbackError", "BY_CODE", "error_for",
    "BadAddress", "BadHandle", "Busy", "Canceled", "DeviceError", "ForkError", "InProgress", "InvalidArgument",
    "NoDevice", "NotFound", "NotSupported", "OutOfMemory", "PermissionDenied", "QueueFull", "ShuttingDown",
    "StaleID", "TooManyHandles", "TransferTimeout",
]
