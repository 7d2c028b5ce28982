"""Generic benchmark helpers: side-by-side workers, timing, peak memory,
matmul FLOP/s calibration and Markdown tables.

Every measured configuration runs in its own worker subprocess so that peak
memory is that configuration's alone. The parent drives several workers in
lockstep (one step at a time, never two at once), so the noise of a shared
machine hits the compared models alike.

Protocol: the parent writes one JSON command per line to a worker's stdin;
the worker answers one JSON line on a private copy of its original stdout
(fd 1 itself is pointed at stderr so that library prints cannot corrupt the
protocol). Answers are ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.

Peak memory (``MemoryProbe``), peak minus the usage at the last reset:
  * TF's allocator statistics, ``tf.config.experimental.get_memory_info``
    after ``reset_memory_stats``: on a GPU, and on CPU, where workers run with
    ``TF_CPU_ALLOCATOR_USE_BFC=true`` so that TF's CPU allocator is one BFC
    pool that keeps statistics of every tensor. (TF 2.21's default x86 CPU
    allocator, oneDNN's, pools only buffers of 256 KiB or more and counts
    only those; its pool also keeps freed memory resident, so the process RSS
    cannot show a step's peak either.) This counts the bytes held by
    tensors, not pooled free space.
  * Fallback when the allocator keeps no statistics: the kernel's
    resident-set high-water mark ``VmHWM`` of the worker
    (``/proc/self/status``), reset to the current RSS by writing ``5`` to
    ``/proc/self/clear_refs``. Workers run with a fixed
    ``MALLOC_MMAP_THRESHOLD_`` so that glibc serves every buffer above 64 KiB
    with ``mmap`` and unmaps it on free; otherwise memory freed by one step
    stays resident and hides the next step's peak.
"""

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

#: forward + backward ≈ 3 × forward matmul FLOPs (backward: two matmuls per forward one).
TRAIN_FLOP_FACTOR = 3

WORKER_ENV = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "MALLOC_MMAP_THRESHOLD_": "65536"}

MIB = 2.0**20


# ---------------------------------------------------------------- FLOPs
def matmul_flops(m, k, n, batch=1):
    """FLOPs of ``batch`` products of an [m, k] and a [k, n] matrix (2mkn each)."""
    return 2 * batch * m * k * n


# ---------------------------------------------------------------- memory
class MemoryProbe:
    """Peak memory above a baseline: TF allocator statistics of ``device``
    when it keeps them, else the process's peak RSS (see the module docstring)."""

    def __init__(self, device, allocator=True):
        self.device = device
        self.baseline = None
        self.method = "tf-allocator" if allocator and self._allocator_stats() is not None else "rss"

    def _allocator_stats(self):
        import tensorflow as tf

        try:
            return tf.config.experimental.get_memory_info(self.device)
        except (ValueError, RuntimeError, NotImplementedError):
            return None

    @staticmethod
    def _status_kib(field):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"/proc/self/status has no {field} line (peak RSS needs Linux)")

    def reset(self):
        """Sets the baseline to the current usage and restarts the peak from it."""
        if self.method == "tf-allocator":
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats(self.device)
            self.baseline = self._allocator_stats()["current"]
        else:
            try:
                with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                    f.write("5")
            except OSError as e:
                raise RuntimeError(f"cannot reset the peak RSS via /proc/self/clear_refs: {e}") from e
            self.baseline = self._status_kib("VmRSS") * 1024
        return self.baseline

    def peak_above_baseline(self):
        if self.baseline is None:
            raise RuntimeError("MemoryProbe.peak_above_baseline called before reset()")
        if self.method == "tf-allocator":
            peak = self._allocator_stats()["peak"]
        else:
            peak = self._status_kib("VmHWM") * 1024
        return max(peak - self.baseline, 0)


