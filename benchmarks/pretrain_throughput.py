"""Seconds per update: pretrain.py's own loop vs a bare compiled step, and the
fine-tuning runner's ``model.fit`` vs a bare step, XLA on and off.

Pretraining, for each config (default: the tiny GAU-alpha and RoFormerV2):
  * loop: ``gau_keras.training.pretrain.trainer.Trainer`` on TFRecord shards, timed through
    ``Trainer.advance`` (the loop's own update: data pipeline with its
    dynamic masking, distribution strategy, micro-steps, logging every
    ``log_every`` updates; checkpoints and evaluation off);
  * bare: the same model (``build_transformer_model``), batch shape, tied MLM
    head on the first ``maxlen/4`` masked positions, masked cross-entropy and
    ``LAMB``, as one ``tf.function`` on a batch already in memory: no data
    pipeline, no strategy, no logging.
Both with ``jit_compile`` on and off. On JAX (``--backends``, default
tensorflow and jax): the same loop (``gau_keras.training.pretrain.jax_backend``: a ``jax.jit``
step over ``keras.distribution``'s devices) and a bare ``jax.jit`` step
(``stateless_call`` of the same model and head, ``jax.value_and_grad``,
``LAMB.stateless_apply``, state donated); every JAX step is compiled, so JAX
has one row. A second table per config gives the train steps JAX vs
TensorFlow, round by round. The shards are synthetic (random ids,
dense sequences of ``maxlen`` tokens, whole-word masks at 15% redrawn per
epoch), written to a temporary folder with the config's vocab size: speed
does not depend on the text.

Fine-tuning (``--finetune``, default on): the runner's tnews head on the
config's GAU-alpha (``gau-keras finetune tnews``, the runner's AdamW schedule and loss),
batches from the runner's ``PaddedBatches`` over synthetic titles of 8-62
characters (each batch padded to its longest, as the runner does):
  * fit: ``model.fit`` on the runner's ``tf_dataset``, ``jit_compile`` on/off;
  * bare: one ``tf.function`` train step on the same batches.
The first pass over the batches (XLA compiles every new batch length) is the
warm-up, reported as "first pass"; timed rounds reuse the same batches.

Every variant runs in its own worker process; the parent alternates them
round by round (order flipped each round, ``_common.run_side_by_side``), so
machine noise hits all alike. Reported: median seconds per update, and the
ratio loop/bare measured round by round against the faster bare step.

Usage: python3 benchmarks/pretrain_throughput.py [--configs pretrain/configs/tiny.json,...]
    [--backends tensorflow,jax] [--updates 20] [--repeats 5] [--no-finetune] [--quick]
"""

import argparse
import atexit
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(REPO))

import _common  # noqa: E402  (path set above)

DEFAULT_CONFIGS = ("pretrain/configs/tiny.json", "pretrain/configs/tiny_roformer_v2.json")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
#: --quick: a smoke test of the machinery, not a measurement
QUICK_MODEL = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "intermediate_size": 24,
    "attention_key_size": 8,
    "num_attention_heads": 1,
}


# ---------------------------------------------------------------- synthetic data
def synthetic_vocab(path, size):
    """A vocab of ``size`` tokens: the specials, then CJK characters."""
    tokens = SPECIALS + [chr(0x4E00 + i) for i in range(size - len(SPECIALS))]
    pathlib.Path(path).write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def synthetic_shards(directory, vocab_size, maxlen, sequences, seed=0):
    """Dynamic-mask shards of dense random sequences; returns their pattern."""
    import numpy as np

    from gau_keras.data.tfrecord import ShardedWriter

    rng = np.random.default_rng(seed)
    with ShardedWriter(directory, 2) as writer:
        for _ in range(sequences):
            ids = rng.integers(len(SPECIALS), vocab_size, size=maxlen - 2).tolist()
            starts = (rng.random(maxlen - 2) < 0.6).astype(int).tolist()
            starts[0] = 1
            writer.write({"token_ids": [2] + ids + [3], "word_starts": [0] + starts + [0]})
    return str(pathlib.Path(directory) / "shard-*.tfrecord")


def run_config(spec):
    """The config of ``spec['config']`` pointed at synthetic data in a temporary folder, removed when
    the worker exits."""
    from gau_keras.training.pretrain import config as config_lib

    scratch = tempfile.mkdtemp(prefix="pretrain_throughput_")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)

    config = config_lib.load(str(REPO / spec["config"]))
    model_config = config_lib.model_config(config)
    if spec["quick"]:
        model_config.update(QUICK_MODEL, num_attention_heads=1 if config["model"] == "gau_alpha" else 2)
    config.update(model_config=model_config, model_config_path=None)
    maxlen = config["data"]["maxlen"] if not spec["quick"] else 16
    config["vocab"] = synthetic_vocab(pathlib.Path(scratch) / "vocab.txt", model_config["vocab_size"])
    config["data"].update(
        train=synthetic_shards(
            pathlib.Path(scratch) / "shards", model_config["vocab_size"], maxlen, 4 * config["data"]["batch_size"]
        ),
        eval=None,
        maxlen=maxlen,
        dynamic_mask=None,
    )
    config["train"].update(
        output_dir=str(pathlib.Path(scratch) / "run"), steps=10**9, save_every=10**9, eval_every=0, xla=spec["xla"]
    )
    return config


