"""hcomm.data: a training-data loader that reads shards into pool memory.

    from hcomm.data import Loader

    loader = Loader("shards/", record_size=128 << 10, batch_size=32, shuffle=True, seed=1,
                    epochs=2, format="torch")
    for batch in loader:            # a uint8 tensor of shape (32, 131072): a view of pool memory
        train_step(batch)
    loader.close()

    # inside torch's DataLoader (it batches nothing: the loader does)
    dl = torch.utils.data.DataLoader(loader.torch_dataset(), batch_size=None)

The shards are a list of files (or a directory of them) holding fixed-size
records (record_size bytes each, laid end to end) or NumPy .npy arrays
(records along the first axis). They are read through libhcomm (io_uring,
O_DIRECT where the records are 4096-byte aligned and the file system has
it; hcomm_open_file) straight into one block of an hcomm pool, and each
batch is a NumPy array or a torch tensor over that memory: no copy after
the read, no worker process, no pickling.

The lifetime rule: the memory of a batch is reused after the next `keep`
batches (keep=1 by default). While the loop body runs on batch i,
batches i-keep .. i are valid; when the loader hands out batch
i+keep+1, batch i's memory is read over. Copy what must live longer (batch.clone(), numpy.copy). With
debug=True the loader checks the rule: handing out batch i+keep+1 while a
view of batch i (an array, a tensor, a slice of either) is still alive
raises hcomm.Busy. close() ends every batch's memory.

With device="mock" (the loader's own engine gets a software device) or
device=(engine, target) (a device target of the caller's engine; engine
alone means its first target) each batch, once read into pool memory, is
copied into a device ring of as many batch slots as the pool block has, and
the loader yields a DeviceBatch: .device (where the batch lies in device
memory), .host (the array or tensor over pool memory, as without device)
and .ids. The device slots follow the same lifetime rule.
"""

import ctypes
import itertools
import logging
import os
import random
import struct
import threading
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _args, _dlpack, _lib
from ._engine import DEV_ADDR_BASE, DeviceBuffer, Engine, Region
from .errors import BadHandle, Busy, HcommError, InvalidArgument, NoDevice, NotSupported, PermissionDenied, error_for

log = logging.getLogger("hcomm.data")

__all__ = ["Loader", "Shard", "DeviceBatch", "ALIGN"]

ALIGN = 4096  # what O_DIRECT needs of addresses, lengths and file offsets
_MAX_READ = 16 << 20  # the longest read one transfer makes (adjacent records are merged up to it)
_WAIT_MS = 60_000  # a read that takes longer than this is reported as stalled
_MAX_COUNT = 1 << 20  # the most records per batch, batches ahead or kept
_MAX_RECORD = 1 << 40  # the largest record
_MIN_POOL = 64 << 10  # the engine's smallest pool (engine.MinPoolSize)
_DEV_CHUNK = 4 << 20  # the longest host-to-device transfer (below the mock device's 16 MiB MAX_LEN)

PathLike = Union[str, "os.PathLike[str]"]


class Shard:
    """One file of the dataset: path, where its records start (offset),
    how many there are (count) and whether it is read with O_DIRECT
    (direct, known once it has been opened)."""

    __slots__ = ("path", "offset", "count", "size", "direct", "first")

    def __init__(self, path: str, offset: int, count: int, size: int, first: int):
        self.path, self.offset, self.count, self.size, self.first = path, offset, count, size, first
        self.direct = False

    def __repr__(self) -> str:
        return f"<hcomm.data.Shard {self.path!r} {self.count} records from byte {self.offset}>"


def _fail(exc: HcommError, path: str) -> HcommError:
    exc.path = path
    return exc