def describe_device():
    """('GPU:0', name) when TF sees a GPU (memory growth on), else ('CPU:0', cpu info)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        for gpu in gpus:
            # Several workers share the GPU: none may grab all of its memory.
            tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(gpus[0])
        return "GPU:0", details.get("device_name", "GPU")
    return "CPU:0", f"CPU ({os.cpu_count()} logical cores visible)"


# ---------------------------------------------------------------- timing
def timed(fn):
    """Seconds taken by ``fn()``; ``fn`` must block until its result is ready."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def matmul_flops_per_second(n=2048, repeats=5):
    """Best float32 [n, n] @ [n, n] throughput (FLOP/s) over ``repeats`` runs."""
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype=tf.float32, seed=1)
    b = tf.random.normal((n, n), dtype=tf.float32, seed=2)
    product = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    product().numpy()  # trace + warm-up
    best = min(timed(lambda: product().numpy()) for _ in range(repeats))
    return matmul_flops(n, n, n) / best


def interleaved_medians(steps, rounds, n, wait):
    """{name: median ms per step} of ``steps`` ({name: step()}), timed in turn, the order
    reversed every other round; ``wait(out)`` blocks until a step's asynchronous result is
    ready (e.g. ``jax.block_until_ready``). Each step runs once untimed first (compilation)."""
    times = {name: [] for name in steps}
    names = list(steps)
    for name in names:
        wait(steps[name]())
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            for _ in range(n):
                out = steps[name]()
            wait(out)
            times[name].append((time.perf_counter() - start) * 1e3 / n)
    return {name: statistics.median(t) for name, t in times.items()}


def median_ratio(numerators, denominators):
    """Median of the per-repeat ratios (repeats were measured side by side)."""
    return statistics.median(a / b for a, b in zip(numerators, denominators))


# ---------------------------------------------------------------- workers
class WorkerError(RuntimeError):
    pass


class Worker:
    """Parent-side handle of a worker subprocess running ``serve``."""

    def __init__(self, argv, label):
        self.label = label
        self.stderr = tempfile.TemporaryFile(mode="w+")
        from gau_keras import cli_env  # here: importing gau_keras loads Keras, after the caller chose its backend

        env = dict(os.environ, **WORKER_ENV, **{cli_env.TF_LOG_LEVEL: cli_env.SCRIPT_TF_LOG_LEVEL})
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env, bufsize=1
        )

    def receive(self):
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise WorkerError(
                f"worker {self.label} exited (code {self.process.returncode}) "
                f"without answering; its stderr ends with:\n{self.stderr_tail()}"
            )
        reply = json.loads(line)
        if not reply.get("ok"):
            raise WorkerError(f"worker {self.label} failed:\n{reply.get('error')}")
        return reply

    def send(self, cmd, **kwargs):
        self.process.stdin.write(json.dumps(dict(kwargs, cmd=cmd)) + "\n")
        self.process.stdin.flush()

    def request(self, cmd, **kwargs):
        self.send(cmd, **kwargs)
        return self.receive()

    def stderr_tail(self, chars=4000):
        self.stderr.seek(0)
        return self.stderr.read()[-chars:]

    def close(self):
        if self.process.poll() is None:
            try:
                self.send("quit")
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.stderr.close()


