"""The shared fine-tuning runner behind every ``python -m finetune.<task>``.

    python -m finetune.tnews --data-dir ../shared/data/clue --out-dir runs/tnews

It reads train/dev/test with `gau_keras.data.clue.load_task` (malformed lines
are reported with file and line and counted), builds the pretrained model of
``--model-dir`` (default: the bundled small GAU-alpha) or, with
``--from-scratch``, a randomly initialised model of the same config, puts the
task's head on it and trains with ``model.fit`` (AdamW, linear warm-up over
the first 10% of the steps then linear decay to 0; a tqdm bar per epoch).
After each epoch the dev metric is printed and the weights are kept when it
is the best so far. The best weights then predict the test split, written in
the CLUE submission format. Outputs in ``--out-dir``:

* ``<task>_best.weights.h5``: the best epoch's weights (``model.save_weights``);
* ``<task>_best.keras``: the best epoch's whole model (``model.save``), which
  ``keras.saving.load_model`` reloads after ``import gau_keras`` alone and
  ``python -m gau_keras export`` turns into a SavedModel for serving;
* ``<task>_metrics.json``: arguments, data counts and per-epoch dev metrics;
* ``<task>_predict.json``: test predictions (ids preserved).

Every output is written under a temporary name and renamed into place, so a
killed run never leaves a truncated file under a final name. An existing
output is never replaced unless ``--overwrite`` is given, or its metrics file
says its run did not finish (an interrupted run, whose outputs are replaced
with a message saying so). ``--out-dir`` is locked (``.lock``, as a
pretraining run directory) for the whole run: a second run on it is refused,
naming the first. The output folder, the data and ``--predict-split`` are
checked before any training. Exit status: 0 on success, 2 on a usage or data
error.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

from gau_keras import flags
from gau_keras.training.finetune.batching import PaddedBatches

#: the dev subset of --max-eval-examples does not depend on --seed, so runs compare on the same examples
DEV_SUBSET_SEED = 0


def task_module(task_cls):
    """(dotted name, module) of a task class's module, also under ``python -m`` (where it is ``__main__``)."""
    module = sys.modules[task_cls.__module__]
    spec = getattr(module, "__spec__", None)
    return (spec.name if spec is not None else task_cls.__module__), module


def task_class(module_name):
    """The `Task` subclass a task module (e.g. ``finetune.tnews``) defines."""
    import importlib

    from gau_keras.training.finetune.task import Task

    module = importlib.import_module(module_name)
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, Task) and v.__module__ == module.__name__]
    if len(found) != 1:
        raise ValueError(f"{module_name} defines {len(found)} Task classes; expected one")
    return found[0]


