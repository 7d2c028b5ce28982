"""Masked-LM pretraining of GAU-alpha (or RoFormerV2 / SRU++) on TFRecord shards.

    python pretrain/pretrain.py --config pretrain/configs/tiny.json
    python pretrain/pretrain.py --config pretrain/configs/base.json --tpu my-tpu \
        --data 'gs://bucket/shards/shard-*.tfrecord' --output-dir gs://bucket/run1
    python pretrain/pretrain.py --config ... --export-only     # TF1 export of the latest checkpoint
    KERAS_BACKEND=jax python pretrain/pretrain.py --config ...  # on JAX: DataParallel, orbax checkpoints
    KERAS_BACKEND=jax python pretrain/pretrain.py --config ... --tpu  # on every host of a TPU VM slice

The run directory (``train.output_dir``) holds ``checkpoints/`` (tf.train
checkpoints, or orbax ones under JAX, of model, optimizer, data iterator and
step counter, every ``save_every`` updates), ``logs/`` (TensorBoard), ``log.jsonl`` (one line per
logged update) and ``export/`` (bert_config.json, bert_model.ckpt.*, vocab.txt
in the original format). Starting again on the same run directory resumes from
the last checkpoint: same data order, same optimizer state, no step repeated
or skipped. Relative paths in the config are taken from the current directory.
"""

import argparse
import gc
import os
import sys
import time

from gau_keras import cli_env, flags
from gau_keras.errors import CheckpointError, ConfigError, GauKerasError
from gau_keras.training.pretrain import config as config_lib


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="JSON run config (see pretrain/configs/)")
    parser.add_argument("--data", help="override data.train (a file pattern of TFRecord shards)")
    parser.add_argument("--eval-data", help="override data.eval (held-out shards for masked accuracy)")
    parser.add_argument("--output-dir", help="override train.output_dir")
    parser.add_argument("--steps", type=flags.positive_int, help="override train.steps (optimizer updates)")
    parser.add_argument(
        "--max-minutes", type=flags.positive_float, help="stop (after saving) once this wall time is spent"
    )
    parser.add_argument("--init-checkpoint", help="override train.init_checkpoint (TF1 checkpoint to start from)")
    parser.add_argument(
        "--tpu",
        nargs="?",
        const="local",
        metavar="NAME",
        help="train on TPUs, with mixed_bfloat16. TensorFlow: TPUStrategy on the TPU NAME or address (--tpu "
        "alone: 'local', the TPU VM's own). JAX (KERAS_BACKEND=jax): give it alone on every host of a TPU VM "
        "slice: jax.distributed.initialize() without arguments (the TPU VM names the coordinator, count and id; "
        "no --coordinator flags), then DataParallel over every host's TPU cores",
    )
    parser.add_argument(
        "--devices",
        type=flags.positive_int,
        help="train on this host's first N devices (JAX: of its local devices, by default all; "
        "TensorFlow: MirroredStrategy over N GPUs, or N logical CPUs; by default the "
        "strategy follows the machine and TF_CONFIG)",
    )
    processes = parser.add_argument_group(
        "several JAX processes (KERAS_BACKEND=jax; one command per host, or per process on one host)"
    )
    processes.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="process 0's address, which every process joins (default: JAX_COORDINATOR_ADDRESS)",
    )
    processes.add_argument(
        "--num-processes", type=flags.positive_int, help="processes of the run (default: JAX_NUM_PROCESSES)"
    )
    processes.add_argument(
        "--process-id", type=flags.non_negative_int, help="this process's index, 0 to N-1 (default: JAX_PROCESS_ID)"
    )
    processes.add_argument(
        "--coordinator-timeout",
        type=flags.positive_float,
        default=300.0,
        help="seconds to wait for the coordinator and the other processes (default 300)",
    )
    processes.add_argument(
        "--heartbeat-timeout",
        type=flags.positive_float,
        default=100.0,
        help="seconds after which a process not heard from is lost and every other process stops "
        "with an error (default 100, JAX's)",
    )
    xla = parser.add_mutually_exclusive_group()
    xla.add_argument(
        "--xla",
        dest="xla",
        action="store_true",
        default=None,
        help="jit-compile the training step (default: train.xla, else on for TPU/GPU, off on CPU)",
    )
    xla.add_argument("--no-xla", dest="xla", action="store_false", help="do not jit-compile the training step")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="move an earlier run in the output dir aside (restarted-<time>/) and start "
        "from update 0; without it an earlier run is resumed",
    )
    parser.add_argument(
        "--export-only", action="store_true", help="export the latest checkpoint to the original TF1 format and exit"
    )
    parser.add_argument(
        "--evaluate-only",
        action="store_true",
        help="evaluate the latest checkpoint on all of data.eval, log it and exit",
    )
    args = parser.parse_args(argv)
    if args.num_processes is not None and args.process_id is not None and args.process_id >= args.num_processes:
        parser.error(f"--process-id {args.process_id}: must be below --num-processes {args.num_processes}")
    return args


