"""python -m hcomm info: what this machine offers hcomm (library version,
targets that open, the hugetlb pool, io_uring features, and whether this
interpreter has numpy and torch)."""

import ctypes
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

# io_uring_params.features bits (include/uapi/linux/io_uring.h), in order.
_FEATURES = ["single_mmap", "nodrop", "submit_stable", "rw_cur_pos", "cur_personality", "fast_poll", "poll_32bits",
             "sqpoll_nonfixed", "ext_arg", "native_workers", "rsrc_tags", "cqe_skip", "linked_file", "reg_reg_ring",
             "recvsend_bundle", "min_timeout", "rw_attr", "no_iowait"]
_SYS_IO_URING_SETUP = {"x86_64": 425, "aarch64": 425}


def io_uring_features() -> Dict[str, Any]:
    """io_uring_setup(2) with 4 entries, then close: the kernel's feature
    bits by name, or why io_uring is unavailable."""
    machine = os.uname().machine
    nr = _SYS_IO_URING_SETUP.get(machine)
    if nr is None:
        return {"available": False, "why": f"unknown syscall number on {machine}"}
    params = (ctypes.c_uint32 * 30)()  # struct io_uring_params: 120 bytes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(nr, 4, ctypes.byref(params))
    if fd < 0:
        e = ctypes.get_errno()
        why = os.strerror(e)
        try:
            with open("/proc/sys/kernel/io_uring_disabled") as f:
                why += f" (kernel.io_uring_disabled = {f.read().strip()})"
        except OSError:
            pass
        return {"available": False, "why": why}
    os.close(fd)
    bits = params[5]
    names = [n for i, n in enumerate(_FEATURES) if bits & (1 << i)]
    return {"available": True, "features": names, "bits": hex(bits)}


def hugepages(base: str = "/sys/kernel/mm/hugepages") -> Dict[str, Any]:
    """The hugetlb pool per page size, in the kernel's terms (base: the
    sysfs directory): total (nr_hugepages, /proc/meminfo's HugePages_Total
    for the default size), free (free_hugepages, HugePages_Free), reserved
    (resv_hugepages, HugePages_Rsvd: promised to mappings, not yet faulted
    in) and surplus (surplus_hugepages, HugePages_Surp); then the
    transparent-hugepage mode."""
    out: Dict[str, Any] = {}
    files = (("total", "nr_hugepages"), ("free", "free_hugepages"), ("reserved", "resv_hugepages"),
             ("surplus", "surplus_hugepages"))
    try:
        for d in sorted(os.listdir(base)):
            size = d.split("-")[1]
            counts = {}
            for key, name in files:
                with open(os.path.join(base, d, name)) as f:
                    counts[key] = int(f.read())
            out[size] = counts
    except OSError as e:
        out["error"] = str(e)
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            out["thp"] = f.read().strip()
    except OSError:
        pass
    return out


def backends(library: Optional[str] = None) -> Dict[str, str]:
    """Each target: "ok" when an engine opens on it here, else why not."""
    import hcomm
    from hcomm import _lib

    res: Dict[str, str] = {}

    def tryopen(name: str, **kw: Any) -> None:
        try:
            hcomm.Engine(pool_size=1 << 20, library=library, **kw).close()
            res[name] = "ok"
        except (hcomm.HcommError, OSError) as e:
            res[name] = f"unavailable: {e}"

    tryopen("mock", target="mock")
    tryopen("memory", target="memory")
    with tempfile.TemporaryDirectory() as d:
        tryopen("file", target="file", path=os.path.join(d, "probe"), dev_mem_size=1 << 20)
        lib = _lib.load(library)
        if getattr(lib, "hcomm_open_file", None) is not None and lib.hcomm_open_file.argtypes:
            p = os.path.join(d, "direct")
            with open(p, "wb") as f:
                f.write(b"\0" * 4096)
            h, size, granted = _lib.handle_t(), ctypes.c_uint64(), ctypes.c_uint32()
            rc = lib.hcomm_open_file(ctypes.byref(h), p.encode(), _lib.HCOMM_FILE_DIRECT, 0, ctypes.byref(size),
                                     ctypes.byref(granted))
            if rc == 0:
                lib.hcomm_finalize(h.value)
                res["read files (hcomm.data)"] = "ok, O_DIRECT in " + d if granted.value else \
                    "ok, buffered (no O_DIRECT in " + d + ")"
            else:
                res["read files (hcomm.data)"] = "unavailable: " + lib.hcomm_last_error().decode(errors="replace")
        else:
            res["read files (hcomm.data)"] = "unavailable: the library has no hcomm_open_file"
    res["vfio"] = "ok: /dev/vfio/vfio" if os.path.exists("/dev/vfio/vfio") else "unavailable: no /dev/vfio/vfio"
    tryopen("remote", target="remote")
    return res


def info(out=sys.stdout, library: Optional[str] = None) -> int:
    import hcomm
    from hcomm import _lib

    try:
        lib = _lib.load(library)
    except OSError as e:
        print(f"hcomm {hcomm.__version__} (Python package, {os.path.dirname(hcomm.__file__)})", file=out)
        print(f"library: not found: {e}", file=out)
        return 1
    print(f"hcomm {hcomm.__version__} (Python package, {os.path.dirname(hcomm.__file__)})", file=out)
    print(f"library: {hcomm.library_version(library)} ({lib.path})", file=out)
    print("backends:", file=out)
    for k, v in backends(library).items():
        print(f"  {k}: {v}", file=out)
    print("hugepages:", file=out)
    for k, v in hugepages().items():
        line = ", ".join(f"{name} {n}" for name, n in v.items()) if isinstance(v, dict) else v
        print(f"  {k}: {line}", file=out)
    u = io_uring_features()
    if u["available"]:
        print(f"io_uring: features {' '.join(u['features'])} ({u['bits']})", file=out)
    else:
        print(f"io_uring: unavailable: {u['why']}", file=out)
    print(f"python: {sys.version.split()[0]} ({sys.executable})", file=out)
    for k, v in optional_modules().items():
        print(f"  {k}: {v}", file=out)
    return 0


def optional_modules() -> Dict[str, str]:
    """numpy and torch, which NumPy arrays, torch tensors and hcomm.data's
    batches need: the version this interpreter imports, or why it cannot."""
    import importlib

    res: Dict[str, str] = {}
    for name in ("numpy", "torch"):
        try:
            mod = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - an import may fail in any way; say how
            res[name] = f"not importable ({type(e).__name__}: {e}): install it into this interpreter " \
                        f"(Debian's python3: apt-get install python3-{name})"
        else:
            res[name] = f"{getattr(mod, '__version__', '?')} ({os.path.dirname(mod.__file__ or '')})"
    return res


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["info"] or len(argv) > 1:
        print("usage: python -m hcomm info", file=sys.stderr)
        return 2
    return info()


if __name__ == "__main__":
    sys.exit(main())