def build_parser(task_cls):
    defaults = task_cls.defaults
    name, module = task_module(task_cls)
    if name == "gau_keras.training.finetune.commands":       # a table row without a module of its own
        prog, description = f"gau-keras finetune {task_cls.task_names[0]}", task_cls.__doc__ or ""
    else:
        prog, description = f"python -m {name}", (module.__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--data-dir", required=True,
                        help="folder holding the task's folder (e.g. ../shared/data/clue or the CLUE download "
                             "folder) or the task's {train,dev,test}.json themselves")
    parser.add_argument("--task-name", default=task_cls.task_names[0], choices=task_cls.task_names,
                        help="which CLUE task's files and label set (default: %(default)s)")
    parser.add_argument("--model-dir", default=None,
                        help="bert_config.json + bert_model.ckpt.* + vocab.txt (default: the bundled GAU-alpha)")
    parser.add_argument("--model", default="gau_alpha", choices=("gau_alpha", "roformer_v2"))
    parser.add_argument("--from-scratch", action="store_true",
                        help="random initialisation with the model's config (baseline runs)")
    parser.add_argument("--out-dir", default="finetune_outputs")
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    parser.add_argument("--epochs", type=flags.non_negative_int, default=defaults["epochs"])
    parser.add_argument("--batch-size", type=flags.positive_int, default=defaults["batch_size"])
    parser.add_argument("--maxlen", type=flags.at_least(8), default=defaults["maxlen"])
    parser.add_argument("--lr", type=flags.positive_float, default=defaults["lr"])
    parser.add_argument("--weight-decay", type=flags.non_negative_float, default=0.01)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-train-examples", type=flags.positive_int, default=None,
                        help="train on a random subset of this size (seeded)")
    parser.add_argument("--max-eval-examples", type=flags.positive_int, default=None,
                        help="evaluate on a random subset of N dev examples (the same subset for every "
                             "--seed: dev files may be sorted by label)")
    parser.add_argument("--max-test-examples", type=flags.positive_int, default=None,
                        help="predict only the first N test examples (smoke runs; not a valid submission)")
    parser.add_argument("--predict-split", default=None,
                        help="the unlabelled split to write predictions for (default: test, when the data has one)")
    parser.add_argument("--dropout", type=flags.rate_below_one, default=task_cls.dropout_rate,
                        help="dropout of the task head (default: %(default)s)")
    parser.add_argument("--devices", type=flags.positive_int, default=1,
                        help="train on this many devices: MirroredStrategy over GPUs when there are enough, "
                             "else logical CPU devices; on JAX keras.distribution.DataParallel over its devices "
                             "(default: 1, no strategy)")
    parser.add_argument("--xla", choices=("auto", "on", "off"), default="auto",
                        help="jit-compile the train step; auto: on for GPU/TPU, off on CPU (default: auto)")
    task_cls.add_arguments(parser)
    return parser


def output_paths(out_dir, task_name):
    out_dir = pathlib.Path(out_dir)
    return {"weights": out_dir / f"{task_name}_best.weights.h5",
            "model": out_dir / f"{task_name}_best.keras",
            "metrics": out_dir / f"{task_name}_metrics.json",
            "predictions": out_dir / f"{task_name}_predict.json"}


def check_outputs(paths, overwrite):
    """Refuses (FileExistsError) to run when an output of a finished run exists
    and overwrite is off. The outputs of a run that did not finish (its
    metrics file missing, unreadable or without ``finished``) are replaced,
    with a message saying so; leftover temporary files are removed."""
    for leftover in _temporaries(paths):
        leftover.unlink()
    existing = [str(p) for p in paths.values() if p.exists()]
    if not existing or overwrite:
        return
    try:
        finished = json.loads(paths["metrics"].read_text(encoding="utf-8")).get("finished")
    except (OSError, ValueError, AttributeError):
        finished = False
    if finished:
        raise FileExistsError(f"output(s) {', '.join(existing)} already exist; pass --overwrite to replace them")
    print(f"replacing the outputs of an interrupted run ({', '.join(existing)}): {paths['metrics']} does not "
          f"say that run finished")


def _temporary(path):
    """Where ``path`` is written before it is renamed into place (Keras wants the suffix kept)."""
    suffix = ".weights.h5" if path.name.endswith(".weights.h5") else path.suffix
    return path.with_name(f"{path.name[: -len(suffix)]}.partial{suffix}")


def _temporaries(paths):
    return [t for t in (_temporary(p) for p in paths.values()) if t.exists()]


def _save_atomically(save, path):
    """``save(temporary path)``, then the temporary file renamed to ``path``."""
    temporary = _temporary(pathlib.Path(path))
    try:
        save(str(temporary))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def check_out_dir(out_dir):
    """Creates ``--out-dir`` and checks that it is writable (before any work)."""
    out_dir = pathlib.Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out-dir {out_dir} is a file, not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as e:
        raise ValueError(f"--out-dir {out_dir} is not writable ({e.strerror or e})") from None


def lock_out_dir(out_dir):
    """The run lock of ``--out-dir`` (``pretrain.run_dir.RunLock``); a FileExistsError names its holder."""
    from gau_keras.training.run_dir import RunLock

    try:
        return RunLock(str(out_dir), other="give another --out-dir").acquire()
    except SystemExit as held:
        raise FileExistsError(str(held.code).removeprefix("error: ")) from None