def main(argv=None):
    """The ``pretrain`` command; a `GauKerasError` (bad config, data, run directory, devices)
    ends it as the one line ``error: <message>``."""
    cli_env.default_tf_log_level()  # before TensorFlow loads (not on import)
    args = parse_args(argv)
    try:
        return execute(args)
    except GauKerasError as error:
        raise SystemExit(f"error: {error}") from None


def execute(args):
    """What ``main`` runs for the parsed ``args``: train, or ``--evaluate-only`` / ``--export-only``."""
    config = config_lib.load(args.config, args)
    from gau_keras.training.pretrain import trainer  # imports TensorFlow

    if args.evaluate_only and not config["data"]["eval"]:
        raise ConfigError("--evaluate-only needs data.eval (or --eval-data)")
    stages = config_lib.stage_configs(config, args.config)
    if not (args.evaluate_only or args.export_only):
        train_stages(trainer, stages, args)
        return 0
    from gau_keras.training import run_dir

    output_dir = config["train"]["output_dir"]
    if not any(run_dir.checkpoint_updates(os.path.join(output_dir, "checkpoints")).values()):
        flag = "--evaluate-only" if args.evaluate_only else "--export-only"
        raise CheckpointError(
            f"{flag}: no checkpoint in {os.path.join(output_dir, 'checkpoints')}; "
            f"train first (the random initial weights are not a model)"
        )
    # evaluate with the data settings of the stage the newest checkpoint is in
    if args.evaluate_only:
        index = stage_of(stages, run_dir.newest_update(config["train"]["output_dir"]))
    else:
        index = -1
    run = trainer.Trainer(stages[index][1], tpu=args.tpu, xla=args.xla, restart=args.restart, devices=args.devices)
    try:
        if args.evaluate_only:
            run.log_evaluation(batches=0)
        else:
            print(f"exported step {run.updates()} to {run.export()}")
    finally:
        run.close()
    return 0


def stage_of(stages, update):
    """The index in ``stages`` (``[(end, config)]``) of the stage that trains the update after ``update``."""
    return next((i for i, (end, _) in enumerate(stages) if update < end), len(stages) - 1)


def train_stages(trainer, stages, args):
    """Trains each stage in turn from where the run directory stands: a new
    Trainer per stage resumes the previous stage's last checkpoint, as a run
    stopped and started again with the config edited would. One set of devices and
    one hold of the run directory's lock serve all stages."""
    from gau_keras.training import run_dir

    start = time.time()
    trainer.start_processes(
        args.coordinator,
        args.num_processes,
        args.process_id,
        args.coordinator_timeout,
        args.heartbeat_timeout,
        tpu=args.tpu,
    )
    devices = trainer.choose_devices(args.tpu, args.devices)  # first: MultiWorkerMirroredStrategy precedes any TF op
    for _, stage in stages:  # a stage's data error now, not hours into the run
        trainer.check_data(stage)
    output_dir = stages[-1][1]["train"]["output_dir"]
    lock = trainer.lock_run_dir(output_dir) if devices.is_chief else None
    try:
        index = 0 if args.restart else stage_of(stages, run_dir.newest_update(output_dir))
        restart = args.restart
        while True:
            end, stage = stages[index]
            run = trainer.Trainer(stage, xla=args.xla, restart=restart, devices=devices, lock=lock)
            restart, done = False, run.updates()
            if stage_of(stages, done) != index:  # the newest checkpoint did not restore: an older stage's
                run.close()
                index = stage_of(stages, done)
                continue
            if len(stages) > 1:
                print(f"stage {index + 1} of {len(stages)}: updates {done} to {end}")
            left = None if args.max_minutes is None else args.max_minutes - (time.time() - start) / 60
            run.train(max_minutes=left, until=end)
            if run.stopped_early or index == len(stages) - 1:
                return
            run = None
            gc.collect()  # the previous stage's model, optimizer and pipeline buffers
            index += 1
            if args.max_minutes is not None and time.time() - start >= 60 * args.max_minutes:
                print(f"the time limit is spent: stage {index + 1} starts when the run is resumed")
                return
    finally:
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    sys.exit(flags.command_status(main))
