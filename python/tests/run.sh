#!/bin/sh
# make python-test: installs the package from python/ into a fresh virtual
# environment of $PYTHON (default: the python3 on PATH) with pip, offline,
# and runs python/tests with pytest against that installed package (from
# outside the source tree, so that the tree's hcomm/ is never imported).
#
# The venv is made with --system-site-packages, so the interpreter's numpy,
# torch and pytest are visible (Debian's python3-numpy, python3-torch,
# python3-pytest for /usr/bin/python3). When $PYTHON has no pytest and
# PYTHON was not given, the tests run with /usr/bin/python3's instead (after
# the install into $PYTHON's venv has been checked), and say so.
#
# "run.sh bench" (make python-bench) runs python/bench/loader_bench.py the
# same way instead of the tests (it needs numpy and torch); "run.sh fuzz"
# (make fuzz-python) runs python/tests/fuzz_args.py for $FUZZTIME.
#
# Environment: PYTHON, HCOMM_LIBRARY (the library the tests use), VENV (the
# directory of the venvs; default bin/python-test), PYTEST_ARGS, BENCH_ARGS.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
VENV=${VENV:-$ROOT/bin/python-test}
: "${HCOMM_LIBRARY:?set HCOMM_LIBRARY to libhcomm.so (make python-test does)}"
export HCOMM_LIBRARY

venv() { # venv DIR PYTHON: a fresh venv with hcomm installed from python/
	rm -rf "$1"
	"$2" -m venv --system-site-packages "$1"
	# --no-index: nothing may be downloaded; the build backend needs nothing.
	"$1/bin/python" -m pip install -q --no-index --disable-pip-version-check "$ROOT/python"
	(cd "$1" && bin/python -c 'import hcomm, sys; print("python-test:", sys.executable, sys.version.split()[0], "hcomm", hcomm.__version__, "from", hcomm.__file__)')
}

if ! command -v "$PY" >/dev/null 2>&1; then
	echo "python-test: $PY not found (set PYTHON=...)" >&2
	exit 1
fi
venv "$VENV/venv" "$PY"
TESTPY=$VENV/venv/bin/python
NEED=pytest
[ "${1:-}" = bench ] && NEED="numpy, torch"
[ "${1:-}" = fuzz ] && NEED=numpy
if ! "$TESTPY" -c "import $NEED" 2>/dev/null; then
	if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import $NEED" 2>/dev/null; then
		echo "python-test: $PY has no $NEED; running with /usr/bin/python3's (Debian's python3-* packages)"
		venv "$VENV/venv-system" /usr/bin/python3
		TESTPY=$VENV/venv-system/bin/python
	else
		echo "python-test: $PY has no $NEED: install it (Debian: apt-get install python3-pytest python3-numpy python3-torch) or run with PYTHON=/usr/bin/python3" >&2
		exit 1
	fi
fi
cd "$VENV"
if [ "${1:-}" = fuzz ]; then
	exec "$TESTPY" "$ROOT/python/tests/fuzz_args.py" --time "${FUZZTIME:-10s}"
fi
if [ "${1:-}" = bench ]; then
	# shellcheck disable=SC2086 # BENCH_ARGS is a list of words
	exec "$TESTPY" "$ROOT/python/bench/loader_bench.py" ${BENCH_ARGS:-}
fi
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
PYTHONDONTWRITEBYTECODE=1 HCOMM_TEST_INSTALLED=1 "$TESTPY" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "$ROOT/python/tests"
