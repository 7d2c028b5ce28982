"""The training of a fine-tuning run: data, model, ``model.fit`` with the dev evaluation after
each epoch (`gau_keras.training.finetune.callbacks`), then the best weights' artefacts and
test predictions (`train_and_predict`). The callbacks and the run directory's writers
(which import TensorFlow) are imported where they are used."""

import contextlib
import functools
import hashlib
import sys
import tempfile
import time

import numpy as np

from gau_keras.training.finetune import tasks
from gau_keras.training.finetune.batching import PaddedBatches
from gau_keras.training.finetune.out_dir import check_outputs, lock_out_dir, output_paths

#: the dev subset of --max-eval-examples does not depend on --seed, so runs compare on the same examples
DEV_SUBSET_SEED = 0


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


def predict(task, model, examples, features, batch_size, desc="predict", strategy=None):
    """One prediction per example: the model's outputs, grouped by example, through ``task.predict``
    (with several JAX processes, every process takes part: `batch_predictor`)."""
    from tqdm import tqdm

    batches = PaddedBatches(features, batch_size, with_labels=False)
    outputs = [[] for _ in examples]
    predict_on_batch = batch_predictor(model, strategy)
    for index in tqdm(range(len(batches)), desc=desc, leave=False, file=sys.stderr):
        result = predict_on_batch(batches[index][0])
        for row, feature_index in enumerate(batches.batch_indices(index)):
            outputs[features[feature_index].example].append(np.asarray(result[row]))
    grouped = [[] for _ in examples]
    for feature in features:
        grouped[feature.example].append(feature)
    return [task.predict(e, f, o) for e, f, o in zip(examples, grouped, outputs)]


def _outputs_of(model, trainable, non_trainable, inputs):
    return model.stateless_call(trainable, non_trainable, inputs, training=False)[0]


@functools.cache
def _forward():
    """``forward(model, trainable, non_trainable, inputs)``: the model's outputs, jit-compiled once
    for each model (a static argument) and input shape."""
    import jax

    return jax.jit(_outputs_of, static_argnums=0)


def batch_predictor(model, strategy=None):
    """``model.predict_on_batch``; on several JAX processes (``strategy`` a
    `gau_keras.distribution.JaxDataParallel` over them) `predict_together` instead.
    Every process must call it on the same batches."""
    if getattr(strategy, "processes", 1) == 1:
        return model.predict_on_batch
    return functools.partial(predict_together, model, strategy)


def predict_together(model, strategy, inputs):
    """The outputs of ``model`` for the batch ``inputs`` (numpy [B, ...] each, the same batch on
    every process) by a forward pass over every process's devices, each process feeding its rows
    (the batch padded with zero rows to split over the devices); every process receives them all."""
    import jax
    from jax.experimental import multihost_utils

    rows, devices = len(inputs[0]), strategy.num_replicas_in_sync
    padding = -rows % devices
    inputs = [np.concatenate([x, np.zeros((padding, *x.shape[1:]), x.dtype)]) for x in inputs]
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]
    outputs = _forward()(model, trainable, other, strategy.distribute(inputs))
    return jax.tree.map(lambda y: np.asarray(y)[:rows], multihost_utils.process_allgather(outputs, tiled=True))


def join_processes(args):
    """Joins the run of several JAX processes that ``args`` (``coordinator``, ``num_processes``,
    ``process_id``; or JAX's variables) ask for (`gau_keras.training.processes.start_processes`,
    once per process); returns (processes, this process's index). Under TensorFlow the flags are
    an error: fine-tuning runs on one host there."""
    import keras

    asked = (args.coordinator, args.num_processes, args.process_id)
    if keras.backend.backend() != "jax":
        if asked != (None, None, None):
            raise ValueError(
                "--coordinator / --num-processes / --process-id start several JAX processes; under "
                "KERAS_BACKEND=tensorflow fine-tuning runs on one host"
            )
        return 1, 0
    from gau_keras.training import processes

    count = processes.start_processes(*asked, timeout=args.coordinator_timeout)
    if count == 1:
        return 1, 0
    import jax

    return count, jax.process_index()