# ---------------------------------------------------------------- workers
def loop_setup(spec):
    from gau_keras.training.pretrain.trainer import Trainer

    trainer = Trainer(run_config(spec), xla=spec["xla"])
    trainer._open_logs()
    updates = spec["updates"]

    def step():
        for _ in range(updates):
            trainer.advance()
        trainer.wait()  # the last update has finished

    return {"params": int(trainer.model.count_params()), "xla": trainer.xla}, step


def bare_parts(spec):
    """What the bare steps share: (builder object of the model with its MLM head, LAMB, one
    batch of the synthetic shards in memory, k = maxlen/4 positions per sequence)."""
    import keras
    import numpy as np

    from gau_keras.data.tfrecord import load_dataset
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.optimizers import LAMB, PiecewiseLinearDecay

    config = run_config(spec)
    keras.utils.set_random_seed(config["train"]["seed"])
    data = config["data"]
    transformer = build_transformer_model(
        config["model_config"], model=config["model"], with_mlm="linear", return_keras_model=False
    )
    opt = dict(config["optimizer"])
    schedule = PiecewiseLinearDecay(opt.pop("learning_rate"), opt.pop("schedule"))
    opt["gradient_accumulation_steps"] = None
    batch = next(
        iter(
            load_dataset(
                data["train"],
                data["batch_size"],
                maxlen=data["maxlen"],
                mask_token_id=4,
                random_token_ids=np.arange(5, 64),
            )
        )
    )
    return transformer, LAMB(learning_rate=schedule, **opt), batch, -(-data["maxlen"] // 4)


def bare_setup(spec):
    import keras
    import numpy as np
    import tensorflow as tf

    from gau_keras.losses import masked_lm_sums, masked_positions

    transformer, optimizer, (inputs, labels), k = bare_parts(spec)
    model = transformer.model
    encoder = keras.Model(model.inputs, transformer.encoder_output)
    variables = model.trainable_variables

    @tf.function(jit_compile=spec["xla"])
    def train_step(inputs, labels):
        positions, kept = masked_positions(labels, k)
        with tf.GradientTape() as tape:
            hidden = tf.gather(encoder(inputs, training=True), positions, batch_dims=1)
            loss_sum, _, count = masked_lm_sums(kept, transformer.mlm_logits(hidden, training=True))
            loss = loss_sum / tf.maximum(count, 1.0)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    updates = spec["updates"]

    def step():
        for _ in range(updates):
            loss = train_step(inputs, labels)
        np.asarray(loss)

    return {"params": int(model.count_params()), "xla": spec["xla"]}, step


def jax_bare_setup(spec):
    """The bare step on JAX: one jax.jit function of the same model, head, loss and LAMB."""
    import functools

    import jax
    import keras
    import numpy as np
    from keras import ops

    from gau_keras.layers.heads import GatherPositions
    from gau_keras.losses import masked_lm_sums, masked_positions

    transformer, optimizer, (inputs, labels), k = bare_parts(spec)
    model = transformer.model
    positions_input = keras.Input((k,), dtype="int32")
    hidden = GatherPositions()([transformer.encoder_output, positions_input])
    train_model = keras.Model([*model.inputs, positions_input], transformer.mlm_logits(hidden, training=None))
    optimizer.build(train_model.trainable_variables)
    x = [np.asarray(inputs[t.name]) for t in model.inputs]
    labels = np.asarray(labels)

    def loss_fn(trainable, non_trainable, x, labels):
        positions, kept = masked_positions(labels, k)
        logits, non_trainable = train_model.stateless_call(trainable, non_trainable, [*x, positions], training=True)
        loss_sum, _, count = masked_lm_sums(kept, logits)
        return loss_sum / ops.maximum(count, 1.0), non_trainable

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state, x, labels):
        trainable, non_trainable, optimizer_values = state
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, non_trainable, x, labels)
        trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
        return (trainable, non_trainable, optimizer_values), loss

    state = (
        [v.value for v in train_model.trainable_variables],
        [v.value for v in train_model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    updates = spec["updates"]

    def step():
        nonlocal state
        for _ in range(updates):
            state, loss = train_step(state, x, labels)
        np.asarray(loss)

    return {"params": int(model.count_params()), "xla": True}, step


def finetune_batches(spec, tokenizer, task):
    import numpy as np

    from gau_keras.data.clue.examples import TextExample
    from gau_keras.training.finetune.batching import PaddedBatches

    rng = np.random.default_rng(0)
    chars = [t for t in tokenizer.token_dict if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    features = []
    for _ in range(spec["updates"] * spec["batch_size"]):
        text = "".join(rng.choice(chars, size=int(rng.integers(8, 63))))
        example = TextExample(id=0, text=text, label=int(rng.integers(0, task.spec.num_labels)))
        features.extend(task.features(example, training=True))
    return PaddedBatches(features, spec["batch_size"], shuffle=False)


def finetune_model(spec):
    import keras

    from gau_keras.models.builder import build_transformer_model
    from gau_keras.pretrained import default_model_dir, model_files
    from gau_keras.tokenizers import Tokenizer
    from gau_keras.training.finetune.runner import make_optimizer
    from gau_keras.training.finetune.tasks import task_class

    keras.utils.set_random_seed(0)
    config, _, vocab = model_files(default_model_dir())
    overrides = QUICK_MODEL if spec["quick"] else {}
    transformer = build_transformer_model(config, model="gau_alpha", return_keras_model=False, **overrides)
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    task = task_class("tnews")("tnews", tokenizer, 64)
    model = task.build_model(transformer)
    batches = finetune_batches(spec, tokenizer, task)
    optimizer = make_optimizer(1e-3, 0.01, 10**6)
    return model, task, batches, optimizer


def fit_setup(spec):
    model, task, batches, optimizer = finetune_model(spec)
    model.compile(optimizer=optimizer, loss=task.loss(), jit_compile=spec["xla"])
    dataset = batches.tf_dataset()

    def step():
        model.fit(dataset, epochs=1, verbose=0, shuffle=False)

    return {"params": int(model.count_params()), "xla": spec["xla"]}, step


def finetune_bare_setup(spec):
    import numpy as np
    import tensorflow as tf

    model, task, batches, optimizer = finetune_model(spec)
    loss_fn = task.loss()
    variables = model.trainable_variables
    data = [batches[i] for i in range(len(batches))]

    @tf.function(jit_compile=spec["xla"], reduce_retracing=True)
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    def step():
        for inputs, labels in data:
            loss = train_step(inputs, labels)
        np.asarray(loss)

    return {"params": int(model.count_params()), "xla": spec["xla"]}, step


SETUPS = {
    "loop": loop_setup,
    "bare": bare_setup,
    "fit": fit_setup,
    "finetune_bare": finetune_bare_setup,
    "jax_bare": jax_bare_setup,
}


def worker_main(spec_json):
    spec = json.loads(spec_json)
    os.environ["KERAS_BACKEND"] = spec.get("backend", "tensorflow")  # before Keras loads
    _common.serve(lambda: SETUPS[spec["kind"]](spec))


# ---------------------------------------------------------------- parent
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help="comma-separated pretraining configs (default: the two tiny ones)",
    )
    parser.add_argument("--updates", type=int, help="updates per timed round (default 20; --quick: 2)")
    parser.add_argument("--repeats", type=int, help="timed rounds after the warm-up (default 5; --quick: 1)")
    parser.add_argument("--xla", default="off,on", help="TensorFlow's variants, comma-separated: off, on")
    parser.add_argument("--backends", help="comma-separated: tensorflow, jax (default: both where jax is installed)")
    parser.add_argument("--no-finetune", action="store_true", help="skip the fine-tuning comparison")
    parser.add_argument("--quick", action="store_true", help="tiny model and data: a smoke test, not a measurement")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for config in args.configs:
        if not (REPO / config).is_file():
            parser.error(f"--configs: {config} does not exist (paths are relative to the repository)")
    args.xla = (
        [{"off": False, "on": True}[x.strip()] for x in args.xla.split(",") if x.strip()]
        if set(x.strip() for x in args.xla.split(",")) <= {"off", "on"}
        else parser.error("--xla: off and/or on")
    )
    default = "tensorflow,jax" if importlib.util.find_spec("jax") else "tensorflow"
    args.backends = [b.strip() for b in (args.backends or default).split(",") if b.strip()]
    if not args.backends or not set(args.backends) <= {"tensorflow", "jax"}:
        parser.error("--backends: tensorflow and/or jax")
    if "jax" in args.backends and not importlib.util.find_spec("jax"):
        parser.error("--backends jax: jax is not installed (pip install jax)")
    args.updates = args.updates or (2 if args.quick else 20)
    args.repeats = args.repeats or (1 if args.quick else 5)
    if args.updates < 1 or args.repeats < 1:
        parser.error("--updates and --repeats must be >= 1")
    return args


def worker_argv(**spec):
    return [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", json.dumps(spec)]


def table_rows(results, per_round, pairs):
    """One row per (loop-like, bare-like) pair: medians and the round-by-round ratio."""
    f = _common.format_number
    rows = []
    fastest_bare = min(statistics.median(results[b]["seconds"]) for _, b in pairs)
    fastest = min((b for _, b in pairs), key=lambda b: statistics.median(results[b]["seconds"]))
    for loop, bare in pairs:
        loop_s = [s / per_round for s in results[loop]["seconds"]]
        bare_s = [s / per_round for s in results[bare]["seconds"]]
        fast_s = [s / per_round for s in results[fastest]["seconds"]]
        rows.append(
            [
                loop,
                f(statistics.median(loop_s)),
                f(statistics.median(bare_s)),
                f(_common.median_ratio(loop_s, bare_s)),
                f(_common.median_ratio(loop_s, fast_s)),
            ]
        )
    return rows, fastest_bare / per_round


def backend_rows(results, xlas, xla_name):
    """The JAX bare step and loop against each TensorFlow variant of the same kind."""
    f = _common.format_number
    rows = []
    for kind in ("bare", "loop"):
        for xla in xlas:
            jax_label, tf_label = f"jax {kind} (jit)", f"{kind}, {xla_name[xla]}"
            rows.append(
                [
                    jax_label,
                    tf_label,
                    f(_common.median_ratio(results[jax_label]["seconds"], results[tf_label]["seconds"])),
                ]
            )
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return
    xla_name = {False: "xla off", True: "xla on"}
    for config in args.configs:
        print(f"[pretrain] {config} ...", file=sys.stderr, flush=True)
        argvs, pairs = {}, []
        common = dict(config=config, updates=args.updates, quick=args.quick)
        if "tensorflow" in args.backends:
            for xla in args.xla:
                pairs.append((f"loop, {xla_name[xla]}", f"bare, {xla_name[xla]}"))
                argvs[pairs[-1][0]] = worker_argv(kind="loop", xla=xla, **common)
                argvs[pairs[-1][1]] = worker_argv(kind="bare", xla=xla, **common)
        if "jax" in args.backends:
            pairs.append(("jax loop (jit)", "jax bare (jit)"))
            argvs[pairs[-1][0]] = worker_argv(kind="loop", xla=None, backend="jax", **common)
            argvs[pairs[-1][1]] = worker_argv(kind="jax_bare", xla=None, backend="jax", **common)
        results = _common.measure_side_by_side(argvs, args.repeats)
        rows, _ = table_rows(results, args.updates, pairs)
        params = results[pairs[0][0]]["params"]
        print(
            f"\n{config}: {params:,} parameters, {args.updates} updates per round, {args.repeats} rounds "
            f"after 1 warm-up round; device: {results[pairs[0][0]]['device']}"
        )
        print(
            _common.markdown_table(
                ["variant", "s/update", "bare s/update", "loop / bare (same XLA)", "loop / fastest bare"], rows
            )
        )
        if "jax" in args.backends and "tensorflow" in args.backends:
            print(f"\n{config}: JAX / TensorFlow, seconds per update, median of the round-by-round ratios")
            print(
                _common.markdown_table(
                    ["JAX", "TensorFlow", "JAX / TensorFlow"], backend_rows(results, args.xla, xla_name)
                )
            )
    if args.no_finetune:
        return
    print("[finetune] tnews head on the bundled GAU-alpha ...", file=sys.stderr, flush=True)
    argvs = {}
    for xla in args.xla:
        argvs[f"fit, {xla_name[xla]}"] = worker_argv(
            kind="fit", xla=xla, updates=args.updates, batch_size=32, quick=args.quick
        )
        argvs[f"bare, {xla_name[xla]}"] = worker_argv(
            kind="finetune_bare", xla=xla, updates=args.updates, batch_size=32, quick=args.quick
        )
    results = _common.measure_side_by_side(argvs, args.repeats)
    pairs = [(f"fit, {xla_name[x]}", f"bare, {xla_name[x]}") for x in args.xla]
    rows, _ = table_rows(results, args.updates, pairs)
    for row, (fit, _) in zip(rows, pairs):  # the first pass: every batch length compiled once
        row.append(_common.format_number(results[fit]["warmup_seconds"]))
    print(
        f"\nfine-tuning (tnews head, batch 32, titles of 8-62 characters): "
        f"{results[pairs[0][0]]['params']:,} parameters, {args.updates} steps per round (one pass over the "
        f"same batches), {args.repeats} rounds after 1 warm-up round"
    )
    print(
        _common.markdown_table(
            [
                "variant",
                "s/step",
                "bare s/step",
                "fit / bare (same XLA)",
                "fit / fastest bare",
                f"first pass s ({args.updates} steps, compiles)",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
