"""Exceptions: one class per hcomm.h return code."""

import errno as _errno


class HcommError(Exception):
    """A call into libhcomm failed. code is the negative HCOMM_* code,
    message what hcomm_last_error said."""

    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(HcommError, LookupError):
    code = -_errno.ENOENT  # unknown transfer ID


class DeviceError(HcommError, OSError):
    code = -_errno.EIO


class BadHandle(HcommError):
    code = -_errno.EBADF


class QueueFull(HcommError):
    code = -_errno.EAGAIN


class OutOfMemory(HcommError, MemoryError):
    code = -_errno.ENOMEM


class PermissionDenied(HcommError, PermissionError):
    code = -_errno.EACCES


class BadAddress(HcommError, ValueError):
    code = -_errno.EFAULT


class Busy(HcommError):
    code = -_errno.EBUSY


class NoDevice(HcommError):
    code = -_errno.ENODEV


class InvalidArgument(HcommError, ValueError):
    code = -_errno.EINVAL


class TooManyHandles(HcommError):
    code = -_errno.EMFILE


class NotSupported(HcommError, NotImplementedError):
    code = -_errno.EOPNOTSUPP


class ShuttingDown(HcommError):
    code = -_errno.ESHUTDOWN


class TransferTimeout(HcommError, TimeoutError):
    """The device stalled on the transfer (HCOMM_ETIMEDOUT); not a wait that
    ran out (that is concurrent.futures.TimeoutError)."""

    code = -_errno.ETIMEDOUT


class InProgress(HcommError):
    code = -_errno.EINPROGRESS


class StaleID(HcommError):
    code = -_errno.ESTALE


class Canceled(HcommError):
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

    def __init__(self, message, errors):
        super().__init__(message)
        self.errors = errors


BY_CODE = {
    c.code: c
    for c in (NotFound, DeviceError, BadHandle, QueueFull, OutOfMemory, PermissionDenied, BadAddress, Busy,
              NoDevice, InvalidArgument, TooManyHandles, NotSupported, ShuttingDown, TransferTimeout,
              InProgress, StaleID, Canceled, ForkError, NoPeer, PeerGone, ConnectFailed)
}


def error_for(code, message):
    """The exception for a negative code (InvalidArgument is raised for
    a code that is not an int)."""
    if isinstance(code, bool) or not isinstance(code, int):
        raise InvalidArgument(f"hcomm: error_for: code {code!r}: want an int")
    cls = BY_CODE.get(code, HcommError)
    return cls(message, code)