#: the options that may differ between the processes of one run: where each writes, how each
#: joins, and the model folder's path (its files are compared instead: `run_identity`)
PER_PROCESS_OPTIONS = (
    "out_dir",
    "overwrite",
    "coordinator",
    "num_processes",
    "process_id",
    "coordinator_timeout",
    "model_dir",
)


def run_identity(options):
    """What every process of a run must agree on: `Options.record` but `PER_PROCESS_OPTIONS`,
    and the model by the SHA-256 of its config, vocabulary and checkpoint index (a folder that
    cannot be read: its error, which `check_run` then reports)."""
    from gau_keras.models.presets import default_model_dir, model_files

    identity = {k: v for k, v in options.record().items() if k not in PER_PROCESS_OPTIONS}
    try:
        config, prefix, vocab = model_files(options.model_dir or default_model_dir())
        identity["model_files"] = [_sha256(path) for path in (config, vocab, prefix + ".index")]
    except (OSError, ValueError) as error:
        identity["model_files"] = str(error)
    return identity


def _sha256(path):
    with open(path, "rb") as f:  # small files: a config, a vocabulary, a checkpoint's index
        return hashlib.sha256(f.read()).hexdigest()


def check_same_run(options):
    """Before any work on several processes: an error on every process naming the processes whose
    `run_identity` differs from process 0's (``gau_keras.training.processes.differing_processes``)."""
    from gau_keras.training import processes

    differ = processes.differing_processes(run_identity(options))
    if differ:
        raise ValueError(
            f"process(es) {differ} fine-tune another run than process 0 (the task, data, model files or "
            f"options such as --lr or --epochs differ); start every process with the same flags and model"
        )


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
    table = config.get("max_position", 512)  # the models' default when the config has none
    limit = table**2 if config.get("hierarchical_position") else table
    if args.maxlen > limit:
        raise ValueError(
            f"--maxlen {args.maxlen} is longer than the {limit} positions model {args.model!r} has "
            f"(max_position_embeddings={table} in {config_path}): give --maxlen {limit} or less, or "
            f"fine-tune a model with rotary positions (gau_alpha, roformer_v2)"
        )


def build_transformer(args, task):
    """The builder object of the (pretrained or randomly initialised) model, and its tokenizer."""
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.models.presets import REQUIRED_TOKENS, check_model_dir
    from gau_keras.models.registry import MODELS
    from gau_keras.tokenizers import Tokenizer

    if task.with_mlm and not MODELS[args.model].has_mlm_head:
        raise ValueError(
            f"{args.task_name} scores candidates with the MLM head, which model {args.model!r} does "
            f"not have; fine-tune a model with one"
        )
    required = REQUIRED_TOKENS + (("[MASK]",) if task.with_mlm else ())
    config, checkpoint, vocab = check_model_dir(args.model_dir, required)
    kwargs = {"with_mlm": "linear"} if task.with_mlm else {}
    transformer = build_transformer_model(
        config, None if args.from_scratch else checkpoint, model=args.model, return_keras_model=False, **kwargs
    )
    return transformer, Tokenizer(vocab, do_lower_case=True)


def use_xla(choice):
    """``--xla``: auto is on for GPU/TPU and off on CPU (benchmarks/pretrain_throughput.py:
    with the bundled model on CPU, XLA made the steps slower and compiling every new
    batch length made the first pass over the batches 2.6x longer)."""
    if choice != "auto":
        return choice == "on"
    import keras

    if keras.backend.backend() == "jax":
        return True  # JAX compiles every step (jit_compile=False would run it op by op)
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


def write_test_predictions(task, model, args, path, strategy=None, write=True):
    """Predicts ``predict_split`` and writes it in the CLUE format (unless ``write`` is off: a
    process of several that is not process 0); the number predicted."""
    from gau_keras.data.clue import write_predictions

    test = load_split(args.task_name, args.predict_split, args.data_dir, args.max_test_examples)
    features = encode(task, test, training=False)
    predictions = predict(task, model, test, features, args.batch_size, args.predict_split, strategy)
    if not write:
        return len(test)
    write_predictions(
        args.task_name,
        [(e.id, task.submission(e, p)) for e, p in zip(test, predictions)],
        path,
        overwrite=args.overwrite,
    )
    print(f"wrote {len(test)} predictions to {path}")
    return len(test)


