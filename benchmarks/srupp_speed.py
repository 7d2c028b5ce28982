"""SRU++ speed and memory, measured side by side in one run (issue 3, item 5).

    python3 benchmarks/srupp_speed.py            # B 8, d 512, proj 128, 2 layers
    python3 benchmarks/srupp_speed.py --quick    # shorter lengths, fewer repeats

(a) ``sru_recurrence`` with its hand-written gradient, both implementations
    (the native C++ kernel, the default on CPU, and the XLA loops), against
    ``sru_recurrence_autodiff`` (a plain ``tf.while_loop`` differentiated by
    TensorFlow, in a ``tf.function``; also under XLA), forward + backward of
    ``sum(h * g)`` w.r.t. U, x, weight_c and bias, for several lengths.
(b) the recurrence's share of a whole SRU++ training step (forward, backward,
    Adam update of an ``SRUpp`` layer) at L = 512, for each implementation (the
    step uses the same one), measured two ways: the time of the recurrence's
    forward + backward alone on the same shapes (a random upstream gradient for
    h), times the number of layers, over the step time; and inside the step,
    from a ``tf.profiler`` trace of the same steps: the share of their wall time
    during which one of the recurrence's ops was running (ops running at the
    same time counted once; an op slowed by one running beside it counts whole).
(c) a training step of the SRU++ layer against 2-layer ``keras.layers.GRU(512)``
    and ``LSTM(512)`` stacks on the same input.

Times are medians over ``--repeats`` runs after a warm-up (compilation excluded);
outputs are awaited without being copied (``Tensor.numpy()`` copies, which would
add the copying of the gradients to the recurrence's time).

Memory: each variant and length in a fresh subprocess with
``TF_CPU_ALLOCATOR_USE_BFC=true``, which makes TensorFlow's CPU allocator a BFC
allocator that counts every tensor (XLA's buffers included) in
``tf.config.experimental.get_memory_info("CPU:0")``.  The loss
``sum(h * g)`` and the recurrence run as one ``tf.function`` called under a
``GradientTape`` (second call, after a warm-up call); reported are
* "kept": the allocator's bytes in use right after the forward pass minus before
  it, i.e. what is retained for the backward pass (for both variants this
  includes h itself, which the loss's gradient keeps);
* "bwd peak": the allocator's peak during ``tape.gradient`` minus the bytes in
  use before the forward pass (everything kept, the gradients themselves and
  the backward's temporaries).
Bytes in use are BFC chunk sizes: a tensor served from a free chunk less than
twice its size counts as the whole chunk, so a [B, L, d] tensor can count up to
about twice its bytes (the custom variant keeps exactly h and c, 2 x B*L*d*4
bytes, yet may show 3 x).  "autodiff" here is the graph while-loop without XLA.
"""

import argparse
import functools
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # the repository root
import gau_keras.cli_env  # noqa: E402,F401  (first: the script's TensorFlow log level, before TensorFlow loads)

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from gau_keras.layers import SRUpp  # noqa: E402
from gau_keras.recurrence import TRACE_SCOPE, sru_recurrence, sru_recurrence_autodiff  # noqa: E402
from gau_keras.recurrence.switches import sru_kernel_set  # noqa: E402
from gau_keras.recurrence.tensorflow import native as kernels  # noqa: E402

MiB = 2**20

#: the recurrence variants of table (a), by name
VARIANTS = {
    "native": functools.partial(sru_recurrence, implementation="native"),
    "xla": functools.partial(sru_recurrence, implementation="xla"),
    "autodiff": sru_recurrence_autodiff,
}


@functools.cache
def native_available():
    """True when the native kernel builds here; else says why, once (its variant is then left out)."""
    try:
        kernels.load()
        return True
    except kernels.KernelUnavailable as reason:
        print(f"native kernel unavailable, reporting the XLA loops only: {reason}")
        return False