def load_split(task_name, split, data_dir, limit=None, seed=None):
    """Examples of a split, at most ``limit`` (a seeded random subset when ``seed`` is given)."""
    from gau_keras.data.clue import load_task

    examples, stats = load_task(task_name, split, data_dir)
    print(stats.summary())
    if limit is not None and limit < len(examples):
        if seed is None:
            examples = examples[:limit]
        else:
            keep = np.sort(np.random.default_rng(seed).permutation(len(examples))[:limit])
            examples = [examples[i] for i in keep]
    if not examples:
        raise ValueError(f"{task_name}: the {split} split of {data_dir} holds no usable example")
    return examples


def encode(task, examples, training):
    """All features of ``examples``, each tagged with its example's index."""
    features = []
    for index, example in enumerate(examples):
        features.extend(f._replace(example=index) for f in task.features(example, training))
    return features


def predict(task, model, examples, features, batch_size, desc="predict"):
    """One prediction per example: the model's outputs, grouped by example, through ``task.predict``."""
    from tqdm import tqdm

    batches = PaddedBatches(features, batch_size, with_labels=False)
    outputs = [[] for _ in examples]
    for index in tqdm(range(len(batches)), desc=desc, leave=False, file=sys.stderr):
        result = model.predict_on_batch(batches[index][0])
        for row, feature_index in enumerate(batches.batch_indices(index)):
            outputs[features[feature_index].example].append(np.asarray(result[row]))
    grouped = [[] for _ in examples]
    for feature in features:
        grouped[feature.example].append(feature)
    return [task.predict(e, f, o) for e, f, o in zip(examples, grouped, outputs)]


def build_transformer(args, task):
    """The builder object of the (pretrained or randomly initialised) model, and its tokenizer."""
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.pretrained import REQUIRED_TOKENS, check_model_dir
    from gau_keras.tokenizers import Tokenizer

    required = REQUIRED_TOKENS + (("[MASK]",) if task.with_mlm else ())
    config, checkpoint, vocab = check_model_dir(args.model_dir, required)
    kwargs = {"with_mlm": "linear"} if task.with_mlm else {}
    transformer = build_transformer_model(config, None if args.from_scratch else checkpoint,
                                          model=args.model, return_keras_model=False, **kwargs)
    return transformer, Tokenizer(vocab, do_lower_case=True)


def use_xla(choice):
    """``--xla``: auto is on for GPU/TPU and off on CPU (benchmarks/pretrain_throughput.py:
    with the bundled model on CPU, XLA made the steps slower and compiling every new
    batch length made the first pass over the batches 2.6x longer)."""
    if choice != "auto":
        return choice == "on"
    import keras

    if keras.backend.backend() == "jax":
        return True     # JAX compiles every step (jit_compile=False would run it op by op)
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))


def make_strategy(devices):
    """``gau_keras.distribution.data_parallel``: the default strategy or MirroredStrategy
    over ``devices`` GPUs / logical CPUs; on JAX ``keras.distribution.DataParallel``."""
    from gau_keras.distribution import data_parallel

    return data_parallel(devices)


