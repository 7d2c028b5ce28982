"""Pretraining on JAX: ``keras.distribution.DataParallel`` over this host's
devices (or, after ``start_processes``, over every process's), one ``jax.jit``
micro-step on Keras's stateless API, orbax checkpoints of model, optimizer,
data iterator, micro-step and dropout RNG.

Several processes (``--coordinator``, ``--num-processes``, ``--process-id``)
each read their own rows of every global batch (``trainer.training_dataset``'s
``shard``), train one program over all devices, and write each checkpoint
together: orbax's arrays from every process into one step folder, each
process's data iterator beside them (``iterator-<i>-of-<n>``).

The step's state (weights, dropout RNG, optimizer variables) lives outside
the Keras variables while it trains, its buffers donated to each step, as in
Keras's own JAX ``fit``; ``TrainingState.sync`` writes it back into the
variables before anything reads them (logging, evaluation, checkpoints,
export).

A checkpoint is one orbax step folder ``checkpoints/<update>/`` holding
``state`` (a tree: ``model`` weights nested by layer and weight name,
``dropout_rng`` and ``optimizer`` variables in their order of creation,
``micro_step``) and ``data_iterator`` (a tf.train checkpoint of the tf.data
iterator alone). Why orbax: docs/backends.md ("Pretraining on JAX").
"""

import errno
import os

import jax
import keras
import numpy as np
import tensorflow as tf
from keras import ops

from gau_keras.distribution import JaxDataParallel
from gau_keras.errors import CheckpointError, ConfigError, DeviceError, first_line
from gau_keras.training import processes, run_dir
from gau_keras.training.pretrain.trainer import tf_config_workers
from gau_keras.training.processes import start_processes  # noqa: F401 - the backend's, as tf_backend's


def orbax():
    """orbax-checkpoint's v1 API (imported on first use)."""
    import orbax.checkpoint

    return orbax.checkpoint.v1


def stop_with_the_run(output_dir):
    """``processes.stop_with_the_run``, its error naming the checkpoint every process resumes from."""

    def again():
        steps = run_dir.orbax_steps(os.path.join(output_dir, "checkpoints"))
        return f"to resume from {f'checkpoint {steps[-1]}' if steps else 'update 0 (no checkpoint yet)'}"

    return processes.stop_with_the_run(again)


class Devices:
    """The devices of a run under ``keras.distribution.DataParallel``: this
    host's, or every process's after ``start_processes``."""

    def __init__(self, parallel):
        self.parallel = parallel
        self.kind = parallel.platform  # 'cpu', 'gpu' or 'tpu'
        self.replicas = parallel.num_replicas_in_sync
        self.processes = jax.process_count()
        self.process_index = jax.process_index()
        self.is_chief = self.process_index == 0

    def scope(self):
        return self.parallel.scope()


def choose_devices(tpu=None, devices=None):
    """All of this host's JAX devices, or the first ``devices`` (``--devices N``);
    every process's after ``start_processes``. ``tpu`` (``--tpu``): they must be TPU
    cores (the precision then defaults to ``mixed_bfloat16``, as TensorFlow's TPU path)."""
    if tpu:
        processes.check_tpu_name(tpu)
    workers = tf_config_workers()
    if workers > 1:
        raise DeviceError(
            f"TF_CONFIG names {workers} workers: multi-worker pretraining runs under "
            f"KERAS_BACKEND=tensorflow (MultiWorkerMirroredStrategy); under JAX a run trains on one "
            f"host's devices"
        )
    try:
        chosen = Devices(JaxDataParallel(devices))
    except ValueError as e:
        raise DeviceError(str(e)) from None
    if tpu and chosen.kind != "tpu":
        raise DeviceError(
            f"--tpu: JAX's devices here are {chosen.kind.upper()}s, not TPU cores; run on the hosts of a TPU VM "
            f"slice, or drop --tpu"
        )
    return chosen


def resolve_xla(explicit, configured, kind):
    """Always True: JAX runs a step compiled by XLA (``jax.jit``) or op by op."""
    if explicit is False:
        raise DeviceError(
            "--no-xla: under KERAS_BACKEND=jax the training step is always compiled with "
            "XLA (jax.jit); train under KERAS_BACKEND=tensorflow to run it without"
        )
    if configured is False:
        print("note: train.xla=false does not apply under KERAS_BACKEND=jax: the step is compiled with XLA (jax.jit)")
    return True


