"""The pretraining loop on either Keras backend: model, optimizer, data,
logging, evaluation, export.

A plain custom loop rather than ``model.fit``, because resuming must restore
the data iterator exactly, and the MLM loss/accuracy only count masked
positions. What depends on the backend (devices, the compiled step, the
checkpoints) lives in ``tf_backend`` (tf.distribute, tf.function,
tf.train checkpoints) and ``jax_backend`` (keras.distribution,
jax.jit, orbax checkpoints); the run directory's lock, checkpoint discovery
and log continuity in ``gau_keras.training.run_dir``.

Design notes: docs/pretraining.md.
"""

import contextlib
import importlib
import json
import logging
import os
import signal
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from keras import ops
from tqdm import tqdm

from gau_keras.data import tfrecord
from gau_keras.data.mlm import random_token_ids
from gau_keras.errors import CheckpointError, ConfigError, DataFileError, DeviceError
from gau_keras.layers.heads import GatherPositions
from gau_keras.losses import masked_lm_sums, masked_positions
from gau_keras.models.builder import build_transformer_model
from gau_keras.models.config import read_config
from gau_keras.optimizers import LAMB, PiecewiseLinearDecay
from gau_keras.tokenizers import Tokenizer, load_vocab
from gau_keras.training import run_dir
from gau_keras.training.pretrain import config as config_lib

logger = logging.getLogger("pretrain")

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")


#: the module of each Keras backend that pretraining runs on
BACKENDS = {"tensorflow": "gau_keras.training.pretrain.tf_backend", "jax": "gau_keras.training.pretrain.jax_backend"}


def backend():
    """The module of Keras's backend: ``choose_devices``, ``resolve_xla``, ``TrainingState``."""
    name = keras.backend.backend()
    if name not in BACKENDS:
        raise DeviceError(f"pretraining runs on the TensorFlow and JAX backends, not KERAS_BACKEND={name}")
    return importlib.import_module(BACKENDS[name])


def start_processes(
    coordinator=None, num_processes=None, process_id=None, timeout=300, heartbeat_timeout=100, tpu=None
):
    """Joins a run of several JAX processes (``jax_backend.start_processes``; with
    ``tpu``, the hosts of a TPU slice); under TensorFlow its flags are an error
    (TF_CONFIG names the workers there, ``tpu`` is TPUStrategy's: ``choose_devices``).
    Returns the number of processes."""
    if keras.backend.backend() == "jax":
        return backend().start_processes(coordinator, num_processes, process_id, timeout, heartbeat_timeout, tpu)
    if (coordinator, num_processes, process_id) != (None, None, None):
        raise DeviceError(
            "--coordinator / --num-processes / --process-id start several JAX processes; under "
            "KERAS_BACKEND=tensorflow a multi-worker run takes its workers from TF_CONFIG"
        )
    return 1


def stop_with_the_run(output_dir):
    """Around a run's training: on JAX with several processes, a process of
    the run lost stops this one with a one-line error (``jax_backend.stop_with_the_run``)."""
    if keras.backend.backend() == "jax":
        return backend().stop_with_the_run(output_dir)
    return contextlib.nullcontext()


def choose_devices(tpu=None, devices=None):
    """The devices of a run (``--tpu``, ``--devices N``): see the backends' ``choose_devices``."""
    return backend().choose_devices(tpu, devices)