def memory_bytes(variant, L, B, d, seed=0):
    """Runs in a fresh process with the BFC CPU allocator (``--measure-memory``):
    (kept after forward, peak during backward) in bytes, see the module docstring."""
    if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") != "true":
        raise RuntimeError(
            "srupp_speed.py --measure-memory: needs TF_CPU_ALLOCATOR_USE_BFC=true in the "
            "environment (set before TensorFlow starts), else the allocator misses tensors"
        )
    rng = np.random.default_rng(seed)
    rec = VARIANTS[variant]
    U, x, w, b, g = (
        tf.constant(rng.normal(size=(B, L, 3 * d)), tf.float32),
        tf.constant(rng.normal(size=(B, L, d)), tf.float32),
        tf.constant(rng.uniform(-1, 1, size=2 * d), tf.float32),
        tf.zeros([2 * d]),
        tf.constant(rng.normal(size=(B, L, d)), tf.float32),
    )
    loss_fn = tf.function(lambda U, x, w, b: tf.reduce_sum(rec(U, x, w, b)[0] * g))

    def once():
        tf.config.experimental.reset_memory_stats("CPU:0")
        base = memory()["current"]
        with tf.GradientTape() as tape:
            tape.watch([U, x, w, b])
            loss = loss_fn(U, x, w, b)
        kept = memory()["current"] - base
        tf.config.experimental.reset_memory_stats("CPU:0")
        [t.numpy() for t in tape.gradient(loss, [U, x, w, b])]
        return kept, memory()["peak"] - base

    once()  # warm-up: tracing and compilation
    return once()


