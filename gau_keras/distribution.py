"""Data parallelism over one host's devices, on either Keras backend.

``data_parallel(n)`` gives what fine-tuning and pretraining build their
model under and split their batches with:

* TensorFlow: the default strategy (n = 1), else a ``MirroredStrategy``
  over n GPUs, or over n logical CPU devices where there are fewer GPUs
  (which must be configured before TensorFlow's runtime starts);
* JAX: a `JaxDataParallel`, ``keras.distribution.DataParallel`` over the
  first n of ``jax.local_devices()`` (on CPU, more than one needs
  ``XLA_FLAGS=--xla_force_host_platform_device_count=n`` before JAX starts);
  after ``jax.distributed.initialize`` with several processes, over
  ``jax.devices()``: every process's devices.

Both have ``scope()`` and ``num_replicas_in_sync``.
"""

import contextlib

import keras


def device_count_error(devices, available, platform):
    return ValueError(
        f"--devices {devices}: JAX sees {available} {platform} device(s); on CPU start it with "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={devices}"
    )


class JaxDataParallel:
    """``keras.distribution.DataParallel`` over the first ``devices`` local
    JAX devices (None: all of them); with one device, no distribution. After
    ``jax.distributed.initialize`` with several processes, over every
    process's devices (``devices`` then counts this process's).

    ``distribute(batch)`` places a batch (a nest of arrays [B, ...]) on the
    devices, each taking B / devices rows, as Keras's own ``fit`` does; with
    several processes ``batch`` is this process's rows [B / processes, ...]
    (``local=True``) or the global batch, of which it takes its rows.
    """

    def __init__(self, devices=None):
        import jax

        available = jax.local_devices()
        devices = len(available) if devices is None else devices
        if len(available) < devices:
            raise device_count_error(devices, len(available), available[0].platform)
        self.processes = jax.process_count()
        if self.processes > 1 and devices != len(available):
            raise ValueError(
                f"--devices {devices}: a run of {self.processes} processes trains on all of each "
                f"process's {len(available)} devices"
            )
        self.devices = available[:devices] if self.processes == 1 else jax.devices()
        self.platform = available[0].platform
        self.num_replicas_in_sync = len(self.devices)
        self.distribution = (
            # several processes: each feeds its own rows (Keras's auto-sharding would re-split them)
            keras.distribution.DataParallel(devices=self.devices, auto_shard_dataset=self.processes == 1)
            if self.num_replicas_in_sync > 1
            else None
        )

    def scope(self):
        return contextlib.nullcontext() if self.distribution is None else self.distribution.scope()

    def distribute(self, batch, local=False):
        import jax

        if self.distribution is None:
            return jax.tree.map(lambda x: jax.device_put(x, self.devices[0]), batch)
        if self.processes == 1:
            return jax.tree.map(
                lambda x: keras.distribution.distribute_tensor(x, self.distribution.get_data_layout(x.shape)), batch
            )
        return jax.tree.map(lambda x: self._global_array(x, local), batch)

    def _global_array(self, x, local):
        """The global batch array of which this process holds the rows of ``x``
        (``local``) or the rows ``x[process]`` of the global ``x``."""
        import jax

        rows = x.shape[0] if local else x.shape[0] // self.processes
        if not local:
            index = jax.process_index()
            x = x[index * rows : (index + 1) * rows]
        layout = self.distribution.get_data_layout((rows * self.processes, *x.shape[1:]))
        return jax.make_array_from_process_local_data(layout.backend_layout, x)


def tf_mirrored(devices):
    """The default strategy, or MirroredStrategy over ``devices`` GPUs (logical
    CPUs when there are fewer GPUs)."""
    import tensorflow as tf

    if devices == 1:
        return tf.distribute.get_strategy()
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= devices:
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(devices)])
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    except RuntimeError as e:
        if len(tf.config.list_logical_devices("CPU")) < devices:
            raise ValueError(
                f"--devices {devices}: TensorFlow was started before the CPU could be split "
                f"into {devices} logical devices ({e})"
            ) from None
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])


def data_parallel(devices):
    """What a model is built under to train on ``devices`` devices of this
    host, for Keras's backend (see the module's docstring)."""
    if keras.backend.backend() == "jax":
        return JaxDataParallel(devices)
    return tf_mirrored(devices)
