"""Starting a peer process for the remote tests: the test module itself run
as a script, with UCX_TLS and HCOMM_TEST_SHM set, which prints
"ADDR <address> <base> <offset>" once it listens."""

import os
import subprocess
import sys


def launch(script, tls, shm, who):
    """Starts script as a peer; returns (process, address, offset)."""
    env = dict(os.environ, UCX_TLS=tls, HCOMM_TEST_SHM="1" if shm else "0")
    proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    line = proc.stdout.readline()
    parts = line.split()
    assert len(parts) == 4 and parts[0] == "ADDR", f"{who} said {line!r}"
    return proc, parts[1], int(parts[3])