def make_optimizer(lr, weight_decay, total_steps):
    """AdamW with a linear warm-up over 10% of the steps, then a linear decay to 0
    (`DenseAdamW`: Keras's AdamW on dense gradients, the same update on either backend)."""
    from gau_keras.optimizers import DenseAdamW, PiecewiseLinearDecay

    warmup = max(1, total_steps // 10)
    schedule = PiecewiseLinearDecay(lr, {warmup: 1.0, max(total_steps, warmup + 1): 0.0})
    optimizer = DenseAdamW(learning_rate=schedule, weight_decay=weight_decay)
    optimizer.exclude_from_weight_decay(var_names=["bias", "Norm"])
    return optimizer


def _callbacks():
    """The runner's Keras callbacks (defined on first use: keras is imported lazily)."""
    import keras
    from tqdm import tqdm

    class TqdmProgress(keras.callbacks.Callback):
        """One tqdm bar per epoch with the running loss."""

        def __init__(self, steps, epochs):
            super().__init__()
            self.steps, self.epochs, self.bar = steps, epochs, None

        def on_epoch_begin(self, epoch, logs=None):
            self.bar = tqdm(total=self.steps, desc=f"epoch {epoch + 1}/{self.epochs}", file=sys.stderr)

        def on_train_batch_end(self, batch, logs=None):
            self.bar.update(1)
            if logs and "loss" in logs:
                self.bar.set_postfix(loss=f"{float(logs['loss']):.4f}")

        def on_epoch_end(self, epoch, logs=None):
            self.bar.close()

    class DevEvaluation(keras.callbacks.Callback):
        """Scores the dev set after each epoch; keeps the best weights; records the history."""

        def __init__(self, evaluate, metric, weights_path, on_record):
            super().__init__()
            self.evaluate, self.metric = evaluate, metric
            self.weights_path, self.on_record = weights_path, on_record
            self.best, self.history = None, []

        def on_epoch_end(self, epoch, logs=None):
            scores = self.evaluate(self.model)
            loss = (logs or {}).get("loss")     # none with --epochs 0 (the starting point)
            record = {"epoch": epoch + 1, "train_loss": None if loss is None else float(loss), **scores}
            improved = self.best is None or scores[self.metric] > self.best[self.metric]
            if improved:
                self.best = record
                _save_atomically(self.model.save_weights, self.weights_path)
            self.history.append(record)
            shown = ", ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, float))
            print(f"epoch {epoch + 1}: dev {shown}; best {self.metric}={self.best[self.metric]:.4f} "
                  f"(epoch {self.best['epoch']}){' *' if improved else ''}", flush=True)
            self.on_record(self)

    return TqdmProgress, DevEvaluation


def _finite(value):
    """``value`` with every NaN / infinity replaced by None (strict JSON has neither)."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _write_json(path, value):
    text = json.dumps(_finite(value), ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    _save_atomically(lambda temporary: pathlib.Path(temporary).write_text(text, encoding="utf-8"), path)


def check_arguments(args):
    if not 0 <= args.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}")
    for name, least in (("epochs", 0), ("batch_size", 1), ("maxlen", 8), ("devices", 1)):
        value = getattr(args, name)
        if value < least:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")


def check_predict_split(args):
    """Before training: whether ``--predict-split`` can be predicted. A split
    given on the command line must exist; a missing default ``test`` split
    is said now (no predictions will be written) rather than after training."""
    from gau_keras.data.clue import find_split_files

    if args.predict_split is None:
        args.predict_split = "test"
        try:
            find_split_files(args.task_name, "test", args.data_dir)
        except FileNotFoundError as missing:
            print(f"no predictions will be written: {missing} (--predict-split names another split)")
            return False
        return True
    try:
        find_split_files(args.task_name, args.predict_split, args.data_dir)
    except FileNotFoundError as missing:
        raise FileNotFoundError(f"--predict-split {args.predict_split}: {missing}") from None
    return True


def write_test_predictions(task, model, args, path):
    """Predicts ``--predict-split`` and writes it in the CLUE format; the number written."""
    from gau_keras.data.clue import write_predictions

    test = load_split(args.task_name, args.predict_split, args.data_dir, args.max_test_examples)
    features = encode(task, test, training=False)
    predictions = predict(task, model, test, features, args.batch_size, args.predict_split)
    write_predictions(args.task_name, [(e.id, task.submission(e, p)) for e, p in zip(test, predictions)],
                      path, overwrite=args.overwrite)
    print(f"wrote {len(test)} predictions to {path}")
    return len(test)


def train_and_predict(task_cls, args):
    """The whole run for parsed ``args``; returns the metrics record (also written to <task>_metrics.json)."""
    check_arguments(args)
    check_out_dir(args.out_dir)
    lock = lock_out_dir(args.out_dir)
    try:
        return _train_and_predict(task_cls, args)
    finally:
        lock.release()


def _train_and_predict(task_cls, args):
    import keras

    paths = output_paths(args.out_dir, args.task_name)
    check_outputs(paths, args.overwrite)
    predicting = check_predict_split(args)
    from gau_keras.pretrained import default_model_dir

    args.model_dir = args.model_dir or default_model_dir()     # recorded in the metrics file
    keras.utils.set_random_seed(args.seed)
    started = time.time()
    train = load_split(args.task_name, "train", args.data_dir, args.max_train_examples, seed=args.seed)
    dev = load_split(args.task_name, "dev", args.data_dir, args.max_eval_examples, seed=DEV_SUBSET_SEED)
    strategy = make_strategy(args.devices)
    with strategy.scope():
        transformer, tokenizer = build_transformer(args, task_cls)
        task = task_cls(args.task_name, tokenizer, args.maxlen, **task_cls.options(args))
        task.dropout_rate = args.dropout
        train_features, dev_features = encode(task, train, training=True), encode(task, dev, training=False)
        left_out = dict(task.left_out)
        if left_out:
            print(f"{args.task_name}: {sum(left_out.values())} of {len(train)} train examples give no training "
                  f"input: " + ", ".join(f"{n} {reason}" for reason, n in sorted(left_out.items())))
        model = task.build_model(transformer)
        batches = PaddedBatches(train_features, args.batch_size, shuffle=True, seed=args.seed)
        model.compile(optimizer=make_optimizer(args.lr, args.weight_decay, len(batches) * args.epochs),
                      loss=task.loss(), jit_compile=use_xla(args.xla))
    paths["weights"].parent.mkdir(parents=True, exist_ok=True)
    record = {"task": args.task_name, "module": task_module(task_cls)[0], "metric": task.metric,
              "args": dict(vars(args)), "train_examples": len(train), "train_features": len(train_features),
              "train_left_out": left_out, "dev_examples": len(dev), "replicas": strategy.num_replicas_in_sync,
              "xla": bool(model.jit_compile), "epochs": [], "best": None}

    def evaluate(trained):
        return task.score(dev, predict(task, trained, dev, dev_features, args.batch_size, "dev"))

    def on_record(callback):
        record.update(epochs=callback.history, best=callback.best, seconds=round(time.time() - started, 1))
        _write_json(paths["metrics"], record)

    TqdmProgress, DevEvaluation = _callbacks()
    dev_eval = DevEvaluation(evaluate, task.metric, str(paths["weights"]), on_record)
    if args.epochs:
        model.fit(batches.tf_dataset(), epochs=args.epochs, verbose=0, shuffle=False,
                  callbacks=[TqdmProgress(len(batches), args.epochs), dev_eval])
        model.load_weights(str(paths["weights"]))
    else:   # evaluate (and save) the starting point only
        dev_eval.set_model(model)
        dev_eval.on_epoch_end(-1)
    # the whole model (head, custom layers, optimizer): reloads after `import gau_keras` alone
    _save_atomically(model.save, paths["model"])
    record["model"] = str(paths["model"])
    written = write_test_predictions(task, model, args, paths["predictions"]) if predicting else 0
    if written:
        record.update(predictions=str(paths["predictions"]), predicted_examples=written)
    record.update(seconds=round(time.time() - started, 1), finished=True)
    _write_json(paths["metrics"], record)
    return record


def run(task_cls, argv=None):
    """Command-line entry of a task module; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser(task_cls).parse_args(argv)
    if args.devices > 1:
        try:   # before anything starts TensorFlow's runtime
            make_strategy(args.devices)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    try:
        record = train_and_predict(task_cls, args)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    best = record["best"]
    print(f"{args.task_name}: best dev {record['metric']}={best[record['metric']]:.4f} at epoch {best['epoch']}")
    return 0
