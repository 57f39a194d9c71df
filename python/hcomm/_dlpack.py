"""DLPack export of host memory (__dlpack__), with ctypes only.

A DLManagedTensor and its shape live in ctypes objects kept in _live until
the consumer calls the deleter (or the capsule dies unconsumed, when its
destructor calls it); the owner object (the buffer) stays referenced as
long, so the memory cannot be freed by Python while a tensor uses it.
"""

import ctypes

kDLCPU = 1
kDLUInt = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_deleter_t = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _deleter_t)]

_live: dict = {}  # address of the DLManagedTensor -> (tensor, shape, owner)
_NAME = b"dltensor"
_USED = b"used_dltensor"

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_deleter_t
def _deleter(p):
    _live.pop(ctypes.addressof(p.contents), None)


_capsule_destructor_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_capsule_destructor_t
def _capsule_destructor(cap):
    # Not consumed (still named "dltensor"): nobody will call the deleter.
    if _capsule_is_valid(cap, _NAME):
        p = _capsule_get(cap, _NAME)
        _live.pop(p, None)


def capsule(owner, ptr, nbytes):
    """A "dltensor" capsule for nbytes of host memory at ptr, as a 1-D
    uint8 tensor (view it as another dtype on the consumer's side). owner
    stays alive until the consumer lets go."""
    mt = DLManagedTensor()
    shape = (ctypes.c_int64 * 1)(nbytes)
    mt.dl_tensor.data = ptr
    mt.dl_tensor.device = DLDevice(kDLCPU, 0)
    mt.dl_tensor.ndim = 1
    mt.dl_tensor.dtype = DLDataType(kDLUInt, 8, 1)
    mt.dl_tensor.shape = shape
    mt.dl_tensor.strides = None
    mt.dl_tensor.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _deleter
    addr = ctypes.addressof(mt)
    _live[addr] = (mt, shape, owner)
    return _capsule_new(addr, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def live():
    """How many exported tensors are still held by consumers (tests)."""
    return len(_live)
