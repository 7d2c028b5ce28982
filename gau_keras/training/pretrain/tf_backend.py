"""Pretraining on TensorFlow: a tf.distribute strategy, one ``tf.function``
micro-step run by it (XLA on request, falling back without), tf.train
checkpoints of model, optimizer, data iterator, micro-step and dropout RNG.

The backend-neutral loop is ``gau_keras.training.pretrain.trainer``; design notes in
docs/pretraining.md.
"""

import errno
import os
import tempfile

import tensorflow as tf

from gau_keras.distribution import tf_mirrored
from gau_keras.errors import DeviceError
from gau_keras.training import run_dir
from gau_keras.training.pretrain.trainer import default_xla, tf_config_workers


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
    if tf_config_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy(), kind
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy(), kind
    return tf.distribute.get_strategy(), kind


def is_chief(strategy):
    """Whether this process writes the run's checkpoints, logs and export."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


class Devices:
    """A strategy and its device kind ('cpu', 'gpu', 'tpu')."""

    def __init__(self, strategy, kind):
        self.strategy, self.kind = strategy, kind
        self.replicas = strategy.num_replicas_in_sync
        self.is_chief = is_chief(strategy)

    def scope(self):
        return self.strategy.scope()


def choose_devices(tpu=None, devices=None):
    """``choose_strategy``'s choice; with ``devices`` (``--devices N``) a
    MirroredStrategy over N GPUs of this host, or N logical CPU devices."""
    if devices is None:
        return Devices(*choose_strategy(tpu))
    if tpu or tf_config_workers() > 1:
        raise DeviceError(
            f"--devices {devices} trains on this host's GPUs or CPU; it cannot be combined "
            f"with {'--tpu' if tpu else 'a TF_CONFIG of several workers'}"
        )
    try:
        strategy = tf_mirrored(devices)
    except ValueError as e:
        raise DeviceError(str(e)) from None
    return Devices(strategy, "gpu" if tf.config.list_physical_devices("GPU") else "cpu")


def resolve_xla(explicit, configured, kind):
    """``--xla``/``--no-xla``, else ``train.xla``, else ``default_xla``."""
    if explicit is not None:
        return bool(explicit)
    return default_xla(kind) if configured is None else bool(configured)


class TrainingState:
    """The step, evaluation and checkpoints of a ``Trainer`` on TensorFlow."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.strategy = trainer.devices.strategy
        with self.strategy.scope():
            self.micro = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="micro_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        # Dropout's random state lives in Keras SeedGenerators, which tf.train
        # does not track through the model: save it explicitly so a resumed run
        # draws the same masks as an uninterrupted one.
        weights = {id(w) for w in trainer.model.weights}
        seed_states = [v.value for v in trainer.model.variables if id(v) not in weights]
        self.checkpoint = tf.train.Checkpoint(
            model=trainer.model,
            optimizer=trainer.optimizer,
            iterator=trainer.iterator,
            micro_step=self.micro,
            seed_states=seed_states,
        )
        self.directory = self._checkpoint_dir()
        self.manager = None
        self._step_fn = None
        self._eval_fn = None

    @property
    def micro_step(self):
        return int(self.micro.numpy())

    def _checkpoint_dir(self):
        """The chief's checkpoints/; the other workers of a multi-worker run
        must save too (the save is collective) but into a scratch folder."""
        directory = os.path.join(self.trainer.output_dir, "checkpoints")
        if self.trainer.is_chief:
            return directory
        resolver = self.strategy.cluster_resolver
        return os.path.join(tempfile.gettempdir(), f"gau_keras_worker_{resolver.task_id}_{os.getpid()}")

    # ----------------------------------------------------------- checkpoints
    def restore(self):
        """Restores the newest checkpoint that restores (every worker restores
        the chief's; only the chief repairs the folder); its prefix, or None."""
        folder = os.path.join(self.trainer.output_dir, "checkpoints")
        run_dir.refuse_other_format(folder, "tensorflow")
        restored = run_dir.restore_newest(self.checkpoint, folder, repair=self.trainer.is_chief)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.directory, max_to_keep=self.trainer.config["train"]["keep_checkpoints"]
        )
        return restored

    def latest_checkpoint(self):
        return self.manager.latest_checkpoint

    def save(self, update):
        try:
            self.manager.save(checkpoint_number=update)
        except (tf.errors.ResourceExhaustedError, OSError) as e:
            if not isinstance(e, tf.errors.ResourceExhaustedError) and e.errno != errno.ENOSPC:
                raise
            for temp in tf.io.gfile.glob(os.path.join(self.directory, f"ckpt-{update}_temp*")):
                (tf.io.gfile.rmtree if tf.io.gfile.isdir(temp) else tf.io.gfile.remove)(temp)
            run_dir.disk_full(update, self.directory, run_dir.scan_checkpoints(self.directory))

    def sync(self):
        """The variables are the state on TensorFlow: nothing to do."""

    def block(self):
        self.micro.numpy()

    def close(self):
        """Nothing is written in the background on TensorFlow."""

    # ----------------------------------------------------------- stepping
    def _replica_step(self, inputs, labels):
        trainer = self.trainer
        x, kept = trainer.mlm_batch(inputs, labels)
        ctx = tf.distribute.get_replica_context()
        count = ctx.all_reduce("sum", tf.reduce_sum(tf.cast(kept > 0, tf.float32)))
        with tf.GradientTape() as tape:
            sums = trainer.mlm_sums(kept, trainer.train_model(x, training=True), labels)
            loss = sums[0] / tf.maximum(count, 1.0)
            scaled = trainer.optimizer.scale_loss(loss) if trainer.loss_scaling else loss
        variables = trainer.model.trainable_variables
        trainer.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        self.micro.assign_add(1)
        return sums

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
        rows = self.trainer.config["data"]["batch_size"] // replicas

        def rows_of(context):
            start = context.replica_id_in_sync_group * rows
            return tf.nest.map_structure(lambda t: t[start : start + rows], batch)

        return self.strategy.experimental_distribute_values_from_function(rows_of)

    def step(self, batch):
        """One micro-step; compiles with XLA first and falls back without it."""
        batch = self._distribute(batch)
        if self._step_fn is None:
            if self.trainer.xla:
                try:
                    step = self._make_step(True)
                    result = step(*batch)
                    self._step_fn = step
                    return result
                except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError) as e:
                    print(f"XLA compilation failed, training without it: {str(e).splitlines()[0]}")
            self._step_fn = self._make_step(False)
        return self._step_fn(*batch)

    def eval_sums(self, inputs, labels):
        """(summed loss, correct, counted) over every masked position of a batch."""
        if self._eval_fn is None:
            model = self.trainer.model
            names = self.trainer.input_names
            self._eval_fn = tf.function(
                lambda x, y: self.trainer.mlm_sums(y, model([x[n] for n in names], training=False), y)[:3],
                jit_compile=self.trainer.xla,
                reduce_retracing=True,
            )
        return self._eval_fn(inputs, labels)
