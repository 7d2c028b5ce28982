"""SRU++ recurrence on JAX against autodiff and against TensorFlow, side by side in one run (issue 26, item 2).

    python3 benchmarks/srupp_jax.py            # B 8, d 512, L 256 512 1024 2048, 5 repeats
    python3 benchmarks/srupp_jax.py --quick    # B 4, d 128, L 128 512, 2 repeats

Forward + backward of ``sum(h * g)`` w.r.t. U [B, L, 3d], x [B, L, d],
weight_c and bias (unidirectional, k = 3, float32), at the same shapes and on
the same numbers, for

* ``jax``: ``gau_keras.recurrence`` on JAX (its ``scan`` pair: lax.scan forward,
  hand-written custom_vjp backward), ``jax.jit(jax.grad(...))``;
* ``jax autodiff``: the straightforward ``lax.scan`` (``recurrence.jax.autodiff``)
  differentiated by JAX, jitted the same way;
* ``tf native`` / ``tf xla``: the TensorFlow path (``recurrence.tensorflow``, the C++
  kernel where it builds, and the XLA loops) in one ``tf.function`` each, as
  ``srupp_speed.py`` table (a) times them.

A process has one Keras backend, so this one runs JAX and starts one
TensorFlow worker (``--tf-worker``, KERAS_BACKEND=tensorflow) that it asks for
one timed TensorFlow step at a time: each round times every variant once
(the order reversed every other round), so the noise of a shared machine hits
them alike.  Times are medians over ``--repeats`` rounds after one warm-up
call (compilation excluded); ratios are medians of the per-round ratios.
Outputs are awaited without copying (``block_until_ready``, ``np.asarray``).
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

WORKER_FLAG = "--tf-worker"
os.environ["KERAS_BACKEND"] = "tensorflow" if WORKER_FLAG in sys.argv else "jax"  # before Keras loads
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # the repository root
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common
import gau_keras.cli_env  # noqa: E402,F401  (first: the script's TensorFlow log level, before TensorFlow loads)

# isort: split

import _common  # noqa: E402  (path set above)
import numpy as np  # noqa: E402

JAX_VARIANTS = ("jax", "jax autodiff")
TF_VARIANTS = ("tf native", "tf xla")


def inputs(B, L, d, seed):
    """The same numbers in both processes: U [B, L, 3d], x [B, L, d], weight_c and bias [2d], g [B, L, d]."""
    rng = np.random.default_rng(seed + L)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    return (
        f32(rng.normal(size=(B, L, 3 * d))),
        f32(rng.normal(size=(B, L, d))),
        f32(rng.uniform(-1, 1, size=2 * d)),
        f32(np.r_[np.zeros(d), np.full(d, -2.0)]),
        f32(rng.normal(size=(B, L, d))),
    )


# ---------------------------------------------------------------- JAX (this process)


def jax_steps(B, L, d, seed):
    """{variant: step()} of the JAX variants; each step blocks until its gradients are ready."""
    import jax
    import jax.numpy as jnp

    from gau_keras.recurrence import jax as backend

    U, x, w, b, g = (jnp.asarray(a) for a in inputs(B, L, d, seed))
    steps = {}
    for name, fn in zip(JAX_VARIANTS, (backend.sru_recurrence, backend.sru_recurrence_autodiff)):
        grad = jax.jit(jax.grad(lambda U, x, w, b, fn=fn: jnp.sum(fn(U, x, w, b)[0] * g), argnums=(0, 1, 2, 3)))
        steps[name] = lambda grad=grad: jax.block_until_ready(grad(U, x, w, b))
    return steps


# ---------------------------------------------------------------- TensorFlow (the worker)


def tf_steps(B, L, d, seed):
    """{variant: step()} of the TensorFlow variants (``tf native`` only where the kernel builds)."""
    import tensorflow as tf

    from gau_keras.recurrence import tensorflow as tf_backend
    from gau_keras.recurrence.tensorflow import native

    U, x, w, b, g = (tf.constant(a) for a in inputs(B, L, d, seed))
    implementations = {"tf xla": "xla"}
    try:
        native.load()
        implementations = {"tf native": "native", **implementations}
    except native.KernelUnavailable as reason:
        print(f"native kernel unavailable, timing the XLA loops only: {reason}", file=sys.stderr)
    steps = {}
    for name, implementation in implementations.items():

        @tf.function
        def grad(U, x, w, b, implementation=implementation):
            with tf.GradientTape() as tape:
                tape.watch([U, x, w, b])
                loss = tf.reduce_sum(tf_backend.sru_recurrence(U, x, w, b, implementation=implementation)[0] * g)
            return tape.gradient(loss, [U, x, w, b])

        steps[name] = lambda grad=grad: [np.asarray(t) for t in grad(U, x, w, b)]  # waits, does not copy
    return steps


def tf_worker(B, d, seed):
    """Worker loop: one JSON command a line on stdin, one JSON answer a line on the original stdout
    (library prints go to stderr). ``setup`` (L: builds and warms up the steps → their names),
    ``step`` (variant → seconds), ``quit``."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    steps = {}
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        if command["cmd"] == "setup":
            steps = tf_steps(B, command["L"], d, seed)
            for step in steps.values():
                step()
            channel.write(json.dumps({"variants": list(steps)}) + "\n")
        else:
            channel.write(json.dumps({"seconds": _common.timed(steps[command["variant"]])}) + "\n")


