"""Several JAX processes as one run: joining them (``jax.distributed.initialize``, from
the flags ``--coordinator`` / ``--num-processes`` / ``--process-id``, JAX's environment
variables, or a TPU slice's own metadata with ``--tpu``), and a lost process stopping the others
(``stop_with_the_run``). Shared by pretraining (``training.pretrain.jax_backend``) and
fine-tuning (``training.finetune.training``), and the check that every process trains the same
run (``differing_processes``); JAX is imported where it is used."""

import contextlib
import hashlib
import json
import os
import socket
import sys
import time

from gau_keras.errors import DeviceError, first_line

#: the settings of the run this process joined: (address, count, index) or ("tpu", "local"); None: none yet
_joined = None


#: the environment variables of ``start_processes`` (JAX's own names)
PROCESS_ENV = {
    "coordinator": "JAX_COORDINATOR_ADDRESS",
    "num_processes": "JAX_NUM_PROCESSES",
    "process_id": "JAX_PROCESS_ID",
}


def _process_settings(coordinator, num_processes, process_id):
    """The flags, else their environment variables, checked: (address, count, id)."""
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    for key, name in PROCESS_ENV.items():
        if given[key] is None and os.environ.get(name):
            value = os.environ[name]
            if key != "coordinator":
                try:
                    value = int(value)
                except ValueError:
                    raise DeviceError(f"{name}={value!r} is not an integer") from None
            given[key] = value
    missing = [f"--{k.replace('_', '-')} (or {PROCESS_ENV[k]})" for k, v in given.items() if v is None]
    if len(missing) == len(given):
        return None
    if given["num_processes"] is not None and given["num_processes"] < 1:
        raise DeviceError(f"--num-processes {given['num_processes']}: must be at least 1")
    if given["num_processes"] == 1 and given["process_id"] in (None, 0):
        return None
    if missing:
        raise DeviceError(f"a run of several processes needs {', '.join(missing)}")
    if not 0 <= given["process_id"] < given["num_processes"]:
        raise DeviceError(
            f"--process-id {given['process_id']}: must be in 0..{given['num_processes'] - 1} "
            f"(--num-processes {given['num_processes']})"
        )
    return given["coordinator"], given["num_processes"], given["process_id"]


def start_processes(
    coordinator=None, num_processes=None, process_id=None, timeout=300, heartbeat_timeout=100, tpu=None
):
    """Joins a run of several processes (``jax.distributed.initialize``) when the
    flags or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID ask for
    one, or ``tpu`` (``--tpu``: this host is one of a TPU slice, see
    ``join_tpu_slice``); a process that cannot reach the coordinator within
    ``timeout`` seconds stops with a one-line error naming it. Once joined, a
    process not heard from for ``heartbeat_timeout`` seconds is lost: the
    others' collectives and barriers fail (``stop_with_the_run``). Call before
    JAX's first computation; called again with the same settings (the command,
    then the library function it runs), it returns the run already joined.
    Returns the number of processes."""
    global _joined
    if tpu:
        _check_tpu_settings(tpu, (coordinator, num_processes, process_id))
    settings = ("tpu", tpu) if tpu else _process_settings(coordinator, num_processes, process_id)
    if _joined is not None:
        if settings != _joined:
            raise DeviceError(
                f"this process already joined a run of several processes ({_joined}); it cannot join another"
            )
        import jax

        return jax.process_count()
    if settings is None:
        return 1
    if tpu:
        count = join_tpu_slice(timeout, heartbeat_timeout)
    else:
        count = _join(*settings, timeout, heartbeat_timeout)
    _joined = settings
    return count


def _join(address, count, index, timeout, heartbeat_timeout):
    """``jax.distributed.initialize`` of process ``index`` of ``count`` at ``address``."""
    import jax

    start = time.monotonic()
    if index != 0:  # XLA's client aborts the process when the coordinator does not answer: ask first
        _wait_for_coordinator(address, index, count, timeout)
    # CPU devices of several processes reduce over gloo (TPU and GPU use their own links)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    left = max(10, int(timeout - (time.monotonic() - start)))
    try:
        jax.distributed.initialize(
            address,
            count,
            index,
            initialization_timeout=left,
            heartbeat_timeout_seconds=max(1, int(heartbeat_timeout)),
            shutdown_timeout_seconds=max(10, int(timeout)),
        )
    except Exception as e:  # noqa: BLE001 - XLA's coordination service raises its own kinds
        detail = first_line(e)
        raise DeviceError(
            f"--coordinator {address}: process {index} of {count} could not join the run within "
            f"{timeout:g} s ({detail[:200]})"
        ) from None
    return count


