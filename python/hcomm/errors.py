"""Exceptions: one class per hcomm.h return code."""

import errno as _errno
from typing import List, Optional


class HcommError(Exception):
    """A call into libhcomm failed. code is the negative HCOMM_* code,
    message what hcomm_last_error said; path the file the error is about,
    where there is one (hcomm.data's shards), else None."""

    code: Optional[int] = None
    path: Optional[str] = None

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(HcommError, LookupError):
    """No transfer of that ID (HCOMM_ENOENT), or no such thing to look up."""

    code = -_errno.ENOENT  # unknown transfer ID


class DeviceError(HcommError, OSError):
    """The device, or the file a read handle reads, failed the transfer (HCOMM_EIO)."""

    code = -_errno.EIO


class BadHandle(HcommError):
    """The engine or handle is closed, or was never one (HCOMM_EBADF)."""

    code = -_errno.EBADF


class QueueFull(HcommError):
    """The submission queue is full: wait for a transfer, then submit again (HCOMM_EAGAIN)."""

    code = -_errno.EAGAIN


class OutOfMemory(HcommError, MemoryError):
    """The pool (or device memory) has no free block that large (HCOMM_ENOMEM)."""

    code = -_errno.ENOMEM


class PermissionDenied(HcommError, PermissionError):
    """The process may not open or use it, a file or a device (HCOMM_EACCES)."""

    code = -_errno.EACCES


class BadAddress(HcommError, ValueError):
    """An address or range outside the memory it names (HCOMM_EFAULT)."""

    code = -_errno.EFAULT


class Busy(HcommError):
    """In use: memory a transfer still uses, a loader already iterated, a batch kept past the
    lifetime rule in debug mode (HCOMM_EBUSY)."""

    code = -_errno.EBUSY


class NoDevice(HcommError):
    """No such device, target or file (HCOMM_ENODEV)."""

    code = -_errno.ENODEV


class InvalidArgument(HcommError, ValueError):
    """An argument the call refuses: a wrong type, a value out of range, a malformed file
    (HCOMM_EINVAL)."""

    code = -_errno.EINVAL


class TooManyHandles(HcommError):
    """Too many engines or handles open at once (HCOMM_EMFILE)."""

    code = -_errno.EMFILE


class NotSupported(HcommError, NotImplementedError):
    """Not supported by this target, library or machine (HCOMM_EOPNOTSUPP)."""

    code = -_errno.EOPNOTSUPP


class ShuttingDown(HcommError):
    """The engine is being closed: no new transfers (HCOMM_ESHUTDOWN)."""

    code = -_errno.ESHUTDOWN


class TransferTimeout(HcommError, TimeoutError):
    """The device stalled on the transfer (HCOMM_ETIMEDOUT); not a wait that
    ran out (that is concurrent.futures.TimeoutError)."""

    code = -_errno.ETIMEDOUT


class InProgress(HcommError):
    """The transfer has not completed yet (HCOMM_EINPROGRESS)."""

    code = -_errno.EINPROGRESS


class StaleID(HcommError):
    """A transfer ID whose slot has been reused since (HCOMM_ESTALE)."""

    code = -_errno.ESTALE


class Canceled(HcommError):
    """The transfer was canceled: by a close whose timeout ran out (HCOMM_ECANCELED)."""

    code = -_errno.ECANCELED


class ForkError(HcommError, RuntimeError):
    """Called in a child of fork(): the Go runtime inside libhcomm does not
    survive fork. Use hcomm in the parent only, or the "spawn" start method
    (multiprocessing, torch DataLoader's multiprocessing_context)."""

    code = -1001


class NoPeer(HcommError, LookupError):
    """A remote address names a peer ID this engine never had (HCOMM_ENXIO)."""

    code = -_errno.ENXIO


class PeerGone(HcommError, ConnectionResetError):
    """The peer died, reset the connection, closed, or was disconnected
    (HCOMM_ECONNRESET): connect again for a new Peer."""

    code = -_errno.ECONNRESET


class ConnectFailed(HcommError, ConnectionRefusedError):
    """connect(): nothing listens at the address, or the peer refused the
    connection or its handshake (HCOMM_ECONNREFUSED)."""

    code = -_errno.ECONNREFUSED


class CallbackError(HcommError):
    """A transfer callback raised; the exceptions are in .errors (the first
    is also the __cause__)."""

    def __init__(self, message: str, errors: List[BaseException]):
        super().__init__(message)
        self.errors = errors


BY_CODE = {
    c.code: c
    for c in (NotFound, DeviceError, BadHandle, QueueFull, OutOfMemory, PermissionDenied, BadAddress, Busy,
              NoDevice, InvalidArgument, TooManyHandles, NotSupported, ShuttingDown, TransferTimeout,
              InProgress, StaleID, Canceled, ForkError, NoPeer, PeerGone, ConnectFailed)
}


def error_for(code: int, message: str) -> HcommError:
    """The exception for a negative code (InvalidArgument is raised for
    a code that is not an int)."""
    if isinstance(code, bool) or not isinstance(code, int):
        raise InvalidArgument(f"hcomm: error_for: code {code!r}: want an int")
    cls = BY_CODE.get(code, HcommError)
    return cls(message, code)
