"""gau_keras.snippets.parallel_apply(_generator): processes and threads."""

import multiprocessing
import os
import time

import numpy as np
import pytest

from gau_keras.snippets import parallel_apply, parallel_apply_generator

N = 300


@pytest.mark.parametrize("dummy", [False, True], ids=["processes", "threads"])
def test_results_ordered_and_unordered(dummy):
    offset = 7  # a closure: workers inherit it (fork / threads)
    func = lambda x: x * x + offset
    expected = [x * x + offset for x in range(N)]
    assert parallel_apply(func, range(N), 3, 8, dummy=dummy, unordered=False) == expected
    assert sorted(parallel_apply(func, iter(range(N)), 3, 8, dummy=dummy)) == expected
    pairs = list(parallel_apply_generator(func, range(N), 2, 4, dummy=dummy))
    assert sorted(pairs) == list(enumerate(expected))


def test_callback_gets_every_result():
    seen = []
    assert parallel_apply(str, range(50), 2, 4, callback=seen.append) is None
    assert sorted(seen, key=int) == [str(i) for i in range(50)]


def test_generator_streams_an_endless_iterable_and_stops_its_workers():
    stream = parallel_apply_generator(lambda x: -x, iter(int, 1), 2, 4)  # iter(int, 1): 0, 0, 0, ...
    assert [next(stream)[1] for _ in range(20)] == [0] * 20
    stream.close()
    deadline = time.time() + 10
    while multiprocessing.active_children() and time.time() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []


def _fails_on_37(x):
    if x == 37:
        raise KeyError(f"bad item {x}")
    return x


@pytest.mark.parametrize("dummy", [False, True], ids=["processes", "threads"])
def test_a_failing_func_raises_in_the_caller_quickly(dummy):
    start = time.time()
    with pytest.raises(KeyError, match="bad item 37") as info:
        parallel_apply(_fails_on_37, range(N), 3, 8, dummy=dummy)
    assert time.time() - start < 20
    assert "_fails_on_37" in str(info.value.__cause__)  # the worker's traceback


def test_a_dead_worker_is_reported():
    def die(x):
        if x == 5:
            os._exit(3)
        return x

    with pytest.raises(RuntimeError, match="exit code 3"):
        parallel_apply(die, range(100), 2, 4)


def test_unpicklable_items_and_results_are_clear_errors():
    with pytest.raises(TypeError, match="item 0 cannot be sent"):
        parallel_apply(lambda f: 1, [lambda: 0], 1, 2)
    with pytest.raises(Exception, match="pickle"):
        parallel_apply(lambda x: lambda: x, range(3), 1, 2)
    assert parallel_apply(lambda f: f(), [lambda: 4], 1, 2, dummy=True) == [4]


def test_random_seeds():
    draw = lambda _: (os.getpid(), float(np.random.rand()))
    # True (default): forked workers reseed, so their first draws differ
    first = {}
    for pid, value in parallel_apply(lambda _: (time.sleep(0.02), draw(_))[1], range(12), 3, 3):
        first.setdefault(pid, value)
    assert len(set(first.values())) == len(first) > 1
    # explicit seeds make a single worker reproducible
    runs = [
        parallel_apply(lambda _: float(np.random.rand()), range(5), 1, 2, random_seeds=[42], unordered=False)
        for _ in range(2)
    ]
    assert runs[0] == runs[1] == list(np.random.RandomState(42).rand(5))


def test_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        parallel_apply(abs, [1], 0, 2)
    with pytest.raises(ValueError, match="max_queue_size"):
        parallel_apply(abs, [1], 1, 0)
