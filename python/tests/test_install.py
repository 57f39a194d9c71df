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


def _install_commands():
    """{command: [documents]}: the lines of the sh blocks of README.md,
    python/README.md and docs/python.md that install ./python with pip
    (comments cut off)."""
    out = {}
    for doc in ("README.md", os.path.join("python", "README.md"), os.path.join("docs", "python.md")):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            block = False
            for line in f:
                if line.startswith("```"):
                    block = line.strip() == "```sh"
                    continue
                if block and "pip" in line and "./python" in line:
                    out.setdefault(line.split(" #")[0].strip(), []).append(doc)
    return out


@pytest.mark.parametrize("python", _interpreters())
@pytest.mark.parametrize("command", sorted(_install_commands()))
def test_documented_install_command(tmp_path, command, python):
    """The install command the READMEs and docs/python.md give, run as a
    user runs it from the repository's root with `python3` (and its `pip`)
    the interpreter at hand: it installs a package that interpreter can
    import, and the interpreter's numpy stays visible (Debian's python3
    refuses pip outside a venv, PEP 668, and its numpy and torch are
    system packages). The bare `pip` (the interpreter's own) runs with
    --dry-run, so that the test never installs outside tmp_path."""
    real = subprocess.run([python, "-c", "import sys; print(sys.executable)"], check=True, capture_output=True,
                          text=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(real, bindir / "python3")
    for pip in ("pip", "pip3"):
        shim = bindir / pip
        shim.write_text(f'#!/bin/sh\n[ "$1" = install ] && {{ shift; set -- install --dry-run "$@"; }}\n'
                        f'exec {real} -m pip "$@"\n')
        shim.chmod(0o755)
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(os.path.join(ROOT, "python"), work / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run(["sh", "-ec", command], cwd=work, env=env, capture_output=True, text=True)
    docs = ", ".join(_install_commands()[command])
    assert r.returncode == 0, f"{docs}: `{command}` with {real}: exit status {r.returncode}\n{r.stderr[-1500:]}"
    venvs = [os.path.dirname(os.path.join(d, "pyvenv.cfg")) for d, _, fs in os.walk(work) if "pyvenv.cfg" in fs]
    if not venvs:  # a bare pip: it would install into the interpreter itself (and did not refuse to)
        assert f"Would install hcomm-{hcomm_version()}" in r.stdout, \
            f"{docs}: `{command}` with {real} installs no hcomm:\n{r.stdout[-1500:]}"
        return
    code = "import sys, hcomm; print(hcomm.__file__, hcomm.__version__, sys.base_prefix)"
    want_base = subprocess.run([real, "-c", "import sys; print(sys.base_prefix)"], check=True, capture_output=True,
                               text=True).stdout.strip()
    has_numpy = subprocess.run([real, "-c", "import numpy"], capture_output=True).returncode == 0
    for v in venvs:
        py = os.path.join(v, "bin", "python")
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
        assert out.returncode == 0, f"{docs}: `{command}` with {real}: {py} cannot import hcomm:\n{out.stderr}"
        path, version, base = out.stdout.split()
        assert path.startswith(v) and version == hcomm_version() and base == want_base, out.stdout
        if has_numpy:
            r = subprocess.run([py, "-c", "import numpy"], capture_output=True, text=True, cwd=tmp_path, env=env)
            assert r.returncode == 0, f"{docs}: `{command}`: {real} has numpy, its venv does not see it"


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
