"""Notifications (the remote target, UCX) from Python, across two
processes: a receiver process (this file run as a script) listens and
exports a block; the test connects and sends 256 puts, each followed by a
notification naming it, through every way the package sends one
(submit(notify=), notify() after a put, a batch with Peer.notification);
the receiver takes them through every way it takes one (wait_notification,
futures, asyncio) and checks, when each is taken, that the put's bytes are
in its memory, that they come in order and that none comes twice or is
left over. Then the refusals, the timeouts, a close during a wait, and
kill -9 of the receiver."""

import asyncio
import concurrent.futures
import ctypes.util
import os
import random
import struct
import sys
import threading

import pytest

import hcomm

import _peerproc

BLOCK = 1 << 20
SLOT = 4096  # put i lands in slot i of the receiver's block
N = 256
MSG = struct.Struct("<IQQQ")  # put index, offset in the window, length, seed of its bytes

if ctypes.util.find_library("ucp") is None:
    pytest.skip("libucx (libucp) is not installed: the remote target needs it (Debian: libucx0)",
                allow_module_level=True)


def _data(seed, n):
    return random.Random(seed).randbytes(n)


def _expect_timeout(f, what):
    try:
        f()
    except TimeoutError:  # concurrent.futures' and asyncio's are TimeoutError from Python 3.11
        return
    except (concurrent.futures.TimeoutError, asyncio.TimeoutError):
        return
    raise AssertionError(f"{what}: no TimeoutError")


def _receiver_main():
    """Listens on 127.0.0.1 and exports a BLOCK-byte block; checks the
    timeouts (nothing can have come yet), prints "ADDR ip:port OFF off",
    then answers "take N" with "ok N" or "bad <why>" after taking N
    notifications, and exits when stdin closes."""
    with hcomm.Engine(pool_size=16 << 20, target="remote", path="127.0.0.1:0",
                      shm=os.environ.get("HCOMM_TEST_SHM") == "1") as eng:
        blk = eng.alloc(BLOCK)
        mv = blk.memoryview()
        base = eng.remote_offset(blk)
        # Nobody is connected: every kind of wait runs out, and takes nothing.
        _expect_timeout(lambda: eng.wait_notification(0), "wait_notification(0)")
        _expect_timeout(lambda: eng.wait_notification(0.05), "wait_notification(0.05)")
        fut = eng.notification_future()
        _expect_timeout(lambda: fut.result(0.05), "future.result(0.05)")
        assert fut.cancel(), "a waiting future could not be cancelled"
        _expect_timeout(lambda: asyncio.run(eng.next_notification(0.05)), "next_notification(0.05)")
        print(f"ADDR {eng.listen_addr} OFF {base}", flush=True)
        for line in sys.stdin:
            n = int(line.split()[1])
            try:
                _take(eng, mv, base, n)
            except AssertionError as e:
                print(f"bad {e}", flush=True)
            else:
                print(f"ok {n}", flush=True)


