"""The output folder of a fine-tuning run (``--out-dir``): the names of its outputs, the
check that a finished run's outputs are not replaced, and its run lock
(`gau_keras.training.run_dir.RunLock`, as a pretraining run directory)."""

import json
import pathlib

from gau_keras.training.finetune.options import OUT_DIR_FLAG


def output_paths(out_dir, task_name):
    """The paths of a run's outputs in ``out_dir``: ``weights``, ``model``, ``metrics``, ``predictions``."""
    out_dir = pathlib.Path(out_dir)
    return {
        "weights": out_dir / f"{task_name}_best.weights.h5",
        "model": out_dir / f"{task_name}_best.keras",
        "metrics": out_dir / f"{task_name}_metrics.json",
        "predictions": out_dir / f"{task_name}_predict.json",
    }


def check_outputs(paths, overwrite, write=True):
    """Refuses (FileExistsError) to run when an output of a finished run exists
    and overwrite is off. The outputs of a run that did not finish (its
    metrics file missing, unreadable or without ``finished``) are replaced,
    with a message saying so; leftover temporary files are removed. ``write``
    off (a process of several that is not process 0): the check only."""
    from gau_keras.training.run_dir import temporary_path

    for leftover in (pathlib.Path(temporary_path(p)) for p in paths.values()):
        if write:
            leftover.unlink(missing_ok=True)
    existing = [str(p) for p in paths.values() if p.exists()]
    if not existing or overwrite:
        return
    try:
        finished = json.loads(paths["metrics"].read_text(encoding="utf-8")).get("finished")
    except (OSError, ValueError, AttributeError):
        finished = False
    if finished:
        raise FileExistsError(
            f"output(s) {', '.join(existing)} already exist; pass --overwrite (Options."
            f"overwrite=True) to replace them, or give another {OUT_DIR_FLAG}"
        )
    if not write:
        return
    print(
        f"replacing the outputs of an interrupted run ({', '.join(existing)}): {paths['metrics']} does not "
        f"say that run finished"
    )
    paths["predictions"].unlink(missing_ok=True)  # its writer refuses an existing file unless overwrite is set


def lock_out_dir(out_dir):
    """Creates ``out_dir`` and takes its run lock (`gau_keras.training.run_dir.RunLock`), before any work;
    a folder that cannot be written or is in use is a ValueError (`run_dir.RunDirError`) naming it."""
    from gau_keras.training.run_dir import RunLock

    return RunLock(str(out_dir), option=OUT_DIR_FLAG).acquire()
