"""The shared fine-tuning runner behind ``gau-keras finetune TASK`` and ``python -m finetune TASK``.

    gau-keras finetune tnews --data-dir ../shared/data/clue --out-dir runs/tnews

    from gau_keras.training.finetune.runner import Options, train_and_predict
    record = train_and_predict(Options.for_task("tnews", data_dir="../shared/data/clue", epochs=1))

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
output is never replaced unless ``overwrite`` is set, or its metrics file
says its run did not finish (an interrupted run, whose outputs are replaced
with a message saying so). ``out_dir`` is locked (``.lock``, as a pretraining
run directory; removed when the run ends) for the whole run: a second run on
it is refused, naming the first. Lock and atomic writes:
`gau_keras.training.run_dir`. The output folder, the data, ``predict_split`` and
``maxlen`` (against a learned position table) are checked before any training. Exit
status of the command: 0 on success, 2 on a usage or data error.

The options of a run are one dataclass, `Options`: its fields are the
command line's flags, each checked by one rule (``gau_keras.flags``), which is
the flag's argparse type on the command line and `Options`' check for a
library caller (a ValueError naming the field).
"""
import argparse
import dataclasses
import json
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from gau_keras import cli_env, flags
from gau_keras.training.finetune import tasks
from gau_keras.training.finetune.batching import PaddedBatches

#: the dev subset of --max-eval-examples does not depend on --seed, so runs compare on the same examples
DEV_SUBSET_SEED = 0
#: the options a task's registry row sets the default of (`gau_keras.data.clue.TaskSpec.defaults`)
TASK_DEFAULTS = ("epochs", "batch_size", "maxlen", "lr")
XLA_CHOICES = ("auto", "on", "off")
#: how errors name the output folder (`Options.out_dir`)
OUT_DIR_FLAG = "--out-dir"


def _option(default, check=None, help=None, flag=True):
    """A field of `Options`: ``check`` is a ``gau_keras.flags`` type (the flag's type, and the
    rule `Options` applies to a value); ``flag=False``: not a command-line flag of its own."""
    return field(default=default, metadata={"check": check, "help": help, "flag": flag})