#: the name ``--tpu`` takes on JAX: the TPU of the VM the command runs on (``--tpu`` alone)
LOCAL_TPU = "local"


def check_tpu_name(tpu):
    if tpu != LOCAL_TPU:
        raise DeviceError(
            f"--tpu {tpu}: naming a TPU is TensorFlow's TPUStrategy; under KERAS_BACKEND=jax run the command "
            f"on every host of the TPU slice with --tpu alone (jax.distributed.initialize() finds the slice's hosts)"
        )


def _check_tpu_settings(tpu, flags):
    """``--tpu`` on JAX names no TPU and no process: ``flags`` (--coordinator,
    --num-processes, --process-id) must be unset, as JAX_NUM_PROCESSES /
    JAX_PROCESS_ID (nothing given is ignored)."""
    check_tpu_name(tpu)
    names = ("--coordinator", "--num-processes", "--process-id")
    given = [name for name, value in zip(names, flags) if value is not None]
    given += [name for name in (PROCESS_ENV["num_processes"], PROCESS_ENV["process_id"]) if os.environ.get(name)]
    if given:
        raise DeviceError(
            f"--tpu with {', '.join(given)}: on a TPU slice jax.distributed.initialize() takes the coordinator, "
            f"process count and id from the TPU VM; drop {', '.join(given)}, or drop --tpu to name the processes"
        )


def join_tpu_slice(timeout, heartbeat_timeout):
    """``--tpu`` on JAX: ``jax.distributed.initialize()`` without a coordinator,
    count or id, which a TPU VM's metadata gives (every host of the slice runs
    the same command); then the run is the processes' run of ``start_processes``.
    Returns the number of processes."""
    import jax

    try:
        jax.distributed.initialize(
            initialization_timeout=max(10, int(timeout)),
            heartbeat_timeout_seconds=max(1, int(heartbeat_timeout)),
            shutdown_timeout_seconds=max(10, int(timeout)),
        )
    except Exception as e:  # noqa: BLE001 - XLA's coordination service and JAX's cluster detection raise their own
        raise DeviceError(
            f"--tpu: jax.distributed.initialize() found no TPU slice to join within {timeout:g} s "
            f"({first_line(e)[:200]}); run the command on every host of a TPU VM slice"
        ) from None
    return jax.process_count()


def differing_processes(values):
    """The indices of the processes whose ``values`` (what defines their run: anything
    ``json.dumps`` writes, other objects by ``str``) differ from process 0's; [] on one process.
    An all-gather of an 8-byte digest: every process of the run calls it at the same point."""
    import jax

    if jax.process_count() == 1:
        return []
    import numpy as np
    from jax.experimental import multihost_utils

    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).digest()[:8]
    digests = np.asarray(multihost_utils.process_allgather(np.frombuffer(digest, np.uint32)))
    return [i for i in range(len(digests)) if not np.array_equal(digests[i], digests[0])]


@contextlib.contextmanager
def stop_with_the_run(again):
    """Around the training of a run of several processes: a failed computation
    (a collective whose peer process stopped: gloo's connection closed, or
    XLA's coordination service declaring it lost) ends this process at once
    with a one-line error ending ``start every process again <again()>``
    (``again``: a function, called then, e.g. naming the checkpoint the run
    resumes from). At once (``os._exit``): a normal exit would wait up to the
    coordinator timeout for the lost process at JAX's shutdown barrier."""
    import jax

    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if jax.process_count() == 1:
            raise
        detail = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        detail = detail.split(" This indicates")[0].split(" [type.googleapis")[0]  # XLA's advice and payload
        print(
            f"\nerror: process {jax.process_index()} of {jax.process_count()}: a computation with the other "
            f"processes failed ({detail[:200]}): a process of the run stopped or cannot be reached; start "
            f"every process again {again()}",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(2)


def _wait_for_coordinator(address, index, count, timeout):
    """Returns once ``address`` (HOST:PORT) accepts a connection; a one-line
    error naming it after ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise DeviceError(f"--coordinator {address}: expected HOST:PORT")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
            return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise DeviceError(
                    f"--coordinator {address}: process {index} of {count} could not reach it within "
                    f"{timeout:g} s ({e.strerror or e}); start process 0 there, or check the address"
                ) from None
            time.sleep(0.5)