def tf_config_workers():
    """The number of workers TF_CONFIG names (0 when it is not set)."""
    return len(json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", []))


def training_dataset(config, tokenizer, pattern, repeat, dynamic_mask=None, replicas=1, shard=(1, 0)):
    """The batches of ``config``'s data settings from the shards at ``pattern``;
    bad settings or shards are errors naming the config (``config_path``).

    ``shard=(n, i)``: process i's rows of each global batch, [batch_size / n, L]:
    the pipeline's examples are batched by batch_size / n and process i takes
    every n-th of those batches from the i-th, so the n processes' rows,
    concatenated in process order, are the one-process global batch.
    """
    data = config["data"]
    batch = data["batch_size"]
    if batch % replicas:
        raise ConfigError(f"data.batch_size={batch} is not divisible by the {replicas} replicas")
    processes, index = shard
    try:
        dataset = tfrecord.load_dataset(
            pattern,
            batch // processes,
            maxlen=data["maxlen"],
            dynamic_mask=dynamic_mask,
            shuffle=repeat,
            shuffle_buffer=data["shuffle_buffer"],
            seed=data["seed"],
            repeat=repeat,
            drop_remainder=True,
            mask_token_id=tokenizer.token_mask_id,
            random_token_ids=random_token_ids(tokenizer.token_dict),
            char_mask_fraction=data["char_mask_fraction"] if repeat else 0.0,  # held-out masks stay as stored
            pair_segments=data["pair_segments"],
            sep_token_id=tokenizer.token_sep_id,
            vocab=config["vocab"],
        )
    except (FileNotFoundError, ValueError) as e:
        raise DataFileError(f"{config['config_path']}: {e}") from None
    return dataset if processes == 1 else dataset.shard(processes, index)


def check_data(config):
    """Fails now, naming the config, if its data settings do not fit its shards
    (data.train, and data.eval when set: a pattern matching nothing would
    otherwise be found at the first evaluation)."""
    tokenizer = Tokenizer(load_vocab(config["vocab"]), do_lower_case=True)
    training_dataset(
        config, tokenizer, config["data"]["train"], repeat=True, dynamic_mask=config["data"]["dynamic_mask"]
    )
    if config["data"]["eval"]:
        training_dataset(config, tokenizer, config["data"]["eval"], repeat=False)


def lock_run_dir(output_dir):
    """The acquired ``run_dir.RunLock`` of ``output_dir``; a folder that cannot be used
    (not writable, in use, a ``.lock`` that is not a lock file) is a `RunDirError`."""
    return run_dir.RunLock(output_dir).acquire()


def default_precision(kind, replicas):
    """bfloat16 on TPU, float16 (with loss scaling) on several GPUs, else float32."""
    if kind == "tpu":
        return "mixed_bfloat16"
    if kind == "gpu" and replicas > 1:
        return "mixed_float16"
    return "float32"


def default_xla(kind):
    """XLA where it is faster: TPU and GPU. On CPU it made the tiny configs'
    update several times slower (benchmarks/pretrain_throughput.py)."""
    return kind in ("tpu", "gpu")


@contextlib.contextmanager
def _global_policy(name):
    """Keras's global dtype policy set to ``name`` while the model is built
    (layers keep the policy they were built with), then restored."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


class Trainer:
    """One pretraining run of ``config`` (see ``gau_keras.training.pretrain.config``).

    Args:
        tpu: TPU name/address (TensorFlow's TPUStrategy).
        xla: compile the step with XLA; None = the config's ``train.xla``,
            whose default (null) is ``default_xla`` of the device (on JAX the
            step is always compiled).
        restart: move an earlier run's checkpoints and log aside and start
            from update 0 (otherwise an earlier run is resumed, and a run
            directory whose checkpoints all fail to restore is an error).
        devices: the devices of ``choose_devices``, to share them between the
            Trainers of one process, or the number of this host's devices to
            train on (``--devices N``), or None: the backend's choice (all of
            JAX's local devices; TensorFlow's strategy of ``choose_strategy``).
        lock: the run directory's ``run_dir.RunLock``, held by the caller
            across several Trainers (else taken here and released by ``close``).
    """

    def __init__(self, config, tpu=None, xla=None, restart=False, devices=None, lock=None):
        self.config = config
        self.output_dir = config["train"]["output_dir"]
        self.backend = backend()
        self.devices = devices if hasattr(devices, "scope") else self.backend.choose_devices(tpu, devices)
        self.is_chief = self.devices.is_chief
        self.device_kind = self.devices.kind
        self.xla = self.backend.resolve_xla(xla, config["train"]["xla"], self.device_kind)
        self.precision = self._choose_precision()
        self.loss_scaling = self.precision == "mixed_float16"
        self._owns_lock = lock is None
        self.lock = lock if lock is not None else (lock_run_dir(self.output_dir) if self.is_chief else None)
        self.state = None
        try:
            self._set_up(restart)
        except BaseException:
            self.close()
            raise

    def _set_up(self, restart):
        config = self.config
        if restart and self.is_chief:
            moved = run_dir.move_previous_run(self.output_dir)
            if moved:
                print(f"--restart: moved the earlier run to {moved}")
        keras.utils.set_random_seed(config["train"]["seed"])
        self.token_dict = load_vocab(config["vocab"])
        self.tokenizer = Tokenizer(self.token_dict, do_lower_case=True)
        self.model_config = self._model_config()
        data = config["data"]
        self.max_predictions = min(data["max_predictions"] or -(-data["maxlen"] // 4), data["maxlen"])
        with self.devices.scope(), _global_policy(self.precision):
            self.transformer = build_transformer_model(
                self.model_config, model=config["model"], with_mlm="linear", return_keras_model=False
            )
            self.model = self.transformer.model
            self.input_names = [x.name for x in self.model.inputs]
            self.train_model = self._training_model()
            self.optimizer = self._optimizer()
            self.optimizer.build(self.model.trainable_variables)
        # Every worker runs the same pipeline of global batches (a plain, checkpointable
        # iterator) and hands each of its devices its rows: the run sees the batches one
        # device would, whatever the number of devices, and resumes exactly. Several JAX
        # processes each read only their rows of those batches (``training_dataset``'s shard).
        self.dataset = self._dataset(data["train"], repeat=True, dynamic_mask=data["dynamic_mask"], shard=True)
        self.iterator = iter(self.dataset)
        self.state = self.backend.TrainingState(self)
        self._restore_or_initialise()
        self._micro = self.state.micro_step
        self._window = None
        self._stop_signal = None
        self.stopped_early = False

    # ----------------------------------------------------------- set-up
    def _choose_precision(self):
        precision = self.config["train"]["precision"]
        if precision not in PRECISIONS:
            raise ConfigError(
                f"{self.config['config_path']}: train.precision must be one of {PRECISIONS}, got {precision!r}"
            )
        if precision == "auto":
            return default_precision(self.device_kind, self.devices.replicas)
        return precision

    def _model_config(self):
        """The run's bert_config.json keys, validated by the reader
        ``build_transformer_model`` uses (errors name the key and the file)."""
        where = self.config["model_config_path"] or self.config["config_path"]
        raw = config_lib.model_config(self.config)
        configs = read_config(raw, where=where)
        if configs.get("vocab_size") != len(self.token_dict):
            raise ConfigError(
                f"{where}: model vocab_size={configs.get('vocab_size')} "
                f"but vocab {self.config['vocab']!r} has {len(self.token_dict)} tokens"
            )
        return raw

    def _training_model(self):
        """The model the step trains: [inputs..., positions [B, k]] -> MLM
        logits [B, k, V] at the first k = ``max_predictions`` masked positions
        of each sequence (the vocab projection dominates, so the tied head runs
        on those only); a model without a separate head (SRU++): the model
        itself, logits at every position."""
        if not hasattr(self.transformer, "mlm_logits"):
            return self.model
        positions = keras.Input((self.max_predictions,), dtype="int32", name="MLM-Positions")
        hidden = GatherPositions(name="MLM-Gather")([self.transformer.encoder_output, positions])
        logits = self.transformer.mlm_logits(hidden, training=None)
        return keras.Model([*self.model.inputs, positions], logits, name="mlm_training")

    def _optimizer(self):
        opt = dict(self.config["optimizer"])
        schedule = PiecewiseLinearDecay(opt.pop("learning_rate"), opt.pop("schedule"))
        if (opt.get("gradient_accumulation_steps") or 1) < 2:  # Keras wants None for "no accumulation"
            opt["gradient_accumulation_steps"] = None
        optimizer = LAMB(learning_rate=schedule, **opt)
        if self.loss_scaling:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        return optimizer

    def _dataset(self, pattern, repeat, dynamic_mask=None, shard=False):
        """The global batches at ``pattern``, or this process's rows of them (``shard``)."""
        processes = getattr(self.devices, "processes", 1)  # several only on JAX (TensorFlow splits batches itself)
        where = (processes, self.devices.process_index) if shard and processes > 1 else (1, 0)
        return training_dataset(
            self.config, self.tokenizer, pattern, repeat, dynamic_mask, self.devices.replicas, shard=where
        )

    def _restore_or_initialise(self):
        restored = self.state.restore()
        if restored:
            print(f"resumed from {restored}: update {self.updates()} (micro-step {self.state.micro_step})")
        elif self.config["train"]["init_checkpoint"]:
            path = self.config["train"]["init_checkpoint"]
            try:
                n = self.transformer.load_weights_from_checkpoint(path)
            except CheckpointError as e:  # another size or another model: a one-line error
                raise CheckpointError(
                    f"train.init_checkpoint {path} does not fit the {self.config['model']} "
                    f"model of {self.config['config_path']}: {e}"
                ) from None
            print(f"initialised {n} weights from {path}")
        if self.is_chief:
            dropped = run_dir.continue_log(os.path.join(self.output_dir, "log.jsonl"), self.updates())
            if dropped:
                print(
                    f"log.jsonl: removed {dropped} record(s) after update {self.updates()} "
                    f"(those updates are run again)"
                )

    def accumulation(self):
        return self.config["optimizer"]["gradient_accumulation_steps"] or 1

    def updates(self):
        return self.state.micro_step // self.accumulation()

    # ----------------------------------------------------------- stepping
    def mlm_batch(self, inputs, labels):
        """A batch as the training model's inputs and the labels of its output
        positions: ``({name: [B, L]}, labels [B, L])`` -> ``([inputs...,
        positions [B, k]], labels [B, k])`` (without positions for SRU++:
        labels [B, L]). Backend-neutral (keras.ops), traced into each step."""
        x = [inputs[name] for name in self.input_names]
        if self.train_model is self.model:
            return x, labels
        positions, kept = masked_positions(labels, self.max_predictions)
        return [*x, positions], kept

    @staticmethod
    def mlm_sums(labels, logits, all_labels):
        """(summed loss, correct, counted, all masked tokens) of a batch: float32 scalars."""
        return (*masked_lm_sums(labels, logits), ops.sum(ops.cast(ops.greater(all_labels, 0), "float32")))

    def train_step(self, batch):
        """One micro-step; returns the batch's summed (loss, correct, counted,
        all masked) scalars, as the backend's tensors."""
        result = self.state.step(batch)
        self._micro += 1
        return result

    def wait(self):
        """Blocks until the updates dispatched so far have run."""
        self.state.block()

    def advance(self):
        """Runs the micro-steps of one optimizer update and its bookkeeping
        (log, evaluation, checkpoint on their schedules); returns the update number."""
        while True:
            sums = self.train_step(self._next_batch())
            self._window = sums if self._window is None else [a + b for a, b in zip(self._window, sums)]
            if self._micro % self.accumulation() == 0:
                break
        train = self.config["train"]
        update = self._micro // self.accumulation()
        if update % train["log_every"] == 0 or update == train["steps"]:
            self._last_record = self._log(update, [float(x) for x in self._window])
            self._window = None
        if (
            train["eval_every"]
            and (update % train["eval_every"] == 0 or update == train["steps"])
            and self.config["data"]["eval"]
            and (self.is_chief or getattr(self.devices, "processes", 1) > 1)  # JAX: every process takes part
        ):
            self._log_eval(update)
        if update % train["save_every"] == 0:
            self.save(update)
        return update

    def _next_batch(self):
        try:
            return next(self.iterator)
        except tf.errors.DataLossError as e:  # a record damaged past the start of its shard
            raise DataFileError(
                f"{self.config['config_path']}: a shard of data.train "
                f"{self.config['data']['train']!r} is damaged ({str(e).strip().splitlines()[0]}); "
                f"prepare the shards again"
            ) from None

    def save(self, update):
        """Writes the checkpoint of ``update``. When the disk is full: a
        one-line error naming the folder, the half-written checkpoint
        removed, the previous checkpoints kept."""
        self.state.save(update)

    # ----------------------------------------------------------- loop
    @contextlib.contextmanager
    def _stop_on_signals(self):
        """SIGINT/SIGTERM end the loop after the current update, which is then
        checkpointed, so a polite kill loses nothing (SIGKILL loses the
        updates since the last ``save_every`` checkpoint)."""
        self._stop_signal = None
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            self._stop_signal = signum

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)

    def train(self, max_minutes=None, until=None):
        """Trains to ``train.steps`` updates (or to update ``until``, or for
        ``max_minutes``), then checkpoints; exports when update ``train.steps``
        is done. ``stopped_early`` then says whether time or a signal ended it."""
        try:
            with self._stop_on_signals(), stop_with_the_run(self.output_dir):  # before close(): it would wait for them
                self._train(max_minutes, until)
        finally:
            self.close()

    def close(self):
        """Finishes the backend's checkpoint writer and releases the run
        directory's lock (unless the caller holds it)."""
        if self.state is not None:
            self.state.close()
        if self.lock is not None and self._owns_lock:
            self.lock.release()
        self.lock = None

    def _open_logs(self):
        if self.is_chief:
            tf.io.gfile.makedirs(self.output_dir)
        self._writer = (
            tf.summary.create_file_writer(os.path.join(self.output_dir, "logs"))
            if self.is_chief
            else tf.summary.create_noop_writer()
        )
        self._start = time.time()

    def _train(self, max_minutes, until):
        total = self.config["train"]["steps"]
        end = total if until is None else min(until, total)
        self._open_logs()
        if self.updates() >= total and self.is_chief:
            print(
                f"{self.output_dir} already holds a finished run (update {self.updates()} of train.steps={total})"
                f": nothing to train; pass --restart to move it aside and start again from update 0, or a larger "
                f"--steps to train further"
            )
        progress = tqdm(
            total=total,
            initial=self.updates(),
            desc="pretrain",
            unit="update",
            dynamic_ncols=True,
            mininterval=2.0,
            disable=not self.is_chief,
        )
        self._last_record = None
        while self._micro // self.accumulation() < end:
            update = self.advance()
            progress.update(1)
            if self._last_record is not None and self._last_record["update"] == update:
                progress.set_postfix(
                    loss=f"{self._last_record['loss']:.3f}", acc=f"{self._last_record['masked_accuracy']:.3f}"
                )
            if max_minutes is not None and time.time() - self._start > 60 * max_minutes:
                print(f"\nthe time limit is spent: saving update {update} and stopping")
                self.stopped_early = True
                break
            if self._stop_signal is not None:
                print(f"\nsignal {self._stop_signal}: saving update {update} and stopping")
                self.stopped_early = True
                break
        progress.close()
        self.stopped_early = self.stopped_early or self._stop_signal is not None  # a signal during the last update
        self.save(self.updates())
        if self.updates() >= total and self.is_chief:
            print(f"exported to {self.export()}")

    def _append_log(self, record):
        if not self.is_chief:
            return
        with tf.io.gfile.GFile(os.path.join(self.output_dir, "log.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def _log(self, update, window):
        loss_sum, correct, n, all_masked = window
        self.state.sync()  # the optimizer's step and loss scale, read below
        lr = float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))
        record = {
            "update": update,
            "loss": loss_sum / max(n, 1),
            "masked_accuracy": correct / max(n, 1),
            "learning_rate": lr,
            "masked_tokens": int(n),
            "beyond_max_predictions": round(1 - n / max(all_masked, 1), 4),
            "elapsed_s": round(time.time() - self._start, 1),
        }
        if self.loss_scaling:
            record["loss_scale"] = float(keras.ops.convert_to_numpy(self.optimizer.scale_loss(1.0)))
        with self._writer.as_default(step=update):
            for key in ("loss", "masked_accuracy", "learning_rate"):
                tf.summary.scalar(key, record[key])
        self._append_log(record)
        return record

    # ----------------------------------------------------------- evaluation
    def evaluate(self, batches=None):
        """Masked-token loss/accuracy on ``data.eval`` and the majority baseline,
        over ``batches`` batches (default ``train.eval_batches``; 0 = all)."""
        dataset = self._dataset(self.config["data"]["eval"], repeat=False)
        batches = self.config["train"]["eval_batches"] if batches is None else batches
        if batches:
            dataset = dataset.take(batches)
        sums, counts = np.zeros(3), {}
        self.state.sync()
        for inputs, labels in dataset:
            sums += [float(x) for x in self.state.eval_sums(inputs, labels)]  # every masked position counts here
            ids, freq = np.unique(labels.numpy()[labels.numpy() > 0], return_counts=True)
            for i, c in zip(ids, freq):
                counts[i] = counts.get(i, 0) + c
        n = max(sums[2], 1)
        baseline = max(counts.values()) / n if counts else 0.0
        return {
            "eval_loss": sums[0] / n,
            "eval_masked_accuracy": sums[1] / n,
            "majority_baseline_accuracy": baseline,
            "eval_masked_tokens": int(sums[2]),
        }

    def log_evaluation(self, update=None, batches=None):
        """Evaluates, appends the record to log.jsonl and TensorBoard, prints it."""
        self._open_logs()
        self._log_eval(self.updates() if update is None else update, batches)

    def _log_eval(self, update, batches=None):
        record = {"update": update, **self.evaluate(batches)}
        with self._writer.as_default(step=update):
            for key in ("eval_loss", "eval_masked_accuracy", "majority_baseline_accuracy"):
                tf.summary.scalar(key, record[key])
        self._append_log(record)
        if not self.is_chief:
            return
        print(
            f"\n[eval] update {update}: " + ", ".join(f"{k}={v:.4f}" for k, v in record.items() if isinstance(v, float))
        )

    # ----------------------------------------------------------- export
    def export(self, directory=None):
        """bert_config.json + bert_model.ckpt.* + vocab.txt in the original format.

        Written into ``<directory>.partial`` first, then each file moved into
        ``directory`` (the checkpoint's .index last), so an interrupted export
        never leaves a truncated file there."""
        directory = directory or os.path.join(self.output_dir, "export")
        self.state.sync()
        partial = directory.rstrip("/") + ".partial"
        if tf.io.gfile.exists(partial):
            tf.io.gfile.rmtree(partial)
        tf.io.gfile.makedirs(partial)
        self.transformer.save_weights_as_checkpoint(os.path.join(partial, "bert_model.ckpt"))
        with tf.io.gfile.GFile(os.path.join(partial, "bert_config.json"), "w") as f:
            json.dump(config_lib.model_config(self.config), f, indent=2, ensure_ascii=False)
        tf.io.gfile.copy(self.config["vocab"], os.path.join(partial, "vocab.txt"), overwrite=True)
        tf.io.gfile.makedirs(directory)
        for name in sorted(tf.io.gfile.listdir(partial), key=lambda n: n.endswith(".index")):
            tf.io.gfile.rename(os.path.join(partial, name), os.path.join(directory, name), overwrite=True)
        tf.io.gfile.rmtree(partial)
        return directory