class _File:
    """A read handle (hcomm_open_file) with the loader's block registered."""

    def __init__(self, lib: Any, shard: Shard, direct: bool, depth: int):
        self._lib = lib
        h, size, granted = _lib.handle_t(), ctypes.c_uint64(), ctypes.c_uint32()
        flags = _lib.HCOMM_FILE_DIRECT if direct else 0
        rc = lib.hcomm_open_file(ctypes.byref(h), _args.path(shard.path, "hcomm.data: shard"), flags, depth, ctypes.byref(size),
                                 ctypes.byref(granted))
        if rc < 0:
            raise _fail(error_for(rc, f"hcomm.data: shard {shard.path}: {lib.hcomm_last_error().decode(errors='replace')}"),
                        shard.path)
        self.h, self.size, self.direct = h.value, size.value, bool(granted.value & _lib.HCOMM_FILE_DIRECT)
        self.path = shard.path

    def register(self, ptr: int, nbytes: int) -> None:
        self._check(self._lib.hcomm_register_host_mem(self.h, ptr, nbytes), "register the loader's memory")

    def _check(self, rc: int, what: str) -> None:
        if rc < 0:
            raise _fail(error_for(rc, f"hcomm.data: shard {self.path}: {what}: "
                                      f"{self._lib.hcomm_last_error().decode(errors='replace')}"), self.path)

    def close(self, timeout_ms: int = -1) -> None:
        if self.h:
            h, self.h = self.h, 0
            rc = self._lib.hcomm_finalize_timeout(h, timeout_ms)
            if rc < 0:
                raise _fail(error_for(rc, f"hcomm.data: shard {self.path}: close: "
                                          f"{self._lib.hcomm_strerror(rc).decode()}"), self.path)


class _Memory:
    """The memory of one batch handed out: what its views (arrays, DLPack
    tensors) keep alive, so that debug mode can see them."""

    __slots__ = ("ptr", "nbytes", "__weakref__")

    def __init__(self, ptr: int, nbytes: int):
        self.ptr, self.nbytes = ptr, nbytes

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    def __dlpack__(self, stream: Any = None) -> Any:
        return _dlpack.capsule(self, self.ptr, self.nbytes)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (_dlpack.kDLCPU, 0)


class _Batch:
    """A batch in flight: its slot, its records and its reads."""

    __slots__ = ("index", "slot", "ids", "reads", "mem", "epoch")

    def __init__(self, index: int, slot: int, ids: List[Tuple[int, int]], epoch: int):
        self.index, self.slot, self.ids, self.epoch = index, slot, ids, epoch
        self.reads: List[Tuple["_File", int, int]] = []  # (file, transfer id, shard index)
        self.mem: Optional["weakref.ref[_Memory]"] = None


class DeviceBatch:
    """A batch the loader put into device memory (Loader(device=...)).

    device: a Region of the loader's device ring (.ptr the device address
    to hand to the training step, .nbytes the batch's bytes, .base the
    ring's DeviceBuffer); target and offset: the target's index and the
    device-memory offset of the batch's first byte. host: the same batch as
    an array or tensor over pool memory (what the loader yields without
    device). ids: the records' global numbers (return_ids=True) or None.
    records: how many records the batch holds. Both the host and the device
    copy are valid under the lifetime rule (module docstring)."""

    __slots__ = ("device", "host", "ids", "records", "engine")

    def __init__(self, device: Region, host: Any, ids: Any, records: int, engine: Engine):
        self.device, self.host, self.ids, self.records, self.engine = device, host, ids, records, engine

    @property
    def target(self) -> int:
        """The device target's index in its engine."""
        base = self.device.base
        assert isinstance(base, DeviceBuffer)
        return base.target

    @property
    def offset(self) -> int:
        """The device-memory offset of the batch's first byte."""
        base = self.device.base
        assert isinstance(base, DeviceBuffer)
        return base.offset + self.device.offset

    @property
    def nbytes(self) -> int:
        """The batch's bytes."""
        return self.device.nbytes

    def __repr__(self) -> str:
        return (f"<hcomm.data.DeviceBatch {self.records} records, {self.nbytes} bytes at target {self.target} "
                f"offset {self.offset:#x}>")