def train_and_predict(options):
    """The whole run of `Options` ``options``; returns the metrics record (also written to
    <task>_metrics.json). On several JAX processes (``options.coordinator`` ...) every process
    runs it, feeding its own rows of each batch; process 0 alone locks and writes ``out_dir``."""
    count, index = join_processes(options)
    if count == 1:
        lock = lock_out_dir(options.out_dir)
        try:
            return _train_and_predict(options)
        finally:
            lock.release()
    from gau_keras.training import processes

    # Every process saves the weights and the model (reading variables is a collective), process 0
    # into out_dir, the others into a folder of their own, removed at the end.
    with contextlib.ExitStack() as stack:
        stack.enter_context(processes.stop_with_the_run(lambda: "to run the fine-tuning again"))
        check_same_run(options)
        if index == 0:
            stack.callback(lock_out_dir(options.out_dir).release)
        scratch = None if index == 0 else stack.enter_context(tempfile.TemporaryDirectory(prefix="gau-keras-"))
        return _train_and_predict(options, (count, index), scratch)


def _train_and_predict(args, shard=(1, 0), scratch=None):
    """The run; with several processes, ``shard`` is (processes, this process's index) and a
    process but 0 (``scratch``: its own folder) writes only its copies of the weights and model."""
    from gau_keras.training.finetune.callbacks import DevEvaluation
    from gau_keras.training.run_dir import write_json

    chief = scratch is None
    paths, predicting = check_run(args, write=chief)
    if not chief:
        paths = {**paths, **{key: output_paths(scratch, args.task_name)[key] for key in ("weights", "model")}}

    started = time.time()
    train = load_split(args.task_name, "train", args.data_dir, args.max_train_examples, seed=args.seed)
    dev = load_split(args.task_name, "dev", args.data_dir, args.max_eval_examples, seed=DEV_SUBSET_SEED)
    strategy = make_strategy(args.devices)
    task, model, batches, train_features, dev_features = build_run(args, strategy, train, dev, shard)
    if chief:
        paths["weights"].parent.mkdir(parents=True, exist_ok=True)
    record = {
        "task": args.task_name,
        "module": type(task).__module__,
        "metric": task.metric,
        "args": args.record(),
        "train_examples": len(train),
        "train_features": len(train_features),
        "train_left_out": dict(task.left_out),
        "dev_examples": len(dev),
        "replicas": strategy.num_replicas_in_sync,
        "processes": shard[0],
        "xla": bool(model.jit_compile),
        "epochs": [],
        "best": None,
    }
    evaluate = functools.partial(evaluate_dev, task, dev, dev_features, args.batch_size, strategy=strategy)
    on_record = functools.partial(record_epochs, record, paths["metrics"], started, write=chief)
    dev_eval = DevEvaluation(evaluate, task.metric, str(paths["weights"]), on_record)
    with strategy.scope() if shard[0] > 1 else contextlib.nullcontext():  # Keras then feeds each process's rows
        fit(model, batches, args.epochs, dev_eval)
    write_artefacts(task, model, args, paths, record, predicting, strategy, write=chief)
    record.update(seconds=round(time.time() - started, 1), finished=True)
    if chief:
        write_json(paths["metrics"], record)
    return record


def check_run(args, write=True):
    """Before any work: the outputs (`check_outputs`; ``write`` off: without removing anything,
    for a process that is not process 0), ``predict_split``, the model folder (recorded in the
    metrics file) and ``maxlen``; seeds Keras. Returns ``(paths, predicting)``."""
    import keras

    from gau_keras.models.presets import default_model_dir

    paths = output_paths(args.out_dir, args.task_name)
    check_outputs(paths, args.overwrite, write=write)
    predicting = check_predict_split(args)
    args.model_dir = args.model_dir or default_model_dir()
    check_maxlen(args)
    keras.utils.set_random_seed(args.seed)
    return paths, predicting