def iterator_name(processes, index):
    """The file name of process ``index``'s iterator in ``data_iterator/``."""
    return "iterator" if processes == 1 else f"iterator-{index}-of-{processes}"


class IteratorCheckpoint:
    """The tf.data iterator as an orbax ``StatefulCheckpointable``: a
    tf.train checkpoint of the iterator alone, written into the step's
    ``data_iterator/`` folder, one per process (each reads its own rows).
    Saves are synchronous (the iterator must not move while it is written)."""

    def __init__(self, iterator):
        self.checkpoint = tf.train.Checkpoint(iterator=iterator)
        self.name = iterator_name(jax.process_count(), jax.process_index())

    async def save(self, directory):
        async def write():
            path = await directory.await_creation()
            self.checkpoint.write(os.path.join(str(path), self.name))

        return write()

    async def load(self, directory):
        async def read():
            self.checkpoint.read(os.path.join(str(directory), self.name)).assert_consumed()

        return read()


def check_process_count(step):
    """A one-line error when the step folder ``step`` holds the data iterators
    of another number of processes (each holds its own process's rows)."""
    folder = os.path.join(step, "data_iterator")
    if not tf.io.gfile.isdir(folder):
        return  # a damaged folder: its restore fails and names it
    written = sorted(n[: -len(".index")] for n in tf.io.gfile.listdir(folder) if n.endswith(".index"))
    if not written or iterator_name(jax.process_count(), jax.process_index()) in written:
        return
    count = 1 if written == ["iterator"] else len(written)
    raise CheckpointError(
        f"checkpoint {step} was written by {count} process(es) and this run has {jax.process_count()}: "
        f"each process's data iterator holds its own rows of the batches; resume it with {count} "
        f"process(es), or pass --restart to start from update 0"
    )


def check_same_config(config):
    """Every process of a run must train the same config: an error on all of
    them, before the first update, naming the processes that differ from process 0's."""
    kept = {k: v for k, v in config.items() if k not in ("config_path", "model_config_path")}
    differ = processes.differing_processes(kept)
    if differ:
        raise ConfigError(
            f"{config['config_path']}: process(es) {differ} train another config than process 0 "
            f"(data, model, optimizer or train settings differ); start every process with the same config and flags"
        )


def _nested(values):
    """{'a/b/c': x} -> {'a': {'b': {'c': x}}}; a name that is also a folder is an error."""
    tree = {}
    for path, value in values.items():
        *folders, leaf = path.split("/")
        node = tree
        for folder in folders:
            node = node.setdefault(folder, {})
            if not isinstance(node, dict):
                raise ValueError(f"checkpoint names: {path!r} lies under a variable of that name")
        if leaf in node:
            raise ValueError(f"checkpoint names: two variables are named {path!r}")
        node[leaf] = value
    return tree


def _no_space(error):
    """Whether ``error`` (or what caused it) is a full disk."""
    while error is not None:
        if (isinstance(error, OSError) and error.errno == errno.ENOSPC) or "No space left on device" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