def _npy_header(path: str) -> Tuple[str, Tuple[int, ...], int]:
    """(dtype descr, shape, data offset) of an .npy file (format 1.x, 2.x,
    3.x), read from its header without NumPy."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 10 or head[:6] != b"\x93NUMPY":
            raise InvalidArgument(f"hcomm.data: {path}: not an .npy file (no \\x93NUMPY magic)")
        major = head[6]
        if major == 1:
            (hlen,) = struct.unpack("<H", head[8:10])
            start = 10
        elif major in (2, 3):
            if len(head) < 12:
                raise InvalidArgument(f"hcomm.data: {path}: truncated .npy header")
            (hlen,) = struct.unpack("<I", head[8:12])
            start = 12
        else:
            raise InvalidArgument(f"hcomm.data: {path}: .npy format version {major}: want 1, 2 or 3")
        f.seek(start)
        text = f.read(hlen)
    if len(text) != hlen:
        raise InvalidArgument(f"hcomm.data: {path}: truncated .npy header ({len(text)} of {hlen} bytes)")
    import ast

    try:
        d = ast.literal_eval(text.decode("latin1"))
        descr, fortran, shape = d["descr"], d["fortran_order"], tuple(int(x) for x in d["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise InvalidArgument(f"hcomm.data: {path}: bad .npy header {text[:80]!r}: {e}") from None
    if not isinstance(descr, str):
        raise InvalidArgument(f"hcomm.data: {path}: structured dtype {descr!r}: want a plain one")
    if fortran and len(shape) > 1:
        raise InvalidArgument(f"hcomm.data: {path}: Fortran-order array: records must be rows (C order)")
    if not shape:
        raise InvalidArgument(f"hcomm.data: {path}: a 0-d array has no records")
    if any(x < 0 for x in shape) or any(x == 0 for x in shape[1:]):
        raise InvalidArgument(f"hcomm.data: {path}: shape {shape}: want sizes > 0 (records of at least one byte)")
    return descr, shape, start + hlen


def _itemsize(descr: str) -> int:
    kind = descr[1:2] if descr[:1] in "<>|=" else descr[:1]
    try:
        n = int(descr[2:]) if descr[:1] in "<>|=" else int(descr[1:])
    except ValueError:
        n = 0
    # Not "O" (an object array over raw bytes would read them as pointers).
    if not kind or kind not in "biufcSUV" or n < 1:
        raise InvalidArgument(f"hcomm.data: dtype {descr!r}: want a fixed-size, non-object one such as '<f4'")
    return n * (4 if kind == "U" else 1)


def _list_files(files: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    try:
        if isinstance(files, (str, bytes, os.PathLike)):
            p = os.fsdecode(files)
            if os.path.isdir(p):
                try:
                    names = sorted(n for n in os.listdir(p) if not n.startswith("."))
                except PermissionError as e:
                    raise _fail(PermissionDenied(f"hcomm.data: {p}: {e}"), p) from None
                except OSError as e:
                    raise _fail(NoDevice(f"hcomm.data: {p}: {e}"), p) from None
                return [os.path.join(p, n) for n in names]
            return [p]
        return [os.fsdecode(f) for f in files]
    except TypeError:
        raise InvalidArgument(f"hcomm.data: files {files!r}: want a directory, a path or a list of paths") from None


class Loader:
    """Batches of records read from shards into pool memory.

    files: a directory (its files, sorted by name, dot files left out) or
    a list of paths. record_size: bytes per record for files of fixed-size
    records; None for .npy files (records along axis 0; every shard the
    same dtype and row shape). dtype and shape: how a record of a
    fixed-size file is viewed (default: record_size uint8).

    batch_size: records per batch (the last of an epoch may be short
    unless drop_last). prefetch: batches read ahead of the one handed out
    (default 1: while the loop body runs, the next batch is being read;
    while the loader waits for it, the one after it too). keep: how many
    batches after a batch its memory stays valid (the lifetime rule;
    module docstring; default 1: the previous batch stays valid while the
    body runs, which a `for batch in loader` loop needs in debug mode, its
    variable still holding the batch when it asks for the next).
    memory_budget: the most pool bytes in flight (read ahead, handed out,
    kept), default what prefetch and keep need: keep + 1 + prefetch
    batches, 3 with the defaults (what torch's DataLoader(num_workers=0)
    holds at its peak: the batch in use, the next batch's samples and
    their collated copy); a smaller budget lowers prefetch, one below
    (keep + 2) batches is refused. More read-ahead (prefetch=2, ...) costs
    a batch of memory each. shuffle: the order of the shards and of the
    records within each shard is shuffled per epoch from seed (the same
    seed, the same order; other seeds, other orders); records are read
    shard by shard either way, so each shard is opened once per epoch.
    epochs: how many passes one iteration makes. format: "numpy" or
    "torch" (a tensor over the same memory). return_ids: yield (batch,
    ids), ids the records' global numbers (shard.first + row; int64).
    direct: O_DIRECT for shards whose records are 4096-byte aligned (in
    the file and in size) where the file system has it. on_error: "raise"
    (default) or "skip": a shard that cannot be opened, or whose size or
    header does not hold whole records, raises an HcommError naming the
    file (.path) when the loader is made, or with "skip" is left out with
    a warning (loader.skipped lists (path, error)); a read that fails
    later always raises. debug: check the lifetime rule (hcomm.Busy).
    device: None (the default: batches stay in pool memory), "mock" (the
    loader's engine gets a software device of its own), or a device
    target of the caller's engine, (engine, target index) or an engine
    (its first target): each batch is copied into a device ring of as
    many batch slots as the pool block (the same lifetime rule) and the
    loader yields DeviceBatch objects. The ring is the loader's until
    close(); with the caller's engine the loader registers its block with
    it and frees the ring and the registration at close().

    Errors are the package's: InvalidArgument (bad arguments, a truncated
    or malformed shard), NoDevice (no such file), PermissionDenied,
    DeviceError (a read failed), Busy (debug: a batch kept too long; a
    second iteration while one runs), NotSupported (a libhcomm without
    hcomm_open_file).
    """

    def __init__(self, files: Union[PathLike, Sequence[PathLike]], *, record_size: Optional[int] = None,
                 dtype: str = "uint8", shape: Optional[Sequence[int]] = None, batch_size: int = 32,
                 prefetch: int = 1, keep: int = 1, memory_budget: Optional[int] = None, shuffle: bool = False,
                 seed: int = 0, epochs: int = 1, drop_last: bool = False, format: str = "numpy",
                 return_ids: bool = False, direct: bool = True, on_error: str = "raise", debug: bool = False,
                 device: Union[None, str, Engine, Tuple[Engine, int]] = None, library: Optional[str] = None):
        batch_size = _args.integer(batch_size, "hcomm.data: batch_size", 1, _MAX_COUNT)
        prefetch = _args.integer(prefetch, "hcomm.data: prefetch", 0, _MAX_COUNT)
        keep = _args.integer(keep, "hcomm.data: keep", 0, _MAX_COUNT)
        epochs = _args.integer(epochs, "hcomm.data: epochs", 0, _args.I64)
        seed = _args.integer(seed, "hcomm.data: seed", -_args.I64 - 1, _args.U64)
        if memory_budget is not None:
            memory_budget = _args.integer(memory_budget, "hcomm.data: memory_budget", 0, _args.I64)
        if record_size is not None:
            record_size = _args.integer(record_size, "hcomm.data: record_size", 1, _MAX_RECORD)
        _args.choice(format, ("numpy", "torch"), "hcomm.data: format")
        _args.choice(on_error, ("raise", "skip"), "hcomm.data: on_error")
        self._dev_engine: Optional[Engine] = None
        self._dev_target = 0
        if device is not None:
            if isinstance(device, tuple) and len(device) == 2 and isinstance(device[0], Engine):
                self._dev_engine = device[0]
                self._dev_target = _args.integer(device[1], "hcomm.data: device target", 0, _args.U32)
            elif isinstance(device, Engine):
                self._dev_engine = device
            elif not (isinstance(device, str) and device == "mock"):
                raise InvalidArgument(f"hcomm.data: device {device!r}: want None, 'mock', an Engine or "
                                      f"(Engine, target index)")
            if self._dev_engine is not None and self._dev_engine.closed:
                raise BadHandle("hcomm.data: device: the engine is closed")
        self.device = device
        self._ring: Optional[DeviceBuffer] = None
        self._dev_eng: Optional[Engine] = None  # the engine the device copies go through
        self._ring_reg: Any = None
        self._lib = _lib.load(library)
        if not hasattr(self._lib, "hcomm_open_file") or getattr(self._lib.hcomm_open_file, "argtypes", None) is None:
            raise NotSupported(f"hcomm.data: {self._lib.path} has no hcomm_open_file: use a newer libhcomm")
        self.batch_size, self.keep, self.epochs, self.drop_last = batch_size, keep, epochs, drop_last
        self.shuffle, self.seed, self.format, self.return_ids = shuffle, seed, format, return_ids
        self.direct, self.on_error, self.debug = direct, on_error, debug
        self.skipped: List[Tuple[str, HcommError]] = []
        self._files_open: Dict[int, _File] = {}
        self._lock = threading.Lock()
        self._running = False
        self._closed = False
        self._pool: Optional[Engine] = None
        # opened: shard opens (once per shard and epoch), of which
        # opened_direct with O_DIRECT; reads: transfers submitted.
        # device_copies: host-to-device transfers (device=...).
        self.stats = {"batches": 0, "records": 0, "bytes": 0, "reads": 0, "max_bytes_in_flight": 0,
                      "opened": 0, "opened_direct": 0, "device_copies": 0}

        self._descr: Optional[str]
        self._shape: Optional[Tuple[int, ...]]
        if record_size is not None:
            self._descr = _descr(dtype)
            item = _itemsize(self._descr)
            if shape is None:
                self._shape = (record_size // item,)
            else:
                try:
                    dims = list(shape)
                except TypeError:
                    raise InvalidArgument(f"hcomm.data: shape {shape!r}: want a sequence of sizes") from None
                self._shape = tuple(_args.integer(d, "hcomm.data: shape", 1, _MAX_RECORD) for d in dims)
            if _prod(self._shape) * item != record_size:
                raise InvalidArgument(f"hcomm.data: shape {self._shape} of {dtype} is not record_size {record_size} bytes")
        else:
            self._descr, self._shape = None, None
        self.record_size = record_size
        self._npy = record_size is None
        self.shards: List[Shard] = []
        first = 0
        for path in _list_files(files):
            _args.path(path, "hcomm.data: shard")
            try:
                sh = self._probe(path, first)
            except HcommError as e:
                e.path = path
                if on_error == "raise":
                    raise
                log.warning("hcomm.data: shard left out: %s", e)
                self.skipped.append((path, e))
                continue
            self.shards.append(sh)
            first += sh.count
        if not self.shards:
            raise InvalidArgument(f"hcomm.data: no shards to read in {files!r}"
                                  + (f" ({len(self.skipped)} left out)" if self.skipped else ""))
        self.records = first
        assert self.record_size is not None
        self._slot_bytes = _round(batch_size * self.record_size)
        need = (keep + 1 + prefetch) * self._slot_bytes
        if memory_budget is not None:
            if memory_budget < (keep + 2) * self._slot_bytes:
                raise InvalidArgument(f"hcomm.data: memory_budget {memory_budget}: less than (keep + 2) = {keep + 2} "
                                      f"batches of {self._slot_bytes} bytes")
            prefetch = min(prefetch, memory_budget // self._slot_bytes - keep - 1)
        self.prefetch = prefetch
        self.memory_budget = memory_budget if memory_budget is not None else need
        self._nslots = keep + 1 + prefetch
        # A file handle never has more reads in flight than the batches
        # read ahead (and the one awaited) hold: its queue depth.
        self._depth = min(1 << 15, _pow2(max(64, (prefetch + 1) * batch_size)))
        self.dtype = self._descr
        self.shape = self._shape

    # ---- shards ----------------------------------------------------------

    def _probe(self, path: str, first: int) -> Shard:
        """Opens the shard once (hcomm_open_file: it exists, is a regular
        file and may be read) and checks that it holds whole records."""
        f = _File(self._lib, Shard(path, 0, 0, 0, first), False, 8)
        try:
            size = f.size
        finally:
            f.close()
        if self._npy:
            return self._probe_npy(path, size, first)
        rs = self.record_size
        assert rs is not None
        if size % rs:
            raise InvalidArgument(f"hcomm.data: shard {path}: {size} bytes is not a whole number of "
                                  f"{rs}-byte records ({size % rs} bytes over: truncated?)")
        return Shard(path, 0, size // rs, size, first)

    def _probe_npy(self, path: str, size: int, first: int) -> Shard:
        try:
            descr, shape, offset = _npy_header(path)
        except OSError as e:
            raise InvalidArgument(f"hcomm.data: shard {path}: {e}") from e
        rec = _itemsize(descr) * _prod(shape[1:])
        if self._descr is None:
            self._descr, self._shape, self.record_size = descr, tuple(shape[1:]), rec
        elif (descr, tuple(shape[1:])) != (self._descr, self._shape):
            raise InvalidArgument(f"hcomm.data: shard {path}: records of {descr} {shape[1:]}, the first shard's "
                                  f"are {self._descr} {self._shape}")
        want = offset + shape[0] * rec
        if size < want:
            raise InvalidArgument(f"hcomm.data: shard {path}: {size} bytes, its header promises {want} "
                                  f"({shape[0]} records of {rec} bytes from byte {offset}): truncated")
        return Shard(path, offset, shape[0], size, first)

    # ---- order -----------------------------------------------------------

    def order(self, epoch: int) -> List[Tuple[int, int]]:
        """The (shard, row) pairs of an epoch in the order they are
        handed out: a function of seed and epoch alone."""
        return list(self._order(_args.integer(epoch, "hcomm.data: order: epoch", 0, _args.I64)))

    def _order(self, epoch: int) -> Iterator[Tuple[int, int]]:
        # order(epoch), one shard's rows at a time (an iteration holds no
        # list of the whole epoch).
        shards = list(range(len(self.shards)))
        rng = random.Random((self.seed << 32) ^ epoch) if self.shuffle else None
        if rng is not None:
            rng.shuffle(shards)
        for s in shards:
            rows = list(range(self.shards[s].count))
            if rng is not None:
                rng.shuffle(rows)
            for r in rows:
                yield s, r

    def batches_per_epoch(self) -> int:
        """Batches one epoch yields."""
        n = self.records // self.batch_size
        return n if self.drop_last or self.records % self.batch_size == 0 else n + 1

    def __len__(self) -> int:
        return self.batches_per_epoch() * self.epochs

    def _plan(self) -> Iterator[Tuple[int, List[Tuple[int, int]]]]:
        if self.batches_per_epoch() == 0:
            return  # every epoch empty (drop_last, fewer records than a batch): not epochs x nothing
        for e in range(self.epochs):
            o = self._order(e)
            while True:
                ids = list(itertools.islice(o, self.batch_size))
                if not ids or (len(ids) < self.batch_size and self.drop_last):
                    break
                yield e, ids

    # ---- reading ---------------------------------------------------------

    def _file(self, s: int) -> _File:
        f = self._files_open.get(s)
        if f is None:
            sh = self.shards[s]
            rs = self.record_size
            assert rs is not None
            aligned = rs % ALIGN == 0 and sh.offset % ALIGN == 0
            f = _File(self._lib, sh, self.direct and aligned, self._depth)
            try:
                if f.size < sh.offset + sh.count * rs:
                    raise _fail(InvalidArgument(f"hcomm.data: shard {sh.path}: {f.size} bytes now, "
                                                f"{sh.offset + sh.count * rs} when the loader was made: truncated"),
                                sh.path)
                f.register(self._base, self._nslots * self._slot_bytes)
            except BaseException:
                f.close()
                raise
            sh.direct = f.direct
            self.stats["opened"] += 1
            self.stats["opened_direct"] += f.direct
            self._files_open[s] = f
        return f

    def _submit(self, b: _Batch, left: Dict[int, int]) -> None:
        """Submits batch b's reads into its slot: one per run of adjacent
        rows of one shard (up to _MAX_READ bytes)."""
        rs = self.record_size
        assert rs is not None
        dst0 = self._base + b.slot * self._slot_bytes
        runs: List[Tuple[int, int, int, int]] = []  # (shard, first row, rows, position in the batch)
        for pos, (s, r) in enumerate(b.ids):
            if runs:
                ps, pr, pn, pp = runs[-1]
                if ps == s and pr + pn == r and (pn + 1) * rs <= _MAX_READ:
                    runs[-1] = (ps, pr, pn + 1, pp)
                    continue
            runs.append((s, r, 1, pos))
        i = 0
        while i < len(runs):
            s = runs[i][0]
            j = i
            while j < len(runs) and runs[j][0] == s:
                j += 1
            f = self._file(s)
            sh = self.shards[s]
            arr = (_lib.TransferStruct * (j - i))()
            for k, (_, r, n, pos) in enumerate(runs[i:j]):
                t = arr[k]
                t.src_ptr = DEV_ADDR_BASE + sh.offset + r * rs
                t.dst_ptr = dst0 + pos * rs
                t.size = n * rs
            rc = self._lib.hcomm_submit_batch(f.h, arr, j - i)
            for k in range(j - i):
                if arr[k].id:
                    b.reads.append((f, arr[k].id, s))
            if rc < 0:
                f._check(rc, f"submit {j - i} reads")
            self.stats["reads"] += j - i
            i = j

    def _wait(self, b: _Batch, left: Dict[int, int]) -> None:
        """Waits for batch b's reads; closes the shards it finished."""
        reads, b.reads = b.reads, []
        for n, (f, tid, s) in enumerate(reads):
            rc = self._lib.hcomm_wait_completion_timeout(f.h, tid, _WAIT_MS)
            if rc < 0:
                b.reads = reads[n + 1:]  # still to be waited for by close()
                what = "stalled" if rc == -115 else "read failed"
                raise _fail(error_for(rc, f"hcomm.data: shard {f.path}: {what} "
                                          f"({self._lib.hcomm_strerror(rc).decode()})"), f.path)
        for s, _ in b.ids:
            left[s] -= 1
            if left[s] == 0:
                del left[s]
                done = self._files_open.pop(s) if s in self._files_open else None
                if done is not None:
                    done.close()

    def _view(self, b: _Batch) -> Any:
        rs = self.record_size
        assert rs is not None and self._descr is not None
        n = len(b.ids)
        mem = _Memory(self._base + b.slot * self._slot_bytes, n * rs)
        if self.debug:
            b.mem = weakref.ref(mem)
        shape = (n,) + tuple(self._shape or ())
        data: Any
        if self.format == "torch":
            import torch

            t = torch.from_dlpack(mem)
            dt = _torch_dtype(torch, self._descr)
            data = (t.view(dt) if dt is not torch.uint8 else t).view(shape)
        else:
            import numpy

            data = numpy.asarray(mem).view(numpy.dtype(self._descr)).reshape(shape)
        if not self.return_ids:
            return data
        ids = [self.shards[s].first + r for s, r in b.ids]
        if self.format == "torch":
            import torch

            return data, torch.tensor(ids, dtype=torch.int64)
        import numpy

        return data, numpy.array(ids, dtype=numpy.int64)

    def _to_device(self, b: _Batch, host: Any) -> DeviceBatch:
        """Copies batch b from its pool slot into its device slot (in
        transfers of at most _DEV_CHUNK bytes) and waits for the copy."""
        eng, ring, block = self._dev_eng, self._ring, self._block
        assert eng is not None and ring is not None
        n = len(b.ids) * (self.record_size or 0)
        off = b.slot * self._slot_bytes
        chunks = [(block.view(off + o, min(_DEV_CHUNK, n - o)), ring.view(off + o, min(_DEV_CHUNK, n - o)))
                  for o in range(0, n, _DEV_CHUNK)]
        for i in range(0, len(chunks), 32):
            futs = eng.submit_batch(chunks[i:i + 32])
            self.stats["device_copies"] += len(futs)
            for f in futs:
                f.result(_WAIT_MS / 1000)
        if self.return_ids:
            data, ids = host
        else:
            data, ids = host, None
        return DeviceBatch(ring.view(off, n), data, ids, len(b.ids), eng)

    def _release(self, b: _Batch) -> None:
        """Batch b's slot is about to be read over (debug: no view of it
        may be alive)."""
        if self.debug and b.mem is not None and b.mem() is not None:
            raise Busy(f"hcomm.data: batch {b.index}'s memory is reused now, {self.keep + 1} batches later, "
                       f"but a view of it (an array or tensor, or a slice of one) is still alive: the loader keeps "
                       f"a batch valid for keep={self.keep} batches after it; copy what must live longer, or raise keep")

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            if self._closed:
                raise BadHandle("hcomm.data: the loader is closed")
            if self._running:
                raise Busy("hcomm.data: the loader is already being iterated (one iteration at a time)")
            self._running = True
        try:
            if self._pool is None:
                self._open_pool()
            yield from self._run()
        finally:
            self._running = False

    def _open_pool(self) -> None:
        nbytes = self._nslots * self._slot_bytes
        # The pool is the budget exactly (one block of it; the engine's
        # smallest pool, 64 KiB, for a smaller one): nothing of it is
        # mapped beyond what the batches use.
        size = max(nbytes, _MIN_POOL)
        if self.device == "mock":
            self._pool = Engine(pool_size=size, queue_depth=64, align=ALIGN, target="mock", dev_mem_size=size)
        else:
            self._pool = Engine(pool_size=size, queue_depth=64, align=ALIGN, target="memory")
        self._block = self._pool.alloc(nbytes)
        self._base = self._block.ptr
        if self.device is None:
            return
        if self._dev_engine is None:
            self._dev_eng = self._pool
            self._ring = self._pool.alloc_dev(nbytes)
            return
        eng = self._dev_engine
        self._dev_eng = eng
        self._ring_reg = eng.register(self._block)
        try:
            self._ring = eng.alloc_dev(nbytes, target=self._dev_target)
        except BaseException:
            reg, self._ring_reg = self._ring_reg, None
            eng.unregister(reg)
            raise

    def _close_device(self) -> None:
        """Gives the caller's engine its device memory and registration
        back (the loader's own engine frees both when it closes)."""
        eng = self._dev_engine
        ring, reg, self._ring, self._ring_reg = self._ring, self._ring_reg, None, None
        if eng is None or eng.closed:
            return
        try:
            if ring is not None:
                ring.free()
        finally:
            if reg is not None:
                eng.unregister(reg)

    def _run(self) -> Iterator[Any]:
        plan = self._plan()
        left: Dict[int, int] = {}
        inflight: List[_Batch] = []  # read ahead, not handed out yet
        handed: List[_Batch] = []  # handed out and still valid (at most keep + 1)
        self._inflight, self._handed = inflight, handed
        index = 0
        slot = 0
        done = False

        def refill() -> None:
            nonlocal index, slot, done
            while not done and len(inflight) <= self.prefetch and len(inflight) + len(handed) < self._nslots:
                nxt = next(plan, None)
                if nxt is None:
                    done = True
                    return
                epoch, ids = nxt
                b = _Batch(index, slot, ids, epoch)
                index += 1
                slot = (slot + 1) % self._nslots
                for s, _ in ids:
                    left[s] = left.get(s, 0) + 1
                inflight.append(b)
                self._submit(b, left)
                self._account(len(inflight) + len(handed))

        try:
            while True:
                if self._closed:
                    raise BadHandle("hcomm.data: the loader was closed during the iteration: its memory is gone")
                # Batch i is handed out: batch i - keep - 1's slot is free.
                if len(handed) > self.keep:
                    self._release(handed.pop(0))
                refill()
                if not inflight:
                    return
                b = inflight.pop(0)
                self._wait(b, left)
                handed.append(b)
                self.stats["batches"] += 1
                self.stats["records"] += len(b.ids)
                self.stats["bytes"] += len(b.ids) * (self.record_size or 0)
                view = self._view(b)
                if self._ring is not None:
                    view = self._to_device(b, view)
                yield view
                del view
        finally:
            self._drain()

    def _account(self, slots: int) -> None:
        self.stats["max_bytes_in_flight"] = max(self.stats["max_bytes_in_flight"], slots * self._slot_bytes)

    def _drain(self, timeout_ms: int = -1) -> None:
        """Ends an iteration: every read in flight is waited for (or
        canceled by closing its handle), every shard closed."""
        errs = []
        for f in list(self._files_open.values()):
            try:
                f.close(timeout_ms)
            except HcommError as e:  # reported below, after everything is closed
                errs.append(e)
        self._files_open.clear()
        for b in getattr(self, "_inflight", []):
            b.reads = []
        self._inflight, self._handed = [], []
        if errs:
            raise errs[0]

    def torch_dataset(self) -> Any:
        """This loader as a torch.utils.data.IterableDataset, for
        DataLoader(ds, batch_size=None) (num_workers=0: the loader reads
        ahead itself, and libhcomm does not survive fork)."""
        import torch.utils.data

        loader = self

        class _Dataset(torch.utils.data.IterableDataset):
            def __iter__(self) -> Iterator[Any]:
                return iter(loader)

            def __len__(self) -> int:
                return len(loader)

        return _Dataset()

    def close(self) -> None:
        """Stops reading (reads in flight are waited for, or canceled after
        a second), closes every shard and gives the pool back: every batch's
        memory ends here. Safe to call twice, and mid-epoch."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            try:
                self._drain(1000)
            finally:
                self._close_device()
        finally:
            self._ring = None
            if self._pool is not None:
                pool, self._pool = self._pool, None
                pool.close()

    @property
    def closed(self) -> bool:
        """Whether close() has run."""
        return self._closed

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - nothing to report to at GC time
                pass


def _descr(dtype: Any) -> str:
    """A dtype's array-interface string ('|u1', '<f4') without NumPy for the
    common names."""
    names = {"uint8": "|u1", "int8": "|i1", "bool": "|b1", "uint16": "<u2", "int16": "<i2", "float16": "<f2",
             "uint32": "<u4", "int32": "<i4", "float32": "<f4", "uint64": "<u8", "int64": "<i8", "float64": "<f8"}
    if isinstance(dtype, str) and dtype in names:
        return names[dtype]
    if isinstance(dtype, str) and dtype[:1] in "<>|=" and dtype[1:2].isalpha():
        return dtype
    try:
        import numpy

        return numpy.dtype(dtype).str
    except (ImportError, TypeError) as e:
        raise InvalidArgument(f"hcomm.data: dtype {dtype!r}: {e}") from None


def _torch_dtype(torch: Any, descr: str) -> Any:
    m = {"u1": torch.uint8, "i1": torch.int8, "b1": torch.bool, "i2": torch.int16, "f2": torch.float16,
         "i4": torch.int32, "f4": torch.float32, "i8": torch.int64, "f8": torch.float64}
    k = descr[1:]
    if k not in m or (descr[0] == ">" and k not in ("u1", "i1", "b1")):
        raise NotSupported(f"hcomm.data: dtype {descr!r} has no torch equivalent (use format='numpy')")
    return m[k]


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p