def _take(eng, mv, base, count):
    """Takes count notifications: the first third with wait_notification,
    the second with futures made eight at a time (each gets the next in
    line), the rest in asyncio (half one by one, then gathers of eight). Each
    must be the next put's, in order, its bytes in mv when it is taken."""
    seen = []

    def check(note):
        k = len(seen)
        assert note.seq == k, f"notification {k} has seq {note.seq}"
        assert len(note.msg) == MSG.size, f"notification {k}: {len(note.msg)} bytes"
        i, off, n, seed = MSG.unpack(note.msg)
        assert i == k, f"notification {k} is put {i}'s (out of order or twice)"
        got = bytes(mv[off - base:off - base + n])
        assert got == _data(seed, n), f"notification {k} taken before its put's {n} bytes at {off} were there"
        seen.append(note)

    third = count // 3
    while len(seen) < third:
        check(eng.wait_notification(60))
    while len(seen) < 2 * third:
        futs = [eng.notification_future() for _ in range(min(8, 2 * third - len(seen)))]
        for f in futs:
            check(f.result(60))

    async def rest():
        for _ in range((count - len(seen)) // 2):
            check(await eng.next_notification(60))
        while len(seen) < count:
            k = min(8, count - len(seen))
            for note in await asyncio.gather(*(eng.next_notification(60) for _ in range(k))):
                check(note)

    asyncio.run(rest())
    # None is left over (each came once).
    _expect_timeout(lambda: eng.wait_notification(0.2), "a notification beyond the last")


class _Receiver:
    def __init__(self, tls, shm):
        self.tls, self.shm = tls, shm
        self.proc, self.addr, self.off = _peerproc.launch(__file__, tls, shm, "receiver")

    def take(self, n):
        self.proc.stdin.write(f"take {n}\n")
        self.proc.stdin.flush()

    def answer(self):
        return self.proc.stdout.readline().strip()

    killed = False

    def stop(self):
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        assert rc == 0 or (self.killed and rc == -9), f"receiver exited with {rc}"

    def kill(self):
        self.killed = True
        self.proc.kill()  # SIGKILL
        self.proc.wait(60)


@pytest.fixture(params=["tcp", "shm"])
def pair(request, monkeypatch):
    tls, shm = ("shm,tcp", True) if request.param == "shm" else ("tcp", False)
    monkeypatch.setenv("UCX_TLS", tls)  # read by UCX at Engine() (hcomm_init)
    r = _Receiver(tls, shm)
    eng = hcomm.Engine(pool_size=16 << 20, target="remote", shm=shm)
    try:
        yield eng, r
    finally:
        eng.close()
        r.stop()


def test_notified_puts(pair):
    eng, r = pair
    peer = eng.connect(r.addr, timeout=30)
    src = eng.alloc(BLOCK)
    msgs = eng.alloc(N * 64)  # the batch entries' messages, in place
    r.take(N)  # the receiver waits while the puts go
    rng = random.Random(11)
    sent = []
    for first in range(0, N, 16):  # 16 notified puts (32 transfers) in flight at a time
        futs = []
        for i in range(first, first + 16):
            n, seed = rng.randint(1, SLOT), rng.getrandbits(32)
            src.memoryview()[i * SLOT:i * SLOT + n] = _data(seed, n)
            put = (src.view(i * SLOT, n), peer.at(r.off + i * SLOT, n))
            msg = MSG.pack(i, r.off + i * SLOT, n, seed)
            if i % 4 in (0, 1):  # the put and its notification as one future
                futs.append(eng.submit(*put, notify=msg))
            elif i % 4 == 2:  # a put, then a notification of its own
                futs += [eng.submit(*put), eng.notify(peer, msg)]
            else:  # a batch of both, the message from pool memory
                msgs.memoryview()[i * 64:i * 64 + MSG.size] = msg
                futs += eng.submit_batch([put, (msgs.view(i * 64, MSG.size), peer.notification)])
            sent.append(i)
        for f in futs:
            f.result(60)
    assert r.answer() == f"ok {N}"
    assert hcomm.pending() == 0


def test_refusals(pair):
    eng, r = pair
    peer = eng.connect(r.addr, timeout=30)
    buf = eng.alloc(4096)
    with pytest.raises(hcomm.InvalidArgument):
        eng.notify(peer, b"x" * (hcomm.NOTIFY_MAX + 1))
    with pytest.raises(hcomm.InvalidArgument):
        eng.notify(peer, b"")
    with pytest.raises(hcomm.InvalidArgument):
        eng.notify(peer, 12)
    with pytest.raises(hcomm.InvalidArgument):
        eng.notify(peer.id, b"a Peer, not its number")
    with pytest.raises(hcomm.InvalidArgument):  # larger than a notification: the library refuses it
        eng.submit(buf.view(0, hcomm.NOTIFY_MAX + 1), peer.notification, hcomm.NOTIFY_MAX + 1)
    with pytest.raises(hcomm.InvalidArgument):
        eng.submit(buf, buf, notify=b"a notification follows a put to a peer")
    with pytest.raises(hcomm.InvalidArgument):
        eng.submit(buf, peer.at(r.off, 64), notify=b"y" * (hcomm.NOTIFY_MAX + 1))
    with pytest.raises(hcomm.NoPeer):
        eng.notify(hcomm.Peer(eng, peer.id + 9, ""), b"nobody")
    assert hcomm.pending() == 0
    # The sender has no notifications of its own: its waits run out.
    _expect_timeout(lambda: eng.wait_notification(0), "the sender's wait_notification(0)")
    # After all that, a notified put still goes.
    r.take(1)
    buf.memoryview()[:64] = _data(3, 64)
    assert eng.submit(buf.view(0, 64), peer.at(r.off, 64), notify=MSG.pack(0, r.off, 64, 3)).result(60) == 64
    assert r.answer() == "ok 1"


def test_close_ends_waits():
    """Timeouts that are not seconds are InvalidArgument; close() while a
    thread waits in wait_notification, a future is pending and a coroutine
    awaits: each raises BadHandle; later calls too."""
    eng = hcomm.Engine(pool_size=8 << 20, target="remote", path="127.0.0.1:0")
    for bad in ("1", float("nan"), [1], True):  # timeouts that are not seconds
        with pytest.raises(hcomm.InvalidArgument):
            eng.wait_notification(bad)
        with pytest.raises(hcomm.InvalidArgument):
            asyncio.run(eng.next_notification(bad))
    errs = []

    def waiter():
        try:
            eng.wait_notification()
        except hcomm.BadHandle as e:
            errs.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    fut = eng.notification_future()
    loop = asyncio.new_event_loop()
    task = loop.create_task(eng.next_notification())
    loop.run_until_complete(asyncio.sleep(0))  # the task now waits
    eng.close()
    t.join(60)
    assert not t.is_alive() and len(errs) == 1
    with pytest.raises(hcomm.BadHandle):
        fut.result(60)
    with pytest.raises(hcomm.BadHandle):
        loop.run_until_complete(asyncio.wait_for(task, 60))
    loop.close()
    with pytest.raises(hcomm.BadHandle):
        eng.wait_notification(0)
    with pytest.raises(hcomm.BadHandle):
        eng.notification_future()


def test_withdrawn_waits_lose_nothing(monkeypatch):
    """Two engines in this process: a cancelled future, waits that run out
    and a cancelled await (before or after its notification came: either
    way) take nothing; each notification is taken once, in order."""
    monkeypatch.setenv("UCX_TLS", "tcp")
    a = hcomm.Engine(pool_size=8 << 20, target="remote", path="127.0.0.1:0")
    b = hcomm.Engine(pool_size=8 << 20, target="remote")
    try:
        peer = b.connect(a.listen_addr, timeout=30)
        fut = a.notification_future()
        assert fut.cancel() and fut.cancelled()
        b.notify(peer, b"0").result(60)
        assert a.wait_notification(60).msg == b"0"
        loop = asyncio.new_event_loop()
        try:
            for k in range(1, 33):
                task = loop.create_task(a.next_notification())
                loop.run_until_complete(asyncio.sleep(0))  # the task waits
                b.notify(peer, b"%d" % k).result(60)  # queued for a: it may reach the task's future
                task.cancel()
                res = loop.run_until_complete(asyncio.gather(task, return_exceptions=True))[0]
                assert isinstance(res, asyncio.CancelledError), res
                got = None
                for _ in range(3):  # waits of 1 ms: they may run out, and take nothing then
                    try:
                        got = a.wait_notification(0.001)
                        break
                    except concurrent.futures.TimeoutError:
                        pass
                if got is None:
                    got = a.wait_notification(60)
                assert (got.msg, got.seq) == (b"%d" % k, k)
        finally:
            loop.close()
        _expect_timeout(lambda: a.wait_notification(0.05), "a notification beyond the last")
    finally:
        b.close()
        a.close()


def test_not_remote(mem_eng):
    with pytest.raises(hcomm.NotSupported):
        mem_eng.wait_notification(0)
    with pytest.raises(hcomm.NotSupported):
        mem_eng.notification_future()


def test_receiver_killed(pair):
    """kill -9 of the receiver: a notified put then fails with the
    package's exception (PeerGone, or DeviceError for one in flight if UCX
    reports a transport error), never hangs, and later notifications are
    refused with PeerGone."""
    eng, r = pair
    peer = eng.connect(r.addr, timeout=30)
    buf = eng.alloc(4096)
    assert eng.submit(buf.view(0, 64), peer.at(r.off, 64), notify=MSG.pack(0, r.off, 64, 0)).result(60) == 64
    r.kill()
    err = None
    for _ in range(600):
        try:
            eng.submit(buf.view(0, 64), peer.at(r.off, 64), notify=b"after the kill").result(60)
        except (hcomm.PeerGone, hcomm.DeviceError) as e:
            err = e
            break
        threading.Event().wait(0.05)
    assert err is not None, "notified puts to a killed receiver kept succeeding"
    for _ in range(600):
        try:
            eng.notify(peer, b"still there?").result(60)
        except hcomm.PeerGone:
            break
        except hcomm.DeviceError:
            pass
        threading.Event().wait(0.05)
    else:
        pytest.fail("notifications to a killed receiver were never refused with PeerGone")
    with pytest.raises(hcomm.PeerGone):
        eng.notify(peer, b"refused").result(60)
    assert hcomm.pending() == 0


if __name__ == "__main__":
    _receiver_main()
