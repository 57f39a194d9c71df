"""The remote target (UCX) from Python, across two processes: a peer
process (this file run as a script) listens and exports a block; the test
connects, moves bytes host -> remote -> host and checks them in the peer's
own memory, and every refusal's exception class."""

import asyncio
import os
import random
import socket
import sys
import time

import pytest

import hcomm

import _peerproc

BLOCK = 1 << 20


def _peer_main():
    """The peer: listens on 127.0.0.1, exports a BLOCK-byte block filled
    with a pattern, prints "ADDR ip:port OFF offset", then answers
    "read OFF N" lines (hex of those bytes of its window) until stdin
    closes."""
    with hcomm.Engine(pool_size=16 << 20, target="remote", path="127.0.0.1:0",
                      shm=os.environ.get("HCOMM_TEST_SHM") == "1") as eng:
        blk = eng.alloc(BLOCK)
        mv = blk.memoryview()
        mv[:] = bytes(i * 7 % 251 for i in range(BLOCK))
        base = eng.remote_offset(blk)
        print(f"ADDR {eng.listen_addr} OFF {base}", flush=True)
        for line in sys.stdin:
            _, off, n = line.split()
            off, n = int(off) - base, int(n)
            print(bytes(mv[off:off + n]).hex(), flush=True)


class _Peer:
    def __init__(self, tls, shm):
        self.tls, self.shm = tls, shm
        # The peer imports the same (installed) hcomm as the tests.
        self.proc, self.addr, self.off = _peerproc.launch(__file__, tls, shm, "peer")

    def read(self, off, n):
        self.proc.stdin.write(f"read {off} {n}\n")
        self.proc.stdin.flush()
        return bytes.fromhex(self.proc.stdout.readline().strip())

    def stop(self):
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        assert rc == 0 or (self.killed and rc == -9), f"peer exited with {rc}"

    killed = False

    def kill(self):
        self.killed = True
        self.proc.kill()  # SIGKILL
        self.proc.wait(60)


def _pair(monkeypatch, transport):
    tls, shm = ("shm,tcp", True) if transport == "shm" else ("tcp", False)
    monkeypatch.setenv("UCX_TLS", tls)  # read by UCX at Engine() (hcomm_init)
    peer = _Peer(tls, shm)
    eng = hcomm.Engine(pool_size=16 << 20, target="remote", shm=shm)
    yield eng, peer
    eng.close()
    peer.stop()


@pytest.fixture(params=["tcp", "shm"])
def pair(request, monkeypatch):
    yield from _pair(monkeypatch, request.param)


def test_round_trip(pair):
    eng, p = pair
    assert eng.listen_addr == ""
    peer = eng.connect(p.addr, timeout=30)
    src, dst = eng.alloc(BLOCK), eng.alloc(BLOCK)
    # The peer's pattern, with a get.
    assert eng.submit(peer.at(p.off, 4096), dst).result(30) == 4096
    assert bytes(dst.memoryview()[:4096]) == bytes(i * 7 % 251 for i in range(4096))
    rng = random.Random(5)
    for _ in range(12):
        n = rng.randint(1, 200_000)
        off = rng.randrange(BLOCK - n)
        data = rng.randbytes(n)
        src.memoryview()[:n] = data
        eng.submit(src.view(0, n), peer.at(p.off + off, n)).result(30)  # put
        assert p.read(p.off + off, n) == data  # in the peer's own memory
        eng.submit(peer.at(p.off + off, n), dst.view(1, n)).result(30)  # get
        assert bytes(dst.memoryview()[1:n + 1]) == data
    # A batch of puts, awaited in asyncio.
    futs = eng.submit_batch([(src.view(i * 4096, 4096), peer.at(p.off + i * 4096, 4096)) for i in range(16)])

    async def wait_all():
        return await asyncio.gather(*futs)

    assert asyncio.run(wait_all()) == [4096] * 16
    assert p.read(p.off, 16 * 4096) == bytes(src.memoryview()[:16 * 4096])


def test_refusals(pair):
    eng, p = pair
    peer = eng.connect(p.addr, timeout=30)
    buf = eng.alloc(4096)
    with pytest.raises(hcomm.BadAddress, match="window"):
        eng.submit(buf, peer.at(1 << 40, 64))
    with pytest.raises(hcomm.BadAddress):
        eng.submit(peer.at((1 << 40) - 1, 2), buf)
    with pytest.raises(hcomm.NoPeer):
        eng.submit(buf, hcomm.Peer(eng, peer.id + 9, "").at(0, 64))
    with pytest.raises(hcomm.NotSupported):
        eng.submit(peer.at(p.off, 64), peer.at(p.off + 64, 64))
    with pytest.raises(hcomm.BadAddress):  # one bad entry: none submitted
        eng.submit_batch([(buf, peer.at(p.off, 64)), (buf, peer.at(1 << 40, 64))])
    with pytest.raises(hcomm.InvalidArgument):
        eng.connect("nonsense")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()  # nobody listens there now
    with pytest.raises(hcomm.ConnectFailed):
        eng.connect(free, timeout=30)
    peer.disconnect()
    with pytest.raises(hcomm.PeerGone):
        eng.submit(buf, peer.at(p.off, 64))
    again = eng.connect(p.addr, timeout=30)
    assert again.id != peer.id
    assert eng.submit(again.at(p.off, 64), buf).result(30) == 64


def test_peer_killed(pair):
    """kill -9 of the peer: a transfer to it then fails (PeerGone, or
    DeviceError for the one in flight if UCX reports a transport error),
    never hangs; submits are refused with PeerGone; a new peer works
    (over tcp and shared memory: until UCX notices, a put over shared
    memory is a copy into the dead peer's segment, still mapped here)."""
    eng, p = pair
    peer = eng.connect(p.addr, timeout=30)
    buf = eng.alloc(4096)
    p.kill()
    err = None
    for _ in range(600):
        try:
            eng.submit(buf, peer.at(p.off, 4096)).result(60)
        except (hcomm.PeerGone, hcomm.DeviceError) as e:
            err = e
            break
        time.sleep(0.05)
    assert err is not None, "transfers to a killed peer kept succeeding"
    for _ in range(600):
        try:
            eng.submit(buf, peer.at(p.off, 64)).result(60)
        except hcomm.PeerGone:
            break
        except hcomm.DeviceError:
            pass
        time.sleep(0.05)
    else:
        pytest.fail("submits to a killed peer never refused with PeerGone")
    with pytest.raises(hcomm.PeerGone):
        eng.submit(buf, peer.at(p.off, 64))
    p2 = _Peer(p.tls, p.shm)
    try:
        again = eng.connect(p2.addr, timeout=30)
        buf.memoryview()[:64] = b"x" * 64
        eng.submit(buf.view(0, 64), again.at(p2.off, 64)).result(30)
        assert p2.read(p2.off, 64) == b"x" * 64
    finally:
        p2.stop()


def test_not_remote(mem_eng):
    with pytest.raises(hcomm.NotSupported):
        mem_eng.connect("127.0.0.1:1")
    with pytest.raises(hcomm.InvalidArgument):
        hcomm.Engine(pool_size=8 << 20, target="memory", shm=True)


if __name__ == "__main__":
    _peer_main()
