"""The public API as a user's tools see it: every class, function, method and
property of hcomm and hcomm.data has a docstring (what help() shows) and
type hints, and a type checker reads them from the installed package
(py.typed)."""

import inspect
import os
import pydoc
import subprocess
import sys
import textwrap

import pytest

import hcomm
from hcomm import data


def _public():
    """(qualified name, object) of every public function, class, method and
    property, the classes' own members only (not what they inherit from
    Future, tuple or Exception)."""
    out = []
    for mod in (hcomm, data):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants, BY_CODE
            out.append((f"{mod.__name__}.{name}", obj))
            if not inspect.isclass(obj):
                continue
            for k, v in vars(obj).items():
                if k.startswith("_") and k != "__init__":
                    continue
                if isinstance(v, property):
                    v = v.fget
                if inspect.isfunction(v):
                    out.append((f"{mod.__name__}.{name}.{k}", v))
    return out


def test_public_api_has_docstrings():
    missing = [n for n, o in _public() if not n.endswith(".__init__") and not (o.__doc__ or "").strip()]
    assert not missing, f"no docstring (help() shows nothing): {missing}"
    # help() renders them: the loader's lifetime rule, Engine.submit's futures.
    text = pydoc.render_doc(data.Loader, renderer=pydoc.plaintext)
    assert "keep: how many" in text and "memory_budget" in text
    assert "Transfer future" in pydoc.render_doc(hcomm.Engine.submit, renderer=pydoc.plaintext)


def test_public_api_has_type_hints():
    bare = []
    for n, o in _public():
        if inspect.isclass(o):
            continue
        sig = inspect.signature(o)
        for p in sig.parameters.values():
            if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty:
                bare.append(f"{n}({p.name})")
        if not n.endswith(".__init__") and sig.return_annotation is inspect.Signature.empty:
            bare.append(f"{n} -> ?")
    assert not bare, f"no type hint: {bare}"
    assert os.path.exists(os.path.join(os.path.dirname(hcomm.__file__), "py.typed"))


GOOD = """
import hcomm
from hcomm import data

def step() -> int:
    with hcomm.Engine(pool_size=1 << 20, target="memory") as eng:
        buf = eng.alloc(4096)
        n: int = eng.submit(buf, buf.view(0, 4096)).result(1.0)
        futs: list[hcomm.Transfer] = eng.submit_batch([(buf, buf)])
    with data.Loader("shards/", record_size=4096, batch_size=8) as loader:
        order: list[tuple[int, int]] = loader.order(0)
        return n + len(futs) + len(order) + loader.batches_per_epoch()
"""

BAD = """
import hcomm
from hcomm import data

eng = hcomm.Engine(pool_size="1M")
s: str = eng.alloc(4096)
data.Loader("shards/", batch_size=None)
"""


def test_type_checker_reads_the_installed_package(tmp_path):
    """mypy sees the installed package's hints (py.typed): a correct use
    passes, wrong types are reported, each at its line."""
    pytest.importorskip("mypy", reason="mypy not installed (apt-get install python3-mypy)")
    if os.environ.get("HCOMM_TEST_INSTALLED") != "1":
        pytest.skip("checks the installed package (make python-test)")
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    env = dict(os.environ, MYPYPATH="")

    def mypy(f):
        return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--python-executable",
                               sys.executable, "--disallow-untyped-calls", f], capture_output=True, text=True,
                              cwd=tmp_path, env=env)

    good = mypy("good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy("bad.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    for line, what in ((5, "pool_size"), (6, "HostBuffer"), (7, "batch_size")):
        assert f"bad.py:{line}: error:" in bad.stdout and what in bad.stdout, bad.stdout
