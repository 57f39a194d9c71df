"""The build backend of the hcomm package (PEP 517, PEP 660), in the tree.

pyproject.toml names it with backend-path, so pip imports it from here
and needs nothing else: no setuptools, no wheel, no download, with build
isolation on or off, on any CPython >= 3.9. The package is pure Python,
so a wheel is a zip file of hcomm/ plus its .dist-info (METADATA, WHEEL,
RECORD) in the layout of the binary distribution format
(packaging.python.org/specifications/binary-distribution-format/).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

NAME = "hcomm"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, NAME)
TAG = "py3-none-any"
# Zip entries get a fixed time (SOURCE_DATE_EPOCH when set): the same tree
# gives the same wheel.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, the zip format's first


def version():
    """__version__ of hcomm/__init__.py: the one place the version is written."""
    with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if m is None:
        raise RuntimeError(f"{PACKAGE}/__init__.py: no __version__ = \"...\" line")
    return m.group(1)


def metadata():
    """The core metadata (METADATA, PKG-INFO), version 2.1."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version()}",
        "Summary: Host-device data movement with few copies and system calls (Python binding of libhcomm)",
        "License: MIT",
        "Requires-Python: >=3.9",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: License :: OSI Approved :: MIT License",
        "Classifier: Typing :: Typed",
        "Provides-Extra: numpy",
        'Requires-Dist: numpy; extra == "numpy"',
        "Provides-Extra: torch",
        'Requires-Dist: torch; extra == "torch"',
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + readme


def _dist_info():
    return f"{NAME}-{version()}.dist-info"


def _package_files():
    """(path in the archive, path on disk) of the package: its .py files and
    py.typed, sorted; no caches."""
    out = []
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") or f == "py.typed":
                p = os.path.join(d, f)
                out.append((os.path.relpath(p, ROOT).replace(os.sep, "/"), p))
    return out


def _meta_files():
    wheel = f"Wheel-Version: 1.0\nGenerator: {NAME}_backend\nRoot-Is-Purelib: true\nTag: {TAG}\n"
    return {"METADATA": metadata(), "WHEEL": wheel}


def _write_wheel(wheel_directory, entries):
    """Writes a wheel of entries ([(archive path, bytes)]) and its RECORD;
    returns the file name."""
    name = f"{NAME}-{version()}-{TAG}.whl"
    di = _dist_info()
    record = []
    path = os.path.join(wheel_directory, name)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            _zip_add(z, arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{di}/RECORD,,")
        _zip_add(z, f"{di}/RECORD", ("\n".join(record) + "\n").encode())
    os.replace(tmp, path)
    return name


def _zip_add(z, arc, data):
    info = zipfile.ZipInfo(arc, time.gmtime(max(EPOCH, 315532800))[:6])
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def _read(p):
    with open(p, "rb") as f:
        return f.read()


# ---- the PEP 517 hooks ------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    for name, text in _meta_files().items():
        with open(os.path.join(di, name), "w", encoding="utf-8") as f:
            f.write(text)
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = [(arc, _read(p)) for arc, p in _package_files()]
    entries += [(f"{_dist_info()}/{n}", t.encode()) for n, t in _meta_files().items()]
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose one .pth file puts this tree on sys.path, so
    that edits to hcomm/ take effect without reinstalling."""
    entries = [(f"_{NAME}_editable.pth", (ROOT + "\n").encode())]
    entries += [(f"{_dist_info()}/{n}", t.encode()) for n, t in _meta_files().items()]
    return _write_wheel(wheel_directory, entries)


def build_sdist(sdist_directory, config_settings=None):
    """A source archive: pyproject.toml, the backend, the package, the README,
    the tests and examples, and PKG-INFO."""
    base = f"{NAME}-{version()}"
    name = base + ".tar.gz"
    files = []
    for top in ("pyproject.toml", "README.md", "_backend", NAME, "tests", "examples"):
        p = os.path.join(ROOT, top)
        if os.path.isfile(p):
            files.append(p)
        for d, dirs, fs in os.walk(p):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            files += [os.path.join(d, f) for f in sorted(fs) if not f.endswith(".pyc")]

    def add(t, arc, data):
        info = tarfile.TarInfo(f"{base}/{arc}")
        info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
        t.addfile(info, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for p in files:
            add(t, os.path.relpath(p, ROOT).replace(os.sep, "/"), _read(p))
        add(t, "PKG-INFO", metadata().encode())
    return name
