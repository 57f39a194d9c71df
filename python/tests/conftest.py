import os
import sys

import pytest

# Tests run against the source tree's package (make python-test sets
# HCOMM_LIBRARY to bin/capi/libhcomm.so).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import hcomm  # noqa: E402


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
