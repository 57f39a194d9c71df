"""Bad arguments are hcomm.InvalidArgument (regressions of fuzz_args.py's findings)."""

import pytest

import hcomm


def test_error_for_needs_an_int_code():
    with pytest.raises(hcomm.InvalidArgument):
        hcomm.error_for({}, "x")  # was TypeError: unhashable type
    assert isinstance(hcomm.error_for(-22, "x"), hcomm.InvalidArgument)


def test_result_with_a_huge_timeout():
    with hcomm.Engine(pool_size=1 << 20) as eng:
        b, d = eng.alloc(4096), eng.alloc_dev(4096)
        t = eng.submit(b, d)
        assert t.result(2 ** 80) == 4096  # was OverflowError from threading
        with pytest.raises(hcomm.InvalidArgument):
            t.result(float("nan"))


@pytest.mark.parametrize("call", [
    lambda e: e.alloc("x"), lambda e: e.alloc(2 ** 70), lambda e: e.alloc_dev(1.5),
    lambda e: e.submit(object(), e.alloc(64)), lambda e: e.submit_batch(5), lambda e: e.submit_batch([(1,)]),
    lambda e: e.alloc(64).view("a"), lambda e: e.unregister(object()), lambda e: e.register(5),
    lambda e: e.submit(e.alloc(64), e.alloc_dev(64), callback=5), lambda e: e.close(float("nan")),
])
def test_bad_arguments_are_invalid_argument(call):
    with hcomm.Engine(pool_size=1 << 20) as eng:
        with pytest.raises(hcomm.InvalidArgument):
            call(eng)
        assert hcomm.pending() == 0


def test_bad_engine_arguments():
    for kw in ({"pool_size": "1"}, {"queue_depth": 2 ** 40}, {"target": ["mock"]}, {"target": "file", "path": "a\0b"}):
        with pytest.raises(hcomm.InvalidArgument):
            hcomm.Engine(**kw)



def test_loader_with_no_whole_batch_and_many_epochs_ends(tmp_path):
    # fuzz_args.py seed 101: drop_last with fewer records than a batch looped over 2^44 empty epochs.
    from hcomm import data

    p = tmp_path / "r.bin"
    p.write_bytes(bytes(3 * 4096))
    with data.Loader([str(p)], record_size=4096, batch_size=32, drop_last=True, epochs=1 << 44) as L:
        assert list(L) == []
