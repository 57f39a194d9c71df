"""Loading libhcomm.so and declaring its functions (ctypes)."""

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading

SONAME = "libhcomm.so.0"

handle_t = ctypes.c_uint64
callback_t = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p)


class Config(ctypes.Structure):
    """hcomm_config_t."""

    _fields_ = [
        ("mem_pool_size", ctypes.c_size_t),
        ("queue_depth", ctypes.c_uint32),
        ("align_size", ctypes.c_uint32),
        ("target", ctypes.c_int32),
        ("flags", ctypes.c_uint32),  # HCOMM_REMOTE_* (was "reserved")
        ("target_path", ctypes.c_char_p),
        ("dev_mem_size", ctypes.c_uint64),
    ]


class TransferStruct(ctypes.Structure):
    """hcomm_transfer_t."""

    _fields_ = [
        ("src_ptr", ctypes.c_void_p),
        ("dst_ptr", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("callback", callback_t),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_uint64),
    ]


class TargetConfig(ctypes.Structure):
    """hcomm_target_config_t."""

    _fields_ = [
        ("target", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("target_path", ctypes.c_char_p),
        ("dev_mem_size", ctypes.c_uint64),
    ]


NOTIFY_MAX = 256  # HCOMM_NOTIFY_MAX


class NotificationStruct(ctypes.Structure):
    """hcomm_notification_t."""

    _fields_ = [
        ("peer", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("seq", ctypes.c_uint64),
        ("msg", ctypes.c_uint8 * NOTIFY_MAX),
    ]


_PROTOS = {
    "hcomm_version": (ctypes.c_char_p, [ctypes.POINTER(ctypes.c_int)] * 3),
    "hcomm_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "hcomm_last_error": (ctypes.c_char_p, []),
    "hcomm_init": (ctypes.c_int, [ctypes.POINTER(handle_t), ctypes.POINTER(Config)]),
    "hcomm_alloc_host_mem": (ctypes.c_void_p, [handle_t, ctypes.c_size_t]),
    "hcomm_free_host_mem": (ctypes.c_int, [handle_t, ctypes.c_void_p]),
    "hcomm_alloc_dev_mem": (ctypes.c_void_p, [handle_t, ctypes.c_size_t]),
    "hcomm_free_dev_mem": (ctypes.c_int, [handle_t, ctypes.c_void_p]),
    "hcomm_register_host_mem": (ctypes.c_int, [handle_t, ctypes.c_void_p, ctypes.c_size_t]),
    "hcomm_unregister_host_mem": (ctypes.c_int, [handle_t, ctypes.c_void_p]),
    "hcomm_submit_transfer": (ctypes.c_int, [handle_t, ctypes.POINTER(TransferStruct)]),
    "hcomm_submit_batch": (ctypes.c_int, [handle_t, ctypes.POINTER(TransferStruct), ctypes.c_int]),
    "hcomm_wait_completion": (ctypes.c_int, [handle_t, ctypes.c_uint64]),
    "hcomm_wait_completion_timeout": (ctypes.c_int, [handle_t, ctypes.c_uint64, ctypes.c_int]),
    "hcomm_connect_timeout": (ctypes.c_int, [handle_t, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)]),
    "hcomm_disconnect": (ctypes.c_int, [handle_t, ctypes.c_uint32]),
    "hcomm_listen_addr": (ctypes.c_int, [handle_t, ctypes.c_char_p, ctypes.c_size_t]),
    "hcomm_remote_offset": (ctypes.c_int, [handle_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "hcomm_finalize": (ctypes.c_int, [handle_t]),
    "hcomm_finalize_timeout": (ctypes.c_int, [handle_t, ctypes.c_int]),
}

# Declared when the library has them (newer than the oldest ABI this
# package loads); their users check hasattr first.
_OPTIONAL = {
    "hcomm_add_target": (ctypes.c_int, [handle_t, ctypes.POINTER(TargetConfig), ctypes.POINTER(ctypes.c_uint32)]),
    "hcomm_alloc_target_mem": (ctypes.c_void_p, [handle_t, ctypes.c_uint32, ctypes.c_size_t]),
    "hcomm_copy": (ctypes.c_int, [handle_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                  ctypes.c_uint32, callback_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]),
    "hcomm_open_file": (ctypes.c_int, [ctypes.POINTER(handle_t), ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                                       ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)]),
    "hcomm_wait_notification": (ctypes.c_int, [handle_t, ctypes.POINTER(NotificationStruct), ctypes.c_int]),
}
HCOMM_FILE_DIRECT = 1

_lock = threading.Lock()
_lib = None


def candidates(path=None):
    """Where the library is looked for, in order: path, $HCOMM_LIBRARY,
    pkg-config's libdir for hcomm, then the dynamic loader's search. A
    generator: pkg-config and find_library (processes of their own) run
    only when the candidates before them did not load."""
    if path:
        yield os.fspath(path)
    env = os.environ.get("HCOMM_LIBRARY")
    if env:
        yield env
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(
                ["pkg-config", "--variable=libdir", "hcomm"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip()
            if libdir:
                yield os.path.join(libdir, SONAME)
        except (OSError, subprocess.SubprocessError):
            pass
    yield SONAME
    found = ctypes.util.find_library("hcomm")
    if found:
        yield found


def load(path=None):
    """Loads libhcomm once (later calls return the same library; a path
    given then must name the same file) and declares its functions. CDLL:
    every call releases the GIL, so callbacks (which take it) can run while
    Python waits in the library."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        if path is not None and not isinstance(path, (str, bytes, os.PathLike)):
            from .errors import InvalidArgument

            raise InvalidArgument(f"hcomm: library {path!r}: want a path")
        for c in candidates(path):
            try:
                lib = ctypes.CDLL(c, use_errno=True)
            except OSError as e:
                errors.append(f"{c}: {e}")
                continue
            for name, (res, args) in _PROTOS.items():
                f = getattr(lib, name)
                f.restype, f.argtypes = res, args
            for name, (res, args) in _OPTIONAL.items():
                f = getattr(lib, name, None)
                if f is not None:
                    f.restype, f.argtypes = res, args
            lib.path = c
            _lib = lib
            return lib
        raise OSError(
            "hcomm: libhcomm not found; build it (make capi) and set HCOMM_LIBRARY=.../libhcomm.so, "
            "or install it (make install) so that pkg-config finds it. Tried: " + "; ".join(errors)
        )