def serve(setup):
    """Worker main loop.

    ``setup()`` builds the thing to measure and returns ``(info, step)``:
    ``info`` a JSON-able dict sent with the ready message, ``step()`` one
    blocking step. Commands: ``warmup`` (n steps, then resets the peak
    memory), ``step`` (one timed step), ``memory``, ``calibrate`` (matmul
    FLOP/s), ``quit``.
    """
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(**reply):
        channel.write(json.dumps(dict(reply, ok=True)) + "\n")

    try:
        device, device_name = describe_device()
        # JAX's buffers are not TensorFlow's allocator's: a JAX worker measures its peak RSS
        probe = MemoryProbe(device, allocator=os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow")
        info, step = setup()
        answer(ready=True, device=device_name, memory_method=probe.method, **info)
        for line in sys.stdin:
            command = json.loads(line)
            cmd = command["cmd"]
            if cmd == "quit":
                break
            if cmd == "warmup":
                for _ in range(command.get("n", 1)):
                    step()
                answer(baseline_bytes=probe.reset())
            elif cmd == "step":
                answer(seconds=timed(step))
            elif cmd == "memory":
                answer(peak_bytes=probe.peak_above_baseline())
            elif cmd == "calibrate":
                answer(flops_per_second=matmul_flops_per_second(command["n"], command["repeats"]))
            else:
                raise ValueError(f"unknown worker command {cmd!r}")
    except Exception:  # report every failure to the parent, which names the worker
        channel.write(json.dumps({"ok": False, "error": traceback.format_exc()}) + "\n")
        sys.exit(1)


def start_workers(argv_by_label):
    """Starts the workers together (set-up is not timed) and waits until all are ready."""
    workers = {label: Worker(argv, label) for label, argv in argv_by_label.items()}
    try:
        ready = {label: worker.receive() for label, worker in workers.items()}
    except Exception:
        for worker in workers.values():
            worker.close()
        raise
    return workers, ready


def run_side_by_side(workers, repeats, warmup=1):
    """Warm-up, then ``repeats`` rounds of one step per worker, alternating the
    order every round (ABBA) so that drift hits every worker alike.

    Returns ``{label: {'seconds': [...], 'peak_bytes': int, 'baseline_bytes': int,
    'warmup_seconds': float}}``.
    """
    labels = list(workers)
    results = {label: {"seconds": []} for label in labels}
    for label in labels:
        start = time.perf_counter()
        results[label]["baseline_bytes"] = workers[label].request("warmup", n=warmup)["baseline_bytes"]
        results[label]["warmup_seconds"] = time.perf_counter() - start  # compiles included
    for r in range(repeats):
        for label in labels if r % 2 == 0 else labels[::-1]:
            results[label]["seconds"].append(workers[label].request("step")["seconds"])
    for label in labels:
        results[label]["peak_bytes"] = workers[label].request("memory")["peak_bytes"]
    return results


def measure_side_by_side(argv_by_label, repeats, warmup=1, before=None, after=None):
    """Starts the workers, runs them side by side, closes them; returns
    ``run_side_by_side``'s results with each worker's ready message merged in.
    ``before`` / ``after``: optional ``f(workers)`` called around the timed rounds."""
    workers, ready = start_workers(argv_by_label)
    try:
        if before:
            before(workers)
        results = run_side_by_side(workers, repeats, warmup=warmup)
        if after:
            after(workers)
    finally:
        for worker in workers.values():
            worker.close()
    for label in results:
        results[label].update(ready[label])
    return results


# ---------------------------------------------------------------- encoders
def encoder_step(model_name, sizes, batch_size, length, mode="train", seed=0, vocab_size=64, **model_kwargs):
    """(info, step) of a full ``build_transformer_model`` encoder fed random ids for ``serve``:
    a training step (``train_on_batch``: Adam, MSE of the hidden states against a fixed random
    target; ``jit_compile=False`` on TensorFlow, Keras's CPU default; on JAX jitted, as Keras
    runs JAX unless told to run it op by op) or inference (``predict_on_batch``)."""
    import keras
    import numpy as np

    from gau_keras import build_transformer_model

    keras.utils.set_random_seed(seed)
    model = build_transformer_model(model=model_name, vocab_size=vocab_size, **sizes, **model_kwargs)
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, vocab_size, size=(batch_size, length)).astype("int32")
    inputs = [token_ids, np.zeros_like(token_ids)]
    target = rng.standard_normal((batch_size, length, sizes["hidden_size"])).astype("float32")
    jit = keras.backend.backend() == "jax"
    model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse", jit_compile=jit)
    if mode == "train":

        def step():
            model.train_on_batch(inputs, target)
    else:

        def step():
            model.predict_on_batch(inputs)

    return {"params": int(model.count_params())}, step


# ---------------------------------------------------------------- output
def format_number(value, digits=3):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def markdown_table(headers, rows):
    """A GitHub Markdown table; cells are converted with ``str``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