def build_run(args, strategy, train, dev, shard=(1, 0)):
    """Under ``strategy``'s scope: the task with its tokenizer, the features of ``train`` and
    ``dev``, the compiled model (encoder and head), the shuffled train batches (this process's
    rows of each: ``shard``, see `PaddedBatches`). Returns ``(task, model, batches,
    train_features, dev_features)``."""
    task_cls = tasks.task_class(args.task_name)
    with strategy.scope():
        transformer, tokenizer = build_transformer(args, task_cls)
        task = task_cls(args.task_name, tokenizer, args.maxlen, **args.head_options)
        task.dropout_rate = args.dropout
        train_features, dev_features = encode(task, train, training=True), encode(task, dev, training=False)
        left_out = dict(task.left_out)
        if left_out:
            print(
                f"{args.task_name}: {sum(left_out.values())} of {len(train)} train examples give no training "
                f"input: " + ", ".join(f"{n} {reason}" for reason, n in sorted(left_out.items()))
            )
        model = task.build_model(transformer)
        check_batches_split(len(train_features), args.batch_size, shard[0], strategy.num_replicas_in_sync)
        batches = PaddedBatches(train_features, args.batch_size, shuffle=True, seed=args.seed, shard=shard)
        model.compile(
            optimizer=make_optimizer(args.lr, args.weight_decay, len(batches) * args.epochs),
            loss=task.loss(),
            jit_compile=use_xla(args.xla),
        )
    return task, model, batches, train_features, dev_features


def check_batches_split(features, batch_size, processes, replicas):
    """On several processes every train batch's rows must split evenly over all ``replicas``
    devices (a ValueError naming the numbers otherwise): each process feeds its share."""
    if processes == 1:
        return
    last = features % batch_size or batch_size
    if batch_size % replicas or last % replicas:
        raise ValueError(
            f"--batch-size {batch_size}: on {processes} processes every batch's rows split evenly over the "
            f"{replicas} devices, and {features} train features give batches of {batch_size} and {last}; "
            f"choose --batch-size or --max-train-examples so that they split"
        )


def evaluate_dev(task, dev, dev_features, batch_size, model, strategy=None):
    """``task``'s dev scores of ``model`` (`DevEvaluation`'s ``evaluate``)."""
    return task.score(dev, predict(task, model, dev, dev_features, batch_size, "dev", strategy))


def record_epochs(record, path, started, callback, write=True):
    """The metrics ``record`` with the epochs so far, written to ``path`` unless ``write`` is off
    (`DevEvaluation`'s ``on_record``)."""
    from gau_keras.training.run_dir import write_json

    record.update(epochs=callback.history, best=callback.best, seconds=round(time.time() - started, 1))
    if write:
        write_json(path, record)


def fit(model, batches, epochs, dev_eval):
    """``model.fit`` for ``epochs`` with a progress bar and ``dev_eval``, then the best epoch's
    weights loaded back; with 0 epochs the starting point is evaluated (and saved) only."""
    from gau_keras.training.finetune.callbacks import TqdmProgress

    if epochs:
        model.fit(
            batches.tf_dataset(),
            epochs=epochs,
            verbose=0,
            shuffle=False,
            callbacks=[TqdmProgress(len(batches), epochs), dev_eval],
        )
        model.load_weights(dev_eval.weights_path)
    else:
        dev_eval.set_model(model)
        dev_eval.on_epoch_end(-1)


def write_artefacts(task, model, args, paths, record, predicting, strategy=None, write=True):
    """The whole model (head, custom layers, optimizer: reloads after ``import gau_keras`` alone)
    and, when ``predicting``, the test predictions; ``record`` names them. ``write`` off (a process
    of several that is not process 0): the predictions are computed (every process takes part) but
    not written."""
    from gau_keras.training.run_dir import save_atomically

    save_atomically(model.save, paths["model"])
    record["model"] = str(paths["model"])
    written = write_test_predictions(task, model, args, paths["predictions"], strategy, write) if predicting else 0
    if written:
        record.update(predictions=str(paths["predictions"]), predicted_examples=written)
