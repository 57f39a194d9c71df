import os

import pytest

import hcomm

# make python-test runs these tests against the package installed into a
# virtual environment (python/tests/run.sh), never the source tree; it sets
# HCOMM_TEST_INSTALLED=1 and HCOMM_LIBRARY (bin/capi/libhcomm.so).
SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "hcomm"))
if os.environ.get("HCOMM_TEST_INSTALLED") == "1" and os.path.dirname(os.path.abspath(hcomm.__file__)) == SOURCE:
    raise RuntimeError(f"hcomm imported from the source tree ({hcomm.__file__}), not the installed package")


@pytest.fixture
def eng():
    e = hcomm.Engine(pool_size=16 << 20, queue_depth=64, align=64)
    yield e
    e.close()


@pytest.fixture
def mem_eng():
    e = hcomm.Engine(pool_size=16 << 20, target="memory")
    yield e
    e.close()
