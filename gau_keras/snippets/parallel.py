"""bert4keras's ``parallel_apply_generator`` / ``parallel_apply``: map a
function over an iterable with worker processes (or threads), streaming.

Processes are started with ``fork`` where the platform has it (as bert4keras's
``multiprocessing.Pool`` did on Linux), so a worker inherits ``func`` as it is:
closures and lambdas defined in a script work; items and results travel
pickled. Unlike bert4keras's pool, an exception raised by ``func`` (or an
unpicklable result, or a worker that dies) is raised in the caller at once
instead of leaving it waiting for a result that never comes, and the workers
are stopped when the generator finishes, fails or is closed early.
"""

import multiprocessing
import pickle
import queue
import threading
import traceback

import numpy as np

_POLL_SECONDS = 0.05  # how often a waiting side checks for stop / dead workers
_JOIN_SECONDS = 2.0  # grace time for a worker to exit before it is terminated
_NO_SEED = object()


class _RemoteTraceback(Exception):
    """Carries the worker's formatted traceback as the cause of the re-raised error."""

    def __str__(self):
        return self.args[0]


def _worker_seeds(random_seeds, workers):
    """The numpy seed of each worker (``_NO_SEED``: leave its state as inherited)."""
    if random_seeds is True:
        return [None] * workers  # None: fresh OS entropy, so forked workers differ
    if random_seeds is None or random_seeds is False:
        return [_NO_SEED] * workers
    seeds = list(random_seeds)
    return (seeds + [_NO_SEED] * workers)[:workers]


def _failure(index, error, portable):
    """What a worker sends back when ``func`` raised on item ``index``."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if portable:
        try:
            pickle.dumps(error)
        except Exception:
            error = RuntimeError(f"{type(error).__name__}: {error}")
    return index, None, (error, text)


def _work(func, seed, tasks, results, stop, portable):
    """A worker's loop: take (index, item), send back (index, result, failure)."""
    if seed is not _NO_SEED:
        np.random.seed(seed)
    while not stop.is_set():
        try:
            task = tasks.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
        index, item = pickle.loads(task) if portable else task
        try:
            message = (index, func(item), None)
            if portable:
                message = pickle.dumps(message)
        except BaseException as error:  # reported to the caller, which re-raises it
            message = _failure(index, error, portable)
            if portable:
                message = pickle.dumps(message)
        results.put(message)
    if portable:
        results.cancel_join_thread()  # stopping: unread results may be dropped


class _Workers:
    """The worker processes (``dummy=False``) or threads and their two queues."""

    def __init__(self, func, workers, max_queue_size, dummy, seeds):
        self.portable = not dummy
        if dummy:
            self.tasks, self.results = queue.Queue(max_queue_size), queue.Queue()
            self.stop = threading.Event()
            start = lambda **kw: threading.Thread(daemon=True, **kw)
        else:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self.tasks, self.results = context.Queue(max_queue_size), context.Queue()
            self.stop = context.Event()
            start = lambda **kw: context.Process(daemon=True, **kw)
        self.workers = []
        for seed in seeds:
            worker = start(target=_work, args=(func, seed, self.tasks, self.results, self.stop, self.portable))
            worker.start()
            self.workers.append(worker)
        self.outstanding = 0

    def submit(self, index, item):
        """Queues one item, waiting while the queue is full (True when queued)."""
        task = (index, item)
        if self.portable:
            try:
                task = pickle.dumps(task)
            except Exception as e:
                raise TypeError(
                    f"parallel_apply_generator: item {index} cannot be sent to a worker "
                    f"process (not picklable: {e}); use dummy=True for threads"
                ) from e
        try:
            self.tasks.put(task, timeout=_POLL_SECONDS)
        except queue.Full:
            self.check_alive()
            return False
        self.outstanding += 1
        return True

    def receive(self, block):
        """The next (index, result), or None when ``block`` is False and none is ready."""
        while True:
            try:
                message = self.results.get(timeout=_POLL_SECONDS) if block else self.results.get_nowait()
            except queue.Empty:
                if not block:
                    return None
                self.check_alive()
                continue
            self.outstanding -= 1
            index, result, failure = pickle.loads(message) if self.portable else message
            if failure is not None:
                self._raise(index, *failure)
            return index, result

    def check_alive(self):
        for worker in self.workers:
            if not worker.is_alive():
                code = getattr(worker, "exitcode", None)
                raise RuntimeError(
                    f"parallel_apply_generator: a worker ({worker.name}) died "
                    f"(exit code {code}) with {self.outstanding} item(s) pending"
                )

    @staticmethod
    def _raise(index, error, text):
        note = f"raised by func on item {index} in a parallel_apply worker"
        if hasattr(error, "add_note"):
            error.add_note(note)
        raise error from _RemoteTraceback(f"\n{note}:\n{text}")

    def close(self):
        self.stop.set()
        for worker in self.workers:
            worker.join(_JOIN_SECONDS)
            if self.portable and worker.is_alive():
                worker.terminate()
                worker.join(_JOIN_SECONDS)
        if self.portable:
            for q in (self.tasks, self.results):
                q.cancel_join_thread()
                q.close()


def parallel_apply_generator(func, iterable, workers, max_queue_size, dummy=False, random_seeds=True):
    """Applies ``func`` to every item of ``iterable`` in parallel, streaming.

    Args:
        func: one item -> one result (with processes: item and result picklable).
        iterable: read lazily (it may be infinite); at most ``max_queue_size``
            items wait for a worker at a time.
        workers: number of worker processes (threads with ``dummy=True``).
        dummy: False for processes, True for threads.
        random_seeds: True (each worker reseeds numpy from OS entropy, so forked
            workers do not repeat each other's random numbers), False/None (no
            reseeding), or a list of seeds, one per worker.

    Yields:
        ``(index, result)`` in the order the results arrive (not the input
        order): ``index`` is the item's position in ``iterable``.

    An exception in ``func`` is raised here (its type kept; the worker's
    traceback is its ``__cause__``), and the workers stop.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"parallel_apply_generator: workers must be an int >= 1, got {workers!r}")
    if not isinstance(max_queue_size, int) or max_queue_size < 1:
        raise ValueError(f"parallel_apply_generator: max_queue_size must be an int >= 1, got {max_queue_size!r}")
    pool = _Workers(func, workers, max_queue_size, dummy, _worker_seeds(random_seeds, workers))
    try:
        for index, item in enumerate(iterable):
            while not pool.submit(index, item):
                yield from _ready(pool)
            yield from _ready(pool)
        while pool.outstanding:
            yield pool.receive(block=True)
    finally:
        pool.close()


def _ready(pool):
    """Yields the results already waiting, without blocking."""
    while True:
        message = pool.receive(block=False)
        if message is None:
            return
        yield message


def parallel_apply(
    func, iterable, workers, max_queue_size, callback=None, dummy=False, random_seeds=True, unordered=True
):
    """``parallel_apply_generator`` collected.

    Without ``callback``: the list of results, in arrival order, or in input
    order when ``unordered=False``. With ``callback``: it is called on each
    result as it arrives (arrival order), and None is returned.
    """
    results = parallel_apply_generator(func, iterable, workers, max_queue_size, dummy, random_seeds)
    if callback is not None:
        for _, result in results:
            callback(result)
        return None
    if unordered:
        return [result for _, result in results]
    return [result for _, result in sorted(results, key=lambda pair: pair[0])]