class TrainingState:
    """The step, evaluation and checkpoints of a ``Trainer`` on JAX."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.parallel = trainer.devices.parallel
        model = trainer.model
        weights = {id(w) for w in model.weights}
        # the optimizer was built on model.trainable_variables: its order is the state's
        self.trainable = list(model.trainable_variables)
        order = {id(v): i for i, v in enumerate(self.trainable)}
        extra = [v.path for v in trainer.train_model.trainable_variables if id(v) not in order]
        unused = set(order) - {id(v) for v in trainer.train_model.trainable_variables}
        if extra or unused:
            raise RuntimeError(
                f"the training model's trainable weights differ from the model's: {extra} / "
                f"{[v.path for v in self.trainable if id(v) in unused]}"
            )
        self.call_order = [order[id(v)] for v in trainer.train_model.trainable_variables]
        self.non_trainable = list(trainer.train_model.non_trainable_variables)
        self.seed_states = [v for v in model.variables if id(v) not in weights]
        self.micro = 0
        self.directory = os.path.join(trainer.output_dir, "checkpoints")
        self.manager = None
        self._state = None  # (trainable, non-trainable, optimizer values) while training
        self._step_fn = None
        self._eval_fn = None
        self._at_checkpoint = None  # the update the variables were last saved at or restored from
        names = [w.path for w in model.weights]
        _nested(dict.fromkeys(names))  # the checkpoint's names must be unique
        check_same_config(trainer.config)

    @property
    def micro_step(self):
        return self.micro

    # ----------------------------------------------------------- the step's state
    def _values(self):
        """The step's state from the Keras variables, each value placed with
        the sharding the step returns it with (``_shardings``): the first call
        then meets the program the later calls use, compiled once."""
        values = (
            [v.value for v in self.trainable],
            [v.value for v in self.non_trainable],
            [v.value for v in self.trainer.optimizer.variables],
        )
        return jax.device_put(values, self._shardings(values))

    def _shardings(self, values):
        """The sharding of each value of the step's state: on a mesh its
        variable's (DataParallel replicates every variable), else the one
        device's. A variable's own value may be uncommitted (created before
        any placement), which jax.jit compiles apart from the committed
        arrays the step returns."""
        if self.parallel.distribution is None:
            one = jax.sharding.SingleDeviceSharding(self.parallel.devices[0])
            return jax.tree.map(lambda _: one, values)
        return jax.tree.map(lambda value: value.sharding, values)

    def sync(self):
        """Writes the step's state back into the Keras variables (the next
        step takes it from them again)."""
        if self._state is None:
            return
        for variables, values in zip(
            (self.trainable, self.non_trainable, self.trainer.optimizer.variables), self._state
        ):
            for variable, value in zip(variables, values):
                variable.assign(value)
        self._state = None

    def block(self):
        jax.block_until_ready(self._state)

    def close(self):
        if self.manager is not None:
            self.manager.close()
            self.manager = None

    # ----------------------------------------------------------- stepping
    def _compile(self, state):
        """The jitted step of ``state``'s shardings (it returns the state with them)."""
        trainer = self.trainer
        train_model, optimizer = trainer.train_model, trainer.optimizer
        call_order = self.call_order

        def loss_fn(trainable, non_trainable, optimizer_values, inputs, labels):
            x, kept = trainer.mlm_batch(inputs, labels)
            logits, non_trainable = train_model.stateless_call(
                [trainable[i] for i in call_order], non_trainable, x, training=True
            )
            sums = trainer.mlm_sums(kept, logits, labels)
            loss = sums[0] / ops.maximum(sums[2], 1.0)  # over the whole batch's counted tokens
            if trainer.loss_scaling:
                with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_values))):
                    loss = optimizer.scale_loss(loss)
            return loss, (non_trainable, sums)

        gradients = jax.value_and_grad(loss_fn, has_aux=True)

        def step(state, inputs, labels):
            trainable, non_trainable, optimizer_values = state
            (_, (non_trainable, sums)), grads = gradients(trainable, non_trainable, optimizer_values, inputs, labels)
            trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
            return (trainable, non_trainable, optimizer_values), sums

        return jax.jit(step, donate_argnums=0, out_shardings=(self._shardings(state), None))

    def _place(self, batch, local=True):
        """A tf.data batch as arrays split over the devices by rows: this
        process's rows of the global batch (``local``), or the global batch."""
        return self.parallel.distribute(jax.tree.map(np.asarray, batch), local=local)

    def step(self, batch):
        inputs, labels = self._place(batch)
        if self._state is None:
            self._state = self._values()
        if self._step_fn is None:
            self._step_fn = self._compile(self._state)
        self._state, sums = self._step_fn(self._state, inputs, labels)
        self.micro += 1
        return sums

    def eval_sums(self, inputs, labels):
        """(summed loss, correct, counted) over every masked position of a
        batch; the variables must be in sync (``sync``)."""
        trainer = self.trainer
        model = trainer.model
        if self._eval_fn is None:

            def sums(trainable, non_trainable, inputs, labels):
                logits, _ = model.stateless_call(
                    trainable, non_trainable, [inputs[n] for n in trainer.input_names], training=False
                )
                return trainer.mlm_sums(labels, logits, labels)[:3]

            self._eval_fn = jax.jit(sums)
        inputs, labels = self._place((inputs, labels), local=False)
        weights = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables])
        return self._eval_fn(*jax.device_put(weights, self._shardings(weights)), inputs, labels)

    # ----------------------------------------------------------- checkpoints
    def _tree(self, leaf):
        model, optimizer = self.trainer.model, self.trainer.optimizer
        return {
            "model": _nested({w.path: leaf(w) for w in model.weights}),
            "dropout_rng": [leaf(v) for v in self.seed_states],
            "optimizer": [leaf(v) for v in optimizer.variables],
        }

    def _checkpointables(self, tree):
        return {"state": tree, "data_iterator": IteratorCheckpoint(self.trainer.iterator)}

    def _open(self):
        ocp = orbax()
        keep = self.trainer.config["train"]["keep_checkpoints"]
        self.manager = ocp.training.Checkpointer(
            self.directory,
            preservation_policy=ocp.training.preservation_policies.LatestN(keep),
            cleanup_tmp_directories=True,
        )

    def restore(self):
        """Restores the newest checkpoint that restores: one that fails is
        moved to ``checkpoints/unrestorable/`` with a warning naming it and the
        previous one is tried. Returns its folder, or None when there is none;
        an error when checkpoints exist and none restores."""
        run_dir.refuse_other_format(self.directory, "jax")
        steps = run_dir.orbax_steps(self.directory)
        failed = []
        abstract = self._tree(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.value.sharding))
        abstract["micro_step"] = 0
        for path in reversed(steps):
            check_process_count(path)
            try:
                loaded = orbax().load_checkpointables(path, self._checkpointables(abstract))["state"]
            except Exception as e:  # noqa: BLE001 - orbax and tensorstore raise many kinds for a damaged folder
                detail = first_line(e)
                run_dir.warn(
                    f"checkpoint {path} does not restore ({type(e).__name__}: {detail}); trying the previous one"
                )
                failed.append(path)
                continue
            self._assign(loaded)
            for bad in failed if self.trainer.is_chief else ():
                run_dir.move_step_aside(bad, os.path.join(self.directory, "unrestorable"))
                run_dir.warn(f"moved the unrestorable {bad} to {os.path.join(self.directory, 'unrestorable')}")
            self._open()
            self._at_checkpoint = int(os.path.basename(path))
            return path
        if steps:
            raise CheckpointError(
                f"none of the {len(steps)} checkpoints in {self.directory} restores (newest "
                f"{steps[-1]}); fix or remove them, or pass --restart to move them aside and "
                f"start from update 0"
            )
        self._open()
        return None

    def _assign(self, loaded):
        model, optimizer = self.trainer.model, self.trainer.optimizer
        for weight in model.weights:
            node = loaded["model"]
            for name in weight.path.split("/"):
                node = node[name]
            weight.assign(node)
        for variables, key in ((self.seed_states, "dropout_rng"), (optimizer.variables, "optimizer")):
            for variable, value in zip(variables, loaded[key], strict=True):
                variable.assign(value)
        self.micro = int(loaded["micro_step"])
        self._state = None

    def latest_checkpoint(self):
        steps = run_dir.orbax_steps(self.directory)
        return steps[-1] if steps else None

    def save(self, update):
        """Checkpoint ``update`` (nothing to do when the variables are that
        checkpoint's: restored from it or saved at it)."""
        if update == self._at_checkpoint:
            return
        self.sync()
        tree = self._tree(lambda v: v.value)
        tree["micro_step"] = self.micro
        try:
            self.manager.save_checkpointables(update, self._checkpointables(tree), force=True, overwrite=True)
        except Exception as e:
            if not _no_space(e):
                raise
            for name in tf.io.gfile.listdir(self.directory):
                if name.rstrip("/").startswith(f"{update}.orbax-checkpoint-tmp"):
                    tf.io.gfile.rmtree(os.path.join(self.directory, name))
            self.manager.reload()
            run_dir.disk_full(update, self.directory, run_dir.orbax_steps(self.directory))
        self._at_checkpoint = update
