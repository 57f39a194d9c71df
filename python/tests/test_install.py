"""pip install offline, and the library found through pkg-config after
make install (no HCOMM_LIBRARY)."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_pip_install_offline_and_pkg_config(tmp_path):
    for tool in ("make", "go", "pkg-config"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed: cannot make install")
    prefix = tmp_path / "prefix"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(["make", "-s", "-C", ROOT, "install", f"PREFIX={prefix}"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # --no-index: nothing may be downloaded.
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", str(src)], check=True, cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("HCOMM_LIBRARY", "PYTHONPATH")}
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    out = subprocess.run(
        [py, "-c", "import hcomm, hcomm._lib as l; e = hcomm.Engine(pool_size=8 << 20); "
                   "print(hcomm.__file__, l.load().path, e.submit(e.alloc(64), e.alloc_dev(64)).result(10)); e.close()"],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    ).stdout.split()
    assert out[0].startswith(str(venv)), f"imported {out[0]}, not the installed package"
    assert out[1] == str(prefix / "lib" / "libhcomm.so.0"), f"loaded {out[1]}"
    assert out[2] == "64"
