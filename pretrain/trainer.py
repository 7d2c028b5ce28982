"""The pretraining loop: strategy, model, optimizer, data, checkpoints, export.

A plain custom loop (one ``tf.function`` step run by the strategy) rather
than ``model.fit``, because resuming must restore the data iterator exactly,
and the MLM loss/accuracy only count masked positions. The run directory's
lock, checkpoint discovery and log continuity live in ``pretrain.run_dir``.

Design notes: docs/pretraining.md.
"""
import contextlib
import errno
import json
import logging
import os
import signal
import tempfile
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from gau_keras.checkpoints import CheckpointError
from gau_keras.data import tfrecord
from gau_keras.data.mlm import random_token_ids
from gau_keras.losses import masked_lm_sums, masked_positions
from gau_keras.models.builder import build_transformer_model
from gau_keras.models.config import ConfigError, read_config
from gau_keras.optimizers import LAMB, PiecewiseLinearDecay
from gau_keras.tokenizers import Tokenizer, load_vocab
from pretrain import config as config_lib
from pretrain import run_dir

logger = logging.getLogger("pretrain")

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")


def choose_strategy(tpu=None):
    """(strategy, device kind): TPU if asked; multi-worker with a TF_CONFIG
    of several workers; mirrored with more than one GPU; else the default."""
    if tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver), "tpu"
    # physical devices: listing logical ones would initialise the runtime, after which
    # MultiWorkerMirroredStrategy can no longer configure its collective ops
    gpus = tf.config.list_physical_devices("GPU")
    kind = "gpu" if gpus else "cpu"
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    if len(tf_config.get("cluster", {}).get("worker", [])) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy(), kind
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy(), kind
    return tf.distribute.get_strategy(), kind