def memory_in_subprocess(variant, L, B, d):
    import subprocess

    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true")
    result = subprocess.run(
        [sys.executable, __file__, "--measure-memory", variant, str(L), "--batch", str(B), "--hidden", str(d)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    kept, peak = result.stdout.strip().splitlines()[-1].split()
    return int(kept), int(peak)


def median_time(fn, repeats):
    fn()  # warm-up: tracing and compilation
    times = []  # the median, because the machine may be shared
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        # Eager calls return when done; np.asarray only waits, without copying
        # (``Tensor.numpy()`` copies: megabytes of gradients here, timed as if the op's)
        tf.nest.map_structure(np.asarray, out)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def trace_share(fn, is_recurrence, repeats):
    """Share of the wall time of ``repeats`` calls of ``fn`` during which an op
    that ``is_recurrence(event_name)`` selects was running, from a
    ``tf.profiler`` trace of those calls (overlapping ops counted once); None
    when the trace has no such op."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    fn()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for _ in range(repeats):
            tf.nest.map_structure(np.asarray, fn())
        elapsed = time.perf_counter() - start
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(pathlib.Path(logdir).rglob("*.xplane.pb")).read_bytes())
    intervals = sorted(
        (line.timestamp_ns * 1000 + e.offset_ps, line.timestamp_ns * 1000 + e.offset_ps + e.duration_ps)
        for plane in space.planes
        for line in plane.lines
        for e in line.events
        if is_recurrence(plane.event_metadata[e.metadata_id].name)
    )
    if not intervals:
        return None  # e.g. on a device whose trace names its XLA runs differently
    busy, end = 0, None
    for a, b in intervals:  # the union's length
        if end is None or a > end:
            busy, end = busy + (b - a), b
        elif b > end:
            busy, end = busy + (b - end), b
    return busy * 1e-12 / elapsed


def is_recurrence_op(implementation):
    """Selects the recurrence's ops in a trace of a (not XLA-compiled) training step:
    graph nodes under ``recurrence.TRACE_SCOPE`` for the native kernel; for the XLA
    loops every XLA executable's run (the step itself is not compiled, so those
    are the recurrence's compiled forward and backward)."""
    if implementation == "native":
        return lambda name: TRACE_SCOPE in name and "GauKerasSru" in name
    return lambda name: name == "CpuExecutable::ExecuteAsyncOnStream"


def memory():
    return tf.config.experimental.get_memory_info("CPU:0")


def make_step(fn, g, jit):
    """fwd+bwd of sum(h * g) w.r.t. (U, x, w, b) as one tf.function."""

    @tf.function(jit_compile=jit)
    def step(U, x, w, b):
        with tf.GradientTape() as tape:
            tape.watch([U, x, w, b])
            loss = tf.reduce_sum(fn(U, x, w, b)[0] * g)
        return tape.gradient(loss, [U, x, w, b])

    return step


def recurrence_table(lengths, B, d, repeats, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for L in lengths:
        U = tf.constant(rng.normal(size=(B, L, 3 * d)), tf.float32)
        x = tf.constant(rng.normal(size=(B, L, d)), tf.float32)
        w = tf.constant(rng.uniform(-1, 1, size=2 * d), tf.float32)
        b = tf.constant(np.r_[np.zeros(d), np.full(d, -2.0)], tf.float32)
        g = tf.constant(rng.normal(size=(B, L, d)), tf.float32)
        results = {}
        for name, jit in (("native", False), ("xla", False), ("autodiff", False), ("autodiff_xla", True)):
            if name == "native" and not native_available():
                continue
            step = make_step(VARIANTS[name.replace("_xla", "")], g, jit)
            args = (U, x, w, b)
            try:
                results[name] = dict(time=median_time(lambda: step(*args), repeats))
            except (tf.errors.OpError, ValueError) as err:  # XLA may refuse the autodiff loop
                print(f"  {name} at L={L} failed: {type(err).__name__}: {str(err).splitlines()[0]}")
        for name in ("native", "xla", "autodiff"):
            if name in results:
                results[name]["kept"], results[name]["peak"] = memory_in_subprocess(name, L, B, d)
        rows.append((L, results))
    return rows


def print_recurrence_table(rows):
    print(
        "\n(a) recurrence forward+backward: custom gradient (native kernel / XLA loops) vs autodiff through "
        "tf.while_loop; ratios = custom / autodiff (lower is better)"
    )
    print(
        f"{'L':>5} | {'native ms':>9} {'XLA ms':>7} {'autodiff ms':>11} {'autodiff XLA ms':>15} |"
        f" {'time native':>11} {'time XLA':>8} | {'kept native':>11} {'kept XLA':>8} |"
        f" {'bwd peak native':>15} {'bwd peak XLA':>12}"
    )
    for L, r in rows:
        a, ax = r["autodiff"], r.get("autodiff_xla")
        ms = lambda name: f"{r[name]['time'] * 1e3:.1f}" if name in r else "n/a"  # noqa: E731
        ratio = lambda name, key: f"{r[name][key] / a[key]:.2f}" if name in r else "n/a"  # noqa: E731
        autodiff_xla = ms("autodiff_xla") if ax else "n/a"
        print(
            f"{L:>5} | {ms('native'):>9} {ms('xla'):>7} {ms('autodiff'):>11} {autodiff_xla:>15} |"
            f" {ratio('native', 'time'):>11} {ratio('xla', 'time'):>8} | {ratio('native', 'kept'):>11}"
            f" {ratio('xla', 'kept'):>8} | {ratio('native', 'peak'):>15} {ratio('xla', 'peak'):>12}"
        )
    print(
        "memory from the BFC allocator (see the docstring); autodiff MiB kept / bwd peak: "
        + ", ".join(f"L={L}: {r['autodiff']['kept'] / MiB:.0f}/{r['autodiff']['peak'] / MiB:.0f}" for L, r in rows)
    )


def train_step(model):
    """A tf.function: one Adam step on the mean squared error of model(x) against y."""
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return step


def srupp_model(d, proj, layers, L):
    inputs = keras.Input((L, d))
    return keras.Model(inputs, SRUpp(d, proj, num_layers=layers)(inputs))


def rnn_model(cls, d, layers, L):
    inputs = keras.Input((L, d))
    h = inputs
    for _ in range(layers):
        h = cls(d, return_sequences=True)(h)
    return keras.Model(inputs, h)


def sru_implementation(name):
    """``$GAU_KERAS_SRU_KERNEL`` while a step is traced (the layer reads it when traced)."""
    return sru_kernel_set(name)


def step_tables(B, d, proj, layers, L, repeats, seed=0, gru_lstm=True):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(B, L, d)), tf.float32)
    y = tf.constant(rng.normal(size=(B, L, d)), tf.float32)
    U = tf.constant(rng.normal(size=(B, L, 3 * d)), tf.float32)
    w = tf.constant(rng.uniform(-1, 1, size=2 * d), tf.float32)
    b = tf.zeros([2 * d])

    print(f"\n(b) recurrence share of an SRU++ training step (B {B}, L {L}, d {d}, proj {proj}, {layers} layers)")
    step_times = {}
    for name in ("native", "xla") if native_available() else ("xla",):
        with sru_implementation(name):
            step = train_step(srupp_model(d, proj, layers, L))
            t_step = median_time(lambda: step(x, y), repeats)

            @tf.function
            def recurrence_step(U, x):  # forward + backward with y as the upstream gradient of h
                with tf.GradientTape() as tape:
                    tape.watch([U, x, w, b])
                    h = sru_recurrence(U, x, w, b)[0]
                return tape.gradient(h, [U, x, w, b], output_gradients=y)

            t_rec = median_time(lambda: recurrence_step(U, x), repeats)
            in_step = trace_share(lambda: step(x, y), is_recurrence_op(name), repeats)
        step_times[name] = t_step
        print(
            f"  {name:>6}: training step {t_step * 1e3:.1f} ms; recurrence fwd+bwd {t_rec * 1e3:.1f} ms x {layers}"
            f" layers = {layers * t_rec * 1e3:.1f} ms -> share {layers * t_rec / t_step:.1%};"
            f" in-step trace share {'n/a (no recurrence op in the trace)' if in_step is None else f'{in_step:.1%}'}"
        )

    if not gru_lstm:
        return
    t_srupp = step_times["native" if native_available() else "xla"]
    kernel = "native kernel" if native_available() else "XLA loops"
    print(f"\n(c) training step, SRU++ ({kernel}) vs 2-layer GRU/LSTM({d}) (B {B}, L {L})")
    print(f"  {'model':<10} {'ms/step':>9} {'SRU++ / model':>14}")
    print(f"  {'SRU++':<10} {t_srupp * 1e3:9.1f} {1.0:14.2f}")
    for cls in (keras.layers.GRU, keras.layers.LSTM):
        rnn_step = train_step(rnn_model(cls, d, 2, L))
        t = median_time(lambda: rnn_step(x, y), repeats)
        print(f"  {cls.__name__:<10} {t * 1e3:9.1f} {t_srupp / t:14.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--proj", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--step-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="lengths 256 1024, 2 repeats")
    parser.add_argument("--tables", default="abc", help="which of the tables a, b, c to run (default: abc)")
    parser.add_argument("--measure-memory", nargs=2, metavar=("VARIANT", "L"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_memory:
        print(*memory_bytes(args.measure_memory[0], int(args.measure_memory[1]), args.batch, args.hidden))
        return
    native_available()  # says up front when the native kernel is left out
    if args.quick:
        args.lengths, args.repeats = [256, 1024], 2
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, devices "
        f"{[d.device_type for d in tf.config.list_physical_devices()]}, {os.cpu_count()} CPUs visible"
    )
    if "a" in args.tables:
        print_recurrence_table(recurrence_table(args.lengths, args.batch, args.hidden, args.repeats))
    if "b" in args.tables or "c" in args.tables:
        step_tables(
            args.batch, args.hidden, args.proj, args.layers, args.step_length, args.repeats, gru_lstm="c" in args.tables
        )


if __name__ == "__main__":
    main()