class TensorFlowWorker:
    """Parent-side handle of the ``--tf-worker`` process."""

    def __init__(self, args):
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        argv = [sys.executable, __file__, WORKER_FLAG, str(args.batch), str(args.hidden), str(args.seed)]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1
        )

    def request(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the TensorFlow worker exited (code {self.process.wait()}); see its stderr above")
        return json.loads(line)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.process.stdin.flush()
            self.process.wait(timeout=60)


# ---------------------------------------------------------------- parent


def measure(worker, args, L):
    """{variant: [seconds per round]} at length L, every variant once per round."""
    tf_variants = worker.request(cmd="setup", L=L)["variants"]
    steps = jax_steps(args.batch, L, args.hidden, args.seed)
    for step in steps.values():
        step()  # compilation
    timers = {name: (lambda step=step: _common.timed(step)) for name, step in steps.items()}
    timers.update(
        {name: (lambda name=name: worker.request(cmd="step", variant=name)["seconds"]) for name in tf_variants}
    )
    seconds = {name: [] for name in timers}
    for r in range(args.repeats):
        for name in list(timers) if r % 2 == 0 else list(timers)[::-1]:
            seconds[name].append(timers[name]())
    return seconds


def row(L, seconds):
    """A table row: median ms per variant, then jax / each other variant."""
    f = _common.format_number
    cells = [L] + [
        f(statistics.median(seconds[v]) * 1e3) if v in seconds else "n/a" for v in JAX_VARIANTS + TF_VARIANTS
    ]
    cells += [
        f(_common.median_ratio(seconds["jax"], seconds[v])) if v in seconds else "n/a"
        for v in JAX_VARIANTS[1:] + TF_VARIANTS
    ]
    return cells


HEADERS = (
    ["L"] + [f"{v} ms" for v in JAX_VARIANTS + TF_VARIANTS] + [f"jax / {v}" for v in JAX_VARIANTS[1:] + TF_VARIANTS]
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lengths", type=int, nargs="+", help="sequence lengths (default 256 512 1024 2048)")
    parser.add_argument("--batch", type=int, help="B (default 8)")
    parser.add_argument("--hidden", type=int, help="d (default 512)")
    parser.add_argument("--repeats", type=int, help="timed rounds after one warm-up (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="B 4, d 128, L 128 512, 2 repeats")
    args = parser.parse_args(argv)
    quick = dict(lengths=[128, 512], batch=4, hidden=128, repeats=2)
    full = dict(lengths=[256, 512, 1024, 2048], batch=8, hidden=512, repeats=5)
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if min(args.lengths + [args.batch, args.hidden, args.repeats]) < 1:
        parser.error("--lengths, --batch, --hidden and --repeats must be positive")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == WORKER_FLAG:
        tf_worker(*(int(a) for a in argv[1:4]))
        return
    import jax

    args = parse_args(argv)
    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform} ({os.cpu_count()} logical cores visible); "
        f"B {args.batch}, d {args.hidden}, k 3, float32; forward + backward of sum(h * g); "
        f"medians of {args.repeats} rounds after a warm-up"
    )
    start = time.perf_counter()
    worker = TensorFlowWorker(args)
    try:
        rows = [row(L, measure(worker, args, L)) for L in args.lengths]
    finally:
        worker.close()
    print(_common.markdown_table(HEADERS, rows))
    print(f"ratios: jax time / the other's (lower is better); {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
