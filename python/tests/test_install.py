"""pip install offline (its own build backend, build isolation on and off)
with every CPython at hand, and the library found through pkg-config after
make install (no HCOMM_LIBRARY)."""

import os
import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _interpreters():
    """The CPythons to install with: this one's base interpreter, the python3
    on PATH, Debian's, $PYTHON; each once."""
    out, seen = [], set()
    for p in (getattr(sys, "_base_executable", sys.executable), shutil.which("python3"), "/usr/bin/python3",
              os.environ.get("PYTHON")):
        if p and os.path.exists(p):
            real = os.path.realpath(p)
            if real not in seen:
                seen.add(real)
                out.append(p)
    return out


def _source(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return src


@pytest.mark.parametrize("isolation", [True, False], ids=["isolated", "no-build-isolation"])
@pytest.mark.parametrize("python", _interpreters())
def test_pip_install_offline(tmp_path, python, isolation):
    venv = tmp_path / "venv"
    # A plain venv: no setuptools or wheel from the system to lean on.
    r = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{python} cannot make a venv: {r.stderr.strip()[-200:]}")
    py = str(venv / "bin" / "python")
    args = [py, "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check"]
    if not isolation:
        args.append("--no-build-isolation")
    subprocess.run(args + [str(_source(tmp_path))], check=True, cwd=tmp_path)
    out = subprocess.run([py, "-c", "import hcomm, sys; print(hcomm.__file__); print(hcomm.__version__)"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(venv)), f"imported {out[0]}, not the installed package"
    assert out[1] == hcomm_version()
    site = os.path.dirname(os.path.dirname(out[0]))
    assert os.path.exists(os.path.join(site, "hcomm", "py.typed"))
    assert os.path.exists(os.path.join(site, "hcomm", "data.py"))


def hcomm_version():
    import hcomm

    return hcomm.__version__


def test_wheel_and_sdist(tmp_path):
    """The backend's wheel is a valid pure-Python wheel (RECORD lists every
    file with its hash) and its sdist builds the same wheel again."""
    sys.path.insert(0, os.path.join(ROOT, "python", "_backend"))
    try:
        import hcomm_backend as b
    finally:
        sys.path.pop(0)
    name = b.build_wheel(str(tmp_path))
    assert name == f"hcomm-{hcomm_version()}-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        record = z.read(f"hcomm-{hcomm_version()}.dist-info/RECORD").decode().split()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            names.discard(path)
            if digest:
                data = z.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == "sha256=" + want and int(size) == len(data), path
        assert not names, f"files not in RECORD: {names}"
        meta = z.read(f"hcomm-{hcomm_version()}.dist-info/METADATA").decode()
        assert f"Version: {hcomm_version()}" in meta and "Requires-Python: >=3.9" in meta
    sd = b.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sd) as t:
        t.extractall(tmp_path / "sd")
    root = tmp_path / "sd" / sd[: -len(".tar.gz")]
    os.makedirs(tmp_path / "w", exist_ok=True)
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, '_backend'); import hcomm_backend as b; "
                          f"print(b.build_wheel({str(tmp_path / 'w')!r}))"], cwd=root, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert (tmp_path / "w" / out).read_bytes() == (tmp_path / name).read_bytes(), "the sdist builds another wheel"


def test_make_install_and_pkg_config(tmp_path):
    for tool in ("make", "go", "pkg-config"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed: cannot make install")
    prefix = tmp_path / "prefix"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(["make", "-s", "-C", ROOT, "install", f"PREFIX={prefix}"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if k not in ("HCOMM_LIBRARY", "PYTHONPATH")}
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    # This interpreter is the venv's with the installed package.
    out = subprocess.run(
        [sys.executable, "-c", "import hcomm, hcomm._lib as l; e = hcomm.Engine(pool_size=8 << 20); "
                               "print(l.load().path, e.submit(e.alloc(64), e.alloc_dev(64)).result(10)); e.close()"],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    ).stdout.split()
    assert out[0] == str(prefix / "lib" / "libhcomm.so.0"), f"loaded {out[0]}"
    assert out[1] == "64"
