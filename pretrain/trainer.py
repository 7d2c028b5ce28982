"""The pretraining loop: strategy, model, optimizer, data, checkpoints, export.

A plain custom loop (one ``tf.function`` step run by the strategy) rather
than ``model.fit``, because resuming must restore the data iterator exactly,
and the MLM loss/accuracy only count masked positions.
"""
import contextlib
import json
import logging
import os
import signal
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from gau_keras.data import tfrecord
from gau_keras.data.mlm import random_token_ids
from gau_keras.models.builder import CONFIG_ALIASES, build_transformer_model
from gau_keras.optimizers import LAMB, PiecewiseLinearDecay
from gau_keras.tokenizers import Tokenizer, load_vocab
from pretrain import config as config_lib

logger = logging.getLogger("pretrain")


def choose_strategy(tpu=None):
    """TPU if asked; multi-worker with TF_CONFIG; mirrored with >1 GPU; else default."""
    if tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver), "mixed_bfloat16"
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    if len(tf_config.get("cluster", {}).get("worker", [])) > 1:
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MultiWorkerMirroredStrategy(), "mixed_float16" if gpus else None
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy(), "mixed_float16"
    return tf.distribute.get_strategy(), None


def masked_lm_sums(labels, logits):
    """Summed cross-entropy, correct predictions and count over masked positions.

    labels [B, L] (0 = not masked), logits [B, L, V] -> three scalars.
    """
    weights = tf.cast(labels > 0, tf.float32)
    logits = tf.cast(logits, tf.float32)
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=labels.dtype), labels), tf.float32)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(correct * weights), tf.reduce_sum(weights)


def masked_positions(labels, k):
    """The first ``k`` masked positions of each row (static shape for XLA).

    labels [B, L] -> (positions [B, k], their labels [B, k]); rows with fewer
    than k masked tokens are filled with unmasked positions (label 0), rows
    with more lose the excess (counted by the caller).
    """
    masked = tf.cast(labels > 0, tf.float32)
    _, positions = tf.math.top_k(masked, k=k, sorted=True)   # ties keep index order
    return positions, tf.gather(labels, positions, batch_dims=1)