@dataclass
class Options:
    """The options of one fine-tuning run. Every field but ``task_name`` and ``head_options``
    is the command-line flag of its name (``max_train_examples``: ``--max-train-examples``).

    task_name: the task whose files, labels and outputs the run uses (a `gau_keras.data.clue.TASKS` name).
    head_options: keywords of the task class's own options (e.g. cmrc2018's ``doc_stride``).
    """
    task_name: str = field(metadata={"flag": False})
    data_dir: str = field(metadata={"help": "folder holding the task's folder (e.g. ../shared/data/clue or the "
                                            "CLUE download folder) or the task's {train,dev,test}.json themselves"})
    model_dir: Optional[str] = _option(None, help="bert_config.json + bert_model.ckpt.* + vocab.txt "
                                                  "(default: the bundled GAU-alpha)")
    model: str = _option("gau_alpha", flag=False)       # flags.add_model_option: the builder's registry
    from_scratch: bool = _option(False, help="random initialisation with the model's config (baseline runs)")
    out_dir: str = _option("finetune_outputs")
    overwrite: bool = _option(False, help="replace existing outputs")
    epochs: int = _option(3, flags.non_negative_int)
    batch_size: int = _option(16, flags.positive_int)
    maxlen: int = _option(128, flags.at_least(8))
    lr: float = _option(5e-5, flags.positive_float)
    weight_decay: float = _option(0.01, flags.non_negative_float)
    seed: int = _option(42, int)
    max_train_examples: Optional[int] = _option(None, flags.positive_int,
                                                "train on a random subset of this size (seeded)")
    max_eval_examples: Optional[int] = _option(None, flags.positive_int,
                                               "evaluate on a random subset of N dev examples (the same subset "
                                               "for every --seed: dev files may be sorted by label)")
    max_test_examples: Optional[int] = _option(None, flags.positive_int,
                                               "predict only the first N test examples (smoke runs; not a valid "
                                               "submission)")
    predict_split: Optional[str] = _option(None, help="the unlabelled split to write predictions for "
                                                      "(default: test, when the data has one)")
    dropout: float = _option(0.1, flags.rate_below_one, "dropout of the task head (default: %(default)s)")
    devices: int = _option(1, flags.positive_int,
                           "train on this many devices: MirroredStrategy over GPUs when there are enough, else "
                           "logical CPU devices; on JAX keras.distribution.DataParallel over its devices "
                           "(default: 1, no strategy)")
    xla: str = _option("auto", help="jit-compile the train step; auto: on for GPU/TPU, off on CPU (default: auto)")
    head_options: dict = field(default_factory=dict, metadata={"flag": False})

    def __post_init__(self):
        from gau_keras.models.registry import MODELS, model_names

        self.task_name = tasks.spec_of(self.task_name).name
        for option in dataclasses.fields(self):
            check, value = option.metadata.get("check"), getattr(self, option.name)
            if check is not None and value is not None:
                flags.check_value(option.name, value, check)
        if str(self.model).lower() not in MODELS:
            raise ValueError(f"model must be one of {', '.join(model_names(segment_ids=True))}, got {self.model!r}")
        if not MODELS[str(self.model).lower()].takes_segment_ids:
            raise ValueError(f"model {self.model!r} reads no segment ids, which the CLUE tasks feed: fine-tune one "
                             f"of {', '.join(model_names(segment_ids=True))}")
        if self.xla not in XLA_CHOICES:
            raise ValueError(f"xla must be one of {', '.join(XLA_CHOICES)}, got {self.xla!r}")

    @classmethod
    def for_task(cls, task, **options):
        """The options of a run of ``task`` with its registry defaults, then ``options``."""
        spec = tasks.spec_of(task)
        defaults = {key: spec.defaults[key] for key in TASK_DEFAULTS if key in spec.defaults}
        return cls(task_name=spec.name, **{"dropout": tasks.task_class(task).dropout_rate, **defaults, **options})

    def record(self):
        """The options as the metrics file records them: one flat dict, the head's options included."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "head_options"}
        return {**values, **self.head_options}


def build_parser(task, prog="gau-keras finetune"):
    """The command line of ``task`` (a fine-tuning task's name): `Options`' fields as flags,
    with the task's registry defaults, and its class's own options."""
    spec = tasks.spec_of(task)
    task_cls = tasks.task_class(task)
    parser = argparse.ArgumentParser(prog=f"{prog} {spec.name}", description=spec.about)
    defaults = {**{key: spec.defaults[key] for key in TASK_DEFAULTS if key in spec.defaults},
                "dropout": task_cls.dropout_rate}
    for option in dataclasses.fields(Options):
        if not option.metadata.get("flag", True):
            if option.name == "model":
                flags.add_model_option(parser, help="the encoder the checkpoint is for", segment_ids=True)
            continue
        name = "--" + option.name.replace("_", "-")
        default = defaults.get(option.name, None if option.default is dataclasses.MISSING else option.default)
        kwargs = {"help": option.metadata.get("help")}
        if option.type is bool or option.type == "bool":
            parser.add_argument(name, action="store_true", **kwargs)
        elif option.name == "xla":
            parser.add_argument(name, choices=XLA_CHOICES, default=default, **kwargs)
        else:
            check = option.metadata.get("check")
            parser.add_argument(name, type=check, default=default, required=option.name == "data_dir", **kwargs)
        if option.name == "data_dir":
            parser.add_argument("--task-name", default=spec.name, choices=tasks.same_model(task),
                                help="run these defaults on another task of the same input and head: its files, "
                                     "labels and output names (default: %(default)s)")
    task_cls.add_arguments(parser)
    return parser


def parse_options(task, argv=None, prog="gau-keras finetune"):
    """`Options` from a task's command line (a bad flag: argparse's usage error, status 2)."""
    parser = build_parser(task, prog)
    namespace = vars(parser.parse_args(argv))
    names = {f.name for f in dataclasses.fields(Options)}
    head_options = {key: value for key, value in namespace.items() if key not in names}
    try:
        return Options(**{key: value for key, value in namespace.items() if key in names}, head_options=head_options)
    except ValueError as error:     # a value the flags' types let through but Options refuses
        parser.error(str(error))


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
    from gau_keras.training.run_dir import temporary_path

    for leftover in (pathlib.Path(temporary_path(p)) for p in paths.values()):
        leftover.unlink(missing_ok=True)
    existing = [str(p) for p in paths.values() if p.exists()]
    if not existing or overwrite:
        return
    try:
        finished = json.loads(paths["metrics"].read_text(encoding="utf-8")).get("finished")
    except (OSError, ValueError, AttributeError):
        finished = False
    if finished:
        raise FileExistsError(f"output(s) {', '.join(existing)} already exist; pass --overwrite (Options."
                              f"overwrite=True) to replace them, or give another {OUT_DIR_FLAG}")
    print(f"replacing the outputs of an interrupted run ({', '.join(existing)}): {paths['metrics']} does not "
          f"say that run finished")
    paths["predictions"].unlink(missing_ok=True)   # its writer refuses an existing file unless overwrite is set


def lock_out_dir(out_dir):
    """Creates ``out_dir`` and takes its run lock (`gau_keras.training.run_dir.RunLock`), before any work;
    a folder that cannot be written or is in use is a ValueError (`run_dir.RunDirError`) naming it."""
    from gau_keras.training.run_dir import RunLock

    return RunLock(str(out_dir), option=OUT_DIR_FLAG).acquire()


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


def check_maxlen(args):
    """Before any work: ``maxlen`` against a learned position table (BERT, ALBERT, ELECTRA:
    ``max_position_embeddings`` rows, or its square with ``hierarchical_position``), which a
    longer sequence would read past. Rotary or relative positions (GAU-alpha, RoFormer(V2),
    NEZHA) set no such limit. A ValueError names both numbers and the config file."""
    from gau_keras.models.config import read_config
    from gau_keras.models.presets import model_files
    from gau_keras.models.registry import MODELS

    if not getattr(MODELS[str(args.model).lower()], "absolute_positions", False):
        return
    config_path = model_files(args.model_dir)[0]
    config = read_config(config_path)
    table = config.get("max_position", 512)     # the models' default when the config has none
    limit = table ** 2 if config.get("hierarchical_position") else table
    if args.maxlen > limit:
        raise ValueError(f"--maxlen {args.maxlen} is longer than the {limit} positions model {args.model!r} has "
                         f"(max_position_embeddings={table} in {config_path}): give --maxlen {limit} or less, or "
                         f"fine-tune a model with rotary positions (gau_alpha, roformer_v2)")


def build_transformer(args, task):
    """The builder object of the (pretrained or randomly initialised) model, and its tokenizer."""
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.models.presets import REQUIRED_TOKENS, check_model_dir
    from gau_keras.models.registry import MODELS
    from gau_keras.tokenizers import Tokenizer

    if task.with_mlm and not MODELS[args.model].has_mlm_head:
        raise ValueError(f"{args.task_name} scores candidates with the MLM head, which model {args.model!r} does "
                         f"not have; fine-tune a model with one")
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

    from gau_keras.training.run_dir import save_atomically

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
                save_atomically(self.model.save_weights, self.weights_path)
            self.history.append(record)
            shown = ", ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, float))
            print(f"epoch {epoch + 1}: dev {shown}; best {self.metric}={self.best[self.metric]:.4f} "
                  f"(epoch {self.best['epoch']}){' *' if improved else ''}", flush=True)
            self.on_record(self)

    return TqdmProgress, DevEvaluation


def check_predict_split(args):
    """Before training: whether ``predict_split`` can be predicted. A split
    given on the command line must exist; a missing default ``test`` split
    is said now (no predictions will be written) rather than after training."""
    from gau_keras.data.clue import find_split_files

    if args.predict_split is None:
        args.predict_split = "test"
        try:
            find_split_files(args.task_name, "test", args.data_dir)
        except FileNotFoundError as missing:
            print(f"no predictions will be written: {missing} (predict_split names another split)")
            return False
        return True
    try:
        find_split_files(args.task_name, args.predict_split, args.data_dir)
    except FileNotFoundError as missing:
        raise FileNotFoundError(f"predict_split {args.predict_split}: {missing}") from None
    return True


def write_test_predictions(task, model, args, path):
    """Predicts ``predict_split`` and writes it in the CLUE format; the number written."""
    from gau_keras.data.clue import write_predictions

    test = load_split(args.task_name, args.predict_split, args.data_dir, args.max_test_examples)
    features = encode(task, test, training=False)
    predictions = predict(task, model, test, features, args.batch_size, args.predict_split)
    write_predictions(args.task_name, [(e.id, task.submission(e, p)) for e, p in zip(test, predictions)],
                      path, overwrite=args.overwrite)
    print(f"wrote {len(test)} predictions to {path}")
    return len(test)


def train_and_predict(options):
    """The whole run of `Options` ``options``; returns the metrics record (also written to <task>_metrics.json)."""
    lock = lock_out_dir(options.out_dir)
    try:
        return _train_and_predict(options)
    finally:
        lock.release()


def _train_and_predict(args):
    import keras

    from gau_keras.models.presets import default_model_dir
    from gau_keras.training.run_dir import save_atomically, write_json

    task_cls = tasks.task_class(args.task_name)
    paths = output_paths(args.out_dir, args.task_name)
    check_outputs(paths, args.overwrite)
    predicting = check_predict_split(args)
    args.model_dir = args.model_dir or default_model_dir()     # recorded in the metrics file
    check_maxlen(args)
    keras.utils.set_random_seed(args.seed)
    started = time.time()
    train = load_split(args.task_name, "train", args.data_dir, args.max_train_examples, seed=args.seed)
    dev = load_split(args.task_name, "dev", args.data_dir, args.max_eval_examples, seed=DEV_SUBSET_SEED)
    strategy = make_strategy(args.devices)
    with strategy.scope():
        transformer, tokenizer = build_transformer(args, task_cls)
        task = task_cls(args.task_name, tokenizer, args.maxlen, **args.head_options)
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
    record = {"task": args.task_name, "module": task_cls.__module__, "metric": task.metric,
              "args": args.record(), "train_examples": len(train), "train_features": len(train_features),
              "train_left_out": left_out, "dev_examples": len(dev), "replicas": strategy.num_replicas_in_sync,
              "xla": bool(model.jit_compile), "epochs": [], "best": None}

    def evaluate(trained):
        return task.score(dev, predict(task, trained, dev, dev_features, args.batch_size, "dev"))

    def on_record(callback):
        record.update(epochs=callback.history, best=callback.best, seconds=round(time.time() - started, 1))
        write_json(paths["metrics"], record)

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
    save_atomically(model.save, paths["model"])
    record["model"] = str(paths["model"])
    written = write_test_predictions(task, model, args, paths["predictions"]) if predicting else 0
    if written:
        record.update(predictions=str(paths["predictions"]), predicted_examples=written)
    record.update(seconds=round(time.time() - started, 1), finished=True)
    write_json(paths["metrics"], record)
    return record


def run(task, argv=None, prog="gau-keras finetune"):
    """The command line of the task ``task`` (its name); returns the exit status."""
    cli_env.default_tf_log_level()
    options = parse_options(task, argv, prog)
    if options.devices > 1:
        try:   # before anything starts TensorFlow's runtime
            make_strategy(options.devices)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    try:
        record = train_and_predict(options)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    best = record["best"]
    print(f"{options.task_name}: best dev {record['metric']}={best[record['metric']]:.4f} at epoch {best['epoch']}")
    return 0


def main(argv=None, prog="gau-keras finetune"):
    """``TASK [options]``: the fine-tuning command line (``gau-keras finetune``, ``python -m finetune``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in tasks.names():
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: {prog} TASK [options]; TASK is one of {', '.join(tasks.names())} "
                  f"({prog} TASK --help lists the options)")
            return 0
        print(f"usage: {prog} TASK [options]; TASK is one of {', '.join(tasks.names())}", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:], prog)