def is_chief(strategy):
    """Whether this process writes the run's checkpoints, logs and export."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0
                                             and "chief" not in resolver.cluster_spec().as_dict())


def training_dataset(config, tokenizer, pattern, repeat, dynamic_mask=None, replicas=1):
    """The batches of ``config``'s data settings from the shards at ``pattern``;
    bad settings or shards are errors naming the config (``config_path``)."""
    data = config["data"]
    batch = data["batch_size"]
    if batch % replicas:
        raise SystemExit(f"error: data.batch_size={batch} is not divisible by the {replicas} replicas")
    try:
        return tfrecord.load_dataset(
            pattern, batch, maxlen=data["maxlen"], dynamic_mask=dynamic_mask, shuffle=repeat,
            shuffle_buffer=data["shuffle_buffer"], seed=data["seed"], repeat=repeat, drop_remainder=True,
            mask_token_id=tokenizer.token_mask_id, random_token_ids=random_token_ids(tokenizer.token_dict),
            char_mask_fraction=data["char_mask_fraction"] if repeat else 0.0,   # held-out masks stay as stored
            pair_segments=data["pair_segments"], sep_token_id=tokenizer.token_sep_id, vocab=config["vocab"])
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {config['config_path']}: {e}") from None


def check_data(config):
    """Fails now, naming the config, if its data settings do not fit its shards
    (data.train, and data.eval when set: a pattern matching nothing would
    otherwise be found at the first evaluation)."""
    tokenizer = Tokenizer(load_vocab(config["vocab"]), do_lower_case=True)
    training_dataset(config, tokenizer, config["data"]["train"], repeat=True,
                     dynamic_mask=config["data"]["dynamic_mask"])
    if config["data"]["eval"]:
        training_dataset(config, tokenizer, config["data"]["eval"], repeat=False)


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
    """One pretraining run of ``config`` (see ``pretrain.config``).

    Args:
        tpu: TPU name/address (TPUStrategy).
        xla: compile the step with XLA; None = the config's ``train.xla``,
            whose default (null) is ``default_xla`` of the device.
        restart: move an earlier run's checkpoints and log aside and start
            from update 0 (otherwise an earlier run is resumed, and a run
            directory whose checkpoints all fail to restore is an error).
        strategy: ``(strategy, device kind)`` of ``choose_strategy``, to share
            one between the Trainers of one process (else made here).
        lock: the run directory's ``run_dir.RunLock``, held by the caller
            across several Trainers (else taken here and released by ``close``).
    """

    def __init__(self, config, tpu=None, xla=None, restart=False, strategy=None, lock=None):
        self.config = config
        self.output_dir = config["train"]["output_dir"]
        self.strategy, self.device_kind = strategy if strategy is not None else choose_strategy(tpu)
        self.is_chief = is_chief(self.strategy)
        self.xla = self._choose(xla, config["train"]["xla"], default_xla(self.device_kind))
        self.precision = self._choose_precision()
        self.loss_scaling = self.precision == "mixed_float16"
        self._owns_lock = lock is None
        self.lock = lock if lock is not None else (
            run_dir.RunLock(self.output_dir).acquire() if self.is_chief else None)
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
        with self.strategy.scope(), _global_policy(self.precision):
            self.transformer = build_transformer_model(
                self.model_config, model=config["model"], with_mlm="linear", return_keras_model=False)
            self.model = self.transformer.model
            self.optimizer = self._optimizer()
            self.optimizer.build(self.model.trainable_variables)
            self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_step",
                                          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            # The MLM head runs on at most max_predictions masked positions per
            # sequence instead of all of them (the vocab projection dominates).
            self.encoder = (keras.Model(self.model.inputs, self.transformer.encoder_output)
                            if hasattr(self.transformer, "mlm_logits") else None)
        data = config["data"]
        self.max_predictions = min(data["max_predictions"] or -(-data["maxlen"] // 4), data["maxlen"])
        # Every worker runs the same pipeline of global batches (a plain, checkpointable
        # iterator) and hands each of its replicas its rows (``_distribute``): the run sees
        # the batches one worker would, whatever the number of workers, and resumes exactly.
        self.dataset = self._dataset(data["train"], repeat=True, dynamic_mask=data["dynamic_mask"])
        self.iterator = iter(self.dataset)
        # Dropout's random state lives in Keras SeedGenerators, which tf.train
        # does not track through the model: save it explicitly so a resumed run
        # draws the same masks as an uninterrupted one.
        weights = {id(w) for w in self.model.weights}
        self.seed_states = [v.value for v in self.model.variables if id(v) not in weights]
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                              iterator=self.iterator, micro_step=self.micro_step,
                                              seed_states=self.seed_states)
        self.checkpoint_dir = self._checkpoint_dir()
        self._restore_or_initialise()
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.checkpoint_dir,
                                                  max_to_keep=config["train"]["keep_checkpoints"])
        self._micro = int(self.micro_step.numpy())
        self._step_fn = None
        self._eval_fn = None
        self._window = None
        self._stop_signal = None
        self.stopped_early = False

    # ----------------------------------------------------------- set-up
    @staticmethod
    def _choose(explicit, configured, default):
        if explicit is not None:
            return bool(explicit)
        return default if configured is None else bool(configured)

    def _choose_precision(self):
        precision = self.config["train"]["precision"]
        if precision not in PRECISIONS:
            raise SystemExit(f"error: {self.config['config_path']}: train.precision must be one of "
                             f"{PRECISIONS}, got {precision!r}")
        if precision == "auto":
            return default_precision(self.device_kind, self.strategy.num_replicas_in_sync)
        return precision

    def _checkpoint_dir(self):
        """The chief's checkpoints/; the other workers of a multi-worker run
        must save too (the save is collective) but into a scratch folder."""
        directory = os.path.join(self.output_dir, "checkpoints")
        if self.is_chief:
            return directory
        resolver = self.strategy.cluster_resolver
        return os.path.join(tempfile.gettempdir(), f"gau_keras_worker_{resolver.task_id}_{os.getpid()}")

    def _model_config(self):
        """The run's bert_config.json keys, validated by the reader
        ``build_transformer_model`` uses (errors name the key and the file)."""
        where = self.config["model_config_path"] or self.config["config_path"]
        raw = config_lib.model_config(self.config)
        try:
            configs = read_config(raw, where=where)
        except ConfigError as e:
            raise SystemExit(f"error: {e}") from None
        if configs.get("vocab_size") != len(self.token_dict):
            raise SystemExit(f"error: {where}: model vocab_size={configs.get('vocab_size')} "
                             f"but vocab {self.config['vocab']!r} has {len(self.token_dict)} tokens")
        return raw

    def _optimizer(self):
        opt = dict(self.config["optimizer"])
        schedule = PiecewiseLinearDecay(opt.pop("learning_rate"), opt.pop("schedule"))
        if (opt.get("gradient_accumulation_steps") or 1) < 2:   # Keras wants None for "no accumulation"
            opt["gradient_accumulation_steps"] = None
        optimizer = LAMB(learning_rate=schedule, **opt)
        if self.loss_scaling:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        return optimizer

    def _dataset(self, pattern, repeat, dynamic_mask=None):
        return training_dataset(self.config, self.tokenizer, pattern, repeat, dynamic_mask,
                                self.strategy.num_replicas_in_sync)

    def _restore_or_initialise(self):
        # every worker restores the chief's checkpoints; only the chief repairs the folder
        restored = run_dir.restore_newest(self.checkpoint, os.path.join(self.output_dir, "checkpoints"),
                                          repair=self.is_chief)
        if restored:
            print(f"resumed from {restored}: update {self.updates()} (micro-step {int(self.micro_step.numpy())})")
        elif self.config["train"]["init_checkpoint"]:
            path = self.config["train"]["init_checkpoint"]
            try:
                n = self.transformer.load_weights_from_checkpoint(path)
            except CheckpointError as e:     # another size or another model: a one-line error
                raise SystemExit(f"error: train.init_checkpoint {path} does not fit the {self.config['model']} "
                                 f"model of {self.config['config_path']}: {e}") from None
            print(f"initialised {n} weights from {path}")
        if self.is_chief:
            dropped = run_dir.continue_log(os.path.join(self.output_dir, "log.jsonl"), self.updates())
            if dropped:
                print(f"log.jsonl: removed {dropped} record(s) after update {self.updates()} "
                      f"(those updates are run again)")

    def accumulation(self):
        return self.config["optimizer"]["gradient_accumulation_steps"] or 1

    def updates(self):
        return int(self.micro_step.numpy()) // self.accumulation()

    # ----------------------------------------------------------- stepping
    def _forward(self, inputs, labels, training):
        """Summed MLM loss, correct, counted and all masked tokens of a batch."""
        all_masked = tf.reduce_sum(tf.cast(labels > 0, tf.float32))
        if self.encoder is None:
            return (*masked_lm_sums(labels, self.model(inputs, training=training)), all_masked)
        positions, kept = masked_positions(labels, self.max_predictions)
        hidden = tf.gather(self.encoder(inputs, training=training), positions, batch_dims=1)
        return (*masked_lm_sums(kept, self.transformer.mlm_logits(hidden, training=training)), all_masked)

    def _replica_step(self, inputs, labels):
        ctx = tf.distribute.get_replica_context()
        _, kept = masked_positions(labels, self.max_predictions)
        count = ctx.all_reduce("sum", tf.reduce_sum(tf.cast(kept > 0, tf.float32)))
        with tf.GradientTape() as tape:
            loss_sum, correct, n, all_masked = self._forward(inputs, labels, True)
            loss = loss_sum / tf.maximum(count, 1.0)
            scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
        grads = tape.gradient(scaled, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.micro_step.assign_add(1)
        return loss_sum, correct, n, all_masked

    def _make_step(self, jit):
        replica_step = tf.function(self._replica_step, jit_compile=jit) if jit else self._replica_step

        @tf.function
        def step(inputs, labels):
            sums = self.strategy.run(replica_step, args=(inputs, labels))
            return [self.strategy.reduce("sum", s, axis=None) for s in sums]
        return step

    def _distribute(self, batch):
        """A global batch as per-replica values: replica r gets rows [r·b, (r+1)·b)."""
        replicas = self.strategy.num_replicas_in_sync
        if replicas == 1:
            return batch
        rows = self.config["data"]["batch_size"] // replicas

        def rows_of(context):
            start = context.replica_id_in_sync_group * rows
            return tf.nest.map_structure(lambda t: t[start:start + rows], batch)

        return self.strategy.experimental_distribute_values_from_function(rows_of)

    def train_step(self, batch):
        """One micro-step; compiles with XLA first and falls back without it.
        Returns the batch's summed (loss, correct, counted, all masked) tensors."""
        batch = self._distribute(batch)
        if self._step_fn is None:
            if self.xla:
                try:
                    step = self._make_step(True)
                    result = step(*batch)
                    self._step_fn = step
                    self._micro += 1
                    return result
                except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
                        tf.errors.InternalError) as e:
                    print(f"XLA compilation failed, training without it: {str(e).splitlines()[0]}")
            self._step_fn = self._make_step(False)
        result = self._step_fn(*batch)
        self._micro += 1
        return result

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
        if (train["eval_every"] and (update % train["eval_every"] == 0 or update == train["steps"])
                and self.config["data"]["eval"] and self.is_chief):
            self._log_eval(update)
        if update % train["save_every"] == 0:
            self.save(update)
        return update

    def _next_batch(self):
        try:
            return next(self.iterator)
        except tf.errors.DataLossError as e:   # a record damaged past the start of its shard
            raise SystemExit(f"error: {self.config['config_path']}: a shard of data.train "
                             f"{self.config['data']['train']!r} is damaged ({str(e).strip().splitlines()[0]}); "
                             f"prepare the shards again") from None

    def save(self, update):
        """Writes checkpoint ``ckpt-<update>``. When the disk is full: a
        one-line error naming the folder, the half-written temporary folder
        removed, the previous checkpoints kept."""
        try:
            self.manager.save(checkpoint_number=update)
        except (tf.errors.ResourceExhaustedError, OSError) as e:
            if not isinstance(e, tf.errors.ResourceExhaustedError) and e.errno != errno.ENOSPC:
                raise
            for temp in tf.io.gfile.glob(os.path.join(self.checkpoint_dir, f"ckpt-{update}_temp*")):
                (tf.io.gfile.rmtree if tf.io.gfile.isdir(temp) else tf.io.gfile.remove)(temp)
            kept = run_dir.scan_checkpoints(self.checkpoint_dir)
            raise SystemExit(f"error: cannot write checkpoint {update} to {self.checkpoint_dir}: no space left on "
                             f"device; " + (f"the previous checkpoint {os.path.basename(kept[-1])} is kept"
                                            if kept else "no earlier checkpoint exists")
                             + "; free some space and start the run again to resume") from None

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
            with self._stop_on_signals():
                self._train(max_minutes, until)
        finally:
            self.close()

    def close(self):
        """Releases the run directory's lock (unless the caller holds it)."""
        if self.lock is not None and self._owns_lock:
            self.lock.release()
        self.lock = None

    def _open_logs(self):
        if self.is_chief:
            tf.io.gfile.makedirs(self.output_dir)
        self._writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "logs")) \
            if self.is_chief else tf.summary.create_noop_writer()
        self._start = time.time()

    def _train(self, max_minutes, until):
        total = self.config["train"]["steps"]
        end = total if until is None else min(until, total)
        self._open_logs()
        progress = tqdm(total=total, initial=self.updates(), desc="pretrain", unit="update",
                        dynamic_ncols=True, mininterval=2.0, disable=not self.is_chief)
        self._last_record = None
        while self._micro // self.accumulation() < end:
            update = self.advance()
            progress.update(1)
            if self._last_record is not None and self._last_record["update"] == update:
                progress.set_postfix(loss=f"{self._last_record['loss']:.3f}",
                                     acc=f"{self._last_record['masked_accuracy']:.3f}")
            if max_minutes is not None and time.time() - self._start > 60 * max_minutes:
                print(f"\nthe time limit is spent: saving update {update} and stopping")
                self.stopped_early = True
                break
            if self._stop_signal is not None:
                print(f"\nsignal {self._stop_signal}: saving update {update} and stopping")
                self.stopped_early = True
                break
        progress.close()
        self.stopped_early = self.stopped_early or self._stop_signal is not None   # a signal during the last update
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
        lr = float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))
        record = {"update": update, "loss": loss_sum / max(n, 1), "masked_accuracy": correct / max(n, 1),
                  "learning_rate": lr, "masked_tokens": int(n),
                  "beyond_max_predictions": round(1 - n / max(all_masked, 1), 4),
                  "elapsed_s": round(time.time() - self._start, 1)}
        if self.loss_scaling:
            record["loss_scale"] = float(keras.ops.convert_to_numpy(self.optimizer.scale_loss(1.0)))
        with self._writer.as_default(step=update):
            for key in ("loss", "masked_accuracy", "learning_rate"):
                tf.summary.scalar(key, record[key])
        self._append_log(record)
        return record

    # ----------------------------------------------------------- evaluation
    def _eval_sums(self, inputs, labels):
        if self._eval_fn is None:
            self._eval_fn = tf.function(lambda x, y: masked_lm_sums(y, self.model(x, training=False)),
                                        jit_compile=self.xla, reduce_retracing=True)
        return self._eval_fn(inputs, labels)

    def evaluate(self, batches=None):
        """Masked-token loss/accuracy on ``data.eval`` and the majority baseline,
        over ``batches`` batches (default ``train.eval_batches``; 0 = all)."""
        dataset = self._dataset(self.config["data"]["eval"], repeat=False)
        batches = self.config["train"]["eval_batches"] if batches is None else batches
        if batches:
            dataset = dataset.take(batches)
        sums, counts = np.zeros(3), {}
        for inputs, labels in dataset:
            sums += [float(x) for x in self._eval_sums(inputs, labels)]   # every masked position counts here
            ids, freq = np.unique(labels.numpy()[labels.numpy() > 0], return_counts=True)
            for i, c in zip(ids, freq):
                counts[i] = counts.get(i, 0) + c
        n = max(sums[2], 1)
        baseline = max(counts.values()) / n if counts else 0.0
        return {"eval_loss": sums[0] / n, "eval_masked_accuracy": sums[1] / n,
                "majority_baseline_accuracy": baseline, "eval_masked_tokens": int(sums[2])}

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
        print(f"\n[eval] update {update}: " + ", ".join(f"{k}={v:.4f}" for k, v in record.items()
                                                          if isinstance(v, float)))

    # ----------------------------------------------------------- export
    def export(self, directory=None):
        """bert_config.json + bert_model.ckpt.* + vocab.txt in the original format.

        Written into ``<directory>.partial`` first, then each file moved into
        ``directory`` (the checkpoint's .index last), so an interrupted export
        never leaves a truncated file there."""
        directory = directory or os.path.join(self.output_dir, "export")
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