class Trainer:
    def __init__(self, config, tpu=None, xla=True):
        self.config = config
        self.xla = xla and config["train"]["xla"]
        self.output_dir = config["train"]["output_dir"]
        self.strategy, policy = choose_strategy(tpu)
        if policy:
            keras.mixed_precision.set_global_policy(policy)
        self.loss_scaling = policy == "mixed_float16"
        keras.utils.set_random_seed(config["train"]["seed"])
        self.token_dict = load_vocab(config["vocab"])
        self.tokenizer = Tokenizer(self.token_dict)
        self.model_config = self._model_config()
        with self.strategy.scope():
            self.transformer = build_transformer_model(
                model=config["model"], with_mlm="linear", return_keras_model=False, **self.model_config)
            self.model = self.transformer.model
            self.optimizer = self._optimizer()
            self.optimizer.build(self.model.trainable_variables)
            self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_step")
            # The MLM head runs on at most max_predictions masked positions per
            # sequence instead of all of them (the vocab projection dominates).
            self.encoder = (keras.Model(self.model.inputs, self.transformer.encoder_output)
                            if hasattr(self.transformer, "mlm_logits") else None)
        data = config["data"]
        self.max_predictions = min(data["max_predictions"] or -(-data["maxlen"] // 4), data["maxlen"])
        self.dataset = self._dataset(config["data"]["train"], repeat=True)
        self.iterator = iter(self.strategy.experimental_distribute_dataset(self.dataset))
        # Dropout's random state lives in Keras SeedGenerators, which tf.train
        # does not track through the model: save it explicitly so a resumed run
        # draws the same masks as an uninterrupted one.
        weights = {id(w) for w in self.model.weights}
        self.seed_states = [v.value for v in self.model.variables if id(v) not in weights]
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                              iterator=self.iterator, micro_step=self.micro_step,
                                              seed_states=self.seed_states)
        self.manager = tf.train.CheckpointManager(self.checkpoint, os.path.join(self.output_dir, "checkpoints"),
                                                  max_to_keep=config["train"]["keep_checkpoints"])
        self._restore_or_initialise()
        self._step_fn = None

    # ----------------------------------------------------------- building
    def _model_config(self):
        raw = config_lib.model_config(self.config)
        configs = {CONFIG_ALIASES.get(k, k): v for k, v in raw.items()}
        if configs.get("vocab_size") != len(self.token_dict):
            raise SystemExit(f"error: {self.config['config_path']}: model vocab_size={configs.get('vocab_size')} "
                             f"but vocab {self.config['vocab']!r} has {len(self.token_dict)} tokens")
        return configs

    def _optimizer(self):
        opt = dict(self.config["optimizer"])
        schedule = PiecewiseLinearDecay(opt.pop("learning_rate"), opt.pop("schedule"))
        if (opt.get("gradient_accumulation_steps") or 1) < 2:   # Keras wants None for "no accumulation"
            opt["gradient_accumulation_steps"] = None
        optimizer = LAMB(learning_rate=schedule, **opt)
        if self.loss_scaling:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        return optimizer

    def _dataset(self, pattern, repeat):
        data = self.config["data"]
        batch = data["batch_size"]
        if batch % self.strategy.num_replicas_in_sync:
            raise SystemExit(f"error: data.batch_size={batch} is not divisible by the "
                             f"{self.strategy.num_replicas_in_sync} replicas")
        return tfrecord.load_dataset(
            pattern, batch, maxlen=data["maxlen"], dynamic_mask=data["dynamic_mask"], shuffle=repeat,
            shuffle_buffer=data["shuffle_buffer"], seed=data["seed"], repeat=repeat, drop_remainder=True,
            mask_token_id=self.tokenizer._token_mask_id, random_token_ids=random_token_ids(self.token_dict))

    def _restore_or_initialise(self):
        latest = self.manager.latest_checkpoint
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            print(f"resumed from {latest}: update {self.updates()} (micro-step {int(self.micro_step.numpy())})")
        elif self.config["train"]["init_checkpoint"]:
            n = self.transformer.load_weights_from_checkpoint(self.config["train"]["init_checkpoint"])
            print(f"initialised {n} weights from {self.config['train']['init_checkpoint']}")

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

    def train_step(self, batch):
        """One micro-step; compiles with XLA first and falls back without it."""
        if self._step_fn is None:
            if self.xla:
                try:
                    step = self._make_step(True)
                    result = step(*batch)
                    self._step_fn = step
                    return result
                except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
                        tf.errors.InternalError) as e:
                    print(f"XLA compilation failed, training without it: {str(e).splitlines()[0]}")
            self._step_fn = self._make_step(False)
        return self._step_fn(*batch)

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

    def train(self, max_minutes=None):
        with self._stop_on_signals():
            self._train(max_minutes)

    def _train(self, max_minutes):
        train = self.config["train"]
        total = train["steps"]
        writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "logs"))
        log_path = os.path.join(self.output_dir, "log.jsonl")
        tf.io.gfile.makedirs(self.output_dir)
        start, window = time.time(), np.zeros(4)
        progress = tqdm(total=total, initial=self.updates(), desc="pretrain", unit="update",
                        dynamic_ncols=True, mininterval=2.0)
        while self.updates() < total:
            window += [float(x) for x in self.train_step(next(self.iterator))]
            if int(self.micro_step.numpy()) % self.accumulation():
                continue
            update = self.updates()
            progress.update(1)
            if update % train["log_every"] == 0 or update == total:
                record = self._log(update, window, writer, log_path, start)
                progress.set_postfix(loss=f"{record['loss']:.3f}", acc=f"{record['masked_accuracy']:.3f}")
                window = np.zeros(4)
            if train["eval_every"] and update % train["eval_every"] == 0 and self.config["data"]["eval"]:
                self._log_eval(update, writer, log_path)
            if update % train["save_every"] == 0:
                self.manager.save(checkpoint_number=update)
            if max_minutes is not None and time.time() - start > 60 * max_minutes:
                print(f"\nstopping after {max_minutes} minutes at update {update}")
                break
            if self._stop_signal is not None:
                print(f"\nsignal {self._stop_signal}: saving update {update} and stopping")
                break
        progress.close()
        self.manager.save(checkpoint_number=self.updates())
        if self.updates() >= total:
            print(f"exported to {self.export()}")

    def _log(self, update, window, writer, log_path, start):
        loss_sum, correct, n, all_masked = window
        lr = float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))
        record = {"update": update, "loss": loss_sum / max(n, 1), "masked_accuracy": correct / max(n, 1),
                  "learning_rate": lr, "masked_tokens": int(n),
                  "beyond_max_predictions": round(1 - n / max(all_masked, 1), 4),
                  "elapsed_s": round(time.time() - start, 1)}
        with writer.as_default(step=update):
            for key in ("loss", "masked_accuracy", "learning_rate"):
                tf.summary.scalar(key, record[key])
        with tf.io.gfile.GFile(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        return record

    def evaluate(self, batches=None):
        """Masked-token loss/accuracy on ``data.eval`` and the majority baseline,
        over ``batches`` batches (default ``train.eval_batches``; 0 = all)."""
        dataset = self._dataset(self.config["data"]["eval"], repeat=False)
        batches = self.config["train"]["eval_batches"] if batches is None else batches
        if batches:
            dataset = dataset.take(batches)
        sums, counts = np.zeros(3), {}
        for inputs, labels in dataset:
            logits = self.model(inputs, training=False)     # every masked position counts here
            sums += [float(x) for x in masked_lm_sums(labels, logits)]
            ids, freq = np.unique(labels.numpy()[labels.numpy() > 0], return_counts=True)
            for i, c in zip(ids, freq):
                counts[i] = counts.get(i, 0) + c
        n = max(sums[2], 1)
        baseline = max(counts.values()) / n if counts else 0.0
        return {"eval_loss": sums[0] / n, "eval_masked_accuracy": sums[1] / n,
                "majority_baseline_accuracy": baseline, "eval_masked_tokens": int(sums[2])}

    def log_evaluation(self, update=None, batches=None):
        """Evaluates, appends the record to log.jsonl and TensorBoard, prints it."""
        update = self.updates() if update is None else update
        writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "logs"))
        self._log_eval(update, writer, os.path.join(self.output_dir, "log.jsonl"), batches)

    def _log_eval(self, update, writer, log_path, batches=None):
        record = {"update": update, **self.evaluate(batches)}
        with writer.as_default(step=update):
            for key in ("eval_loss", "eval_masked_accuracy", "majority_baseline_accuracy"):
                tf.summary.scalar(key, record[key])
        with tf.io.gfile.GFile(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"\n[eval] update {update}: " + ", ".join(f"{k}={v:.4f}" for k, v in record.items()
                                                          if isinstance(v, float)))

    # ----------------------------------------------------------- export
    def export(self, directory=None):
        """bert_config.json + bert_model.ckpt.* + vocab.txt in the original format."""
        directory = directory or os.path.join(self.output_dir, "export")
        tf.io.gfile.makedirs(directory)
        self.transformer.save_weights_as_checkpoint(os.path.join(directory, "bert_model.ckpt"))
        with tf.io.gfile.GFile(os.path.join(directory, "bert_config.json"), "w") as f:
            json.dump(config_lib.model_config(self.config), f, indent=2, ensure_ascii=False)
        tf.io.gfile.copy(self.config["vocab"], os.path.join(directory, "vocab.txt"), overwrite=True)
        return directory
