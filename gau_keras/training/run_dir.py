"""Run directories of pretraining and fine-tuning: one run at a time
(`RunLock`), outputs written whole or not at all (`save_atomically`,
`write_text`, `write_json`), and for pretraining, resume from the newest
checkpoint that restores and a log that continues without repeats.

    output_dir/
      .lock                 held (flock) by the run using the directory, removed when it ends
      checkpoints/          TensorFlow: ckpt-N.{index,data-*} + the 'checkpoint' state file;
                            JAX: N/ (orbax checkpoint steps)
      checkpoints/unrestorable/   checkpoints that failed to restore, moved aside
      log.jsonl             one JSON record per logged update / evaluation
      restarted-<time>/     what --restart moved aside

TensorFlow's checkpoints are found by scanning ``ckpt-N.index`` files, not only through the
state file, so a deleted or garbled state file never makes a run start over;
the state file is rewritten from the scan. Restoring tries the newest first
and falls back to older ones with a warning naming the file.

Design notes: docs/pretraining.md (The run directory).
"""

import json
import math
import os
import re
import socket
import stat
import sys
import time

import tensorflow as tf

from gau_keras import flags
from gau_keras.errors import CheckpointError, RunDirError, first_line

CHECKPOINT_RE = re.compile(r"^ckpt-(\d+)\.index$")
#: what a run writes into its .lock
LOCK_TEXT_RE = re.compile(r"^pid \d+ on .* since ")
#: an orbax checkpoint step folder (one being written has a temporary name, N.orbax-checkpoint-tmp-*)
ORBAX_STEP_RE = re.compile(r"^(\d+)$")
#: orbax's marker of a finished step on file systems without an atomic rename (gs://)
ORBAX_COMMIT = "commit_success.txt"
#: each backend's checkpoints, as errors name them
FORMATS = {"tensorflow": "TensorFlow checkpoints (ckpt-N.index)", "jax": "orbax checkpoints (N/, of JAX)"}
#: what a restore of a damaged checkpoint raises (truncated data: IndexError / DataLossError)
RESTORE_ERRORS = (tf.errors.OpError, ValueError, IndexError, AssertionError, KeyError)


def warn(message):
    print(f"warning: {message}", file=sys.stderr, flush=True)


def is_local(path):
    return "://" not in path


def check_writable_dir(directory, option):
    """Creates the local folder ``directory`` and checks that it can be written; a
    `RunDirError` naming it and ``option`` (the flag or key that gave it) otherwise."""
    flags.check_writable_folder(directory, option, RunDirError)


class RunLock:
    """An exclusive ``flock`` on ``output_dir/.lock``; the file names the holder
    and is removed when the run releases it.

    The kernel drops the lock when the holding process dies (even by SIGKILL),
    so a crashed run never leaves a stale lock (only its file, which the next run
    takes over). The ``.lock`` is opened without following links and must be a
    regular file of its own that holds a lock's line: a link or any other file
    there is refused, never written. Remote (``gs://``) run directories cannot
    be locked; a warning says so.

    option: the flag or config key that gave ``output_dir``, as errors name it.
    """

    def __init__(self, output_dir, option="train.output_dir (--output-dir)"):
        self.path = os.path.join(output_dir, ".lock")
        self.option = option
        self._fd = None

    def acquire(self):
        """Takes the lock (a `RunDirError` when the folder cannot be used or another run holds it)."""
        directory = os.path.dirname(self.path)
        if not is_local(directory):
            warn(f"{directory} is not a local directory: no lock guards it against a second trainer")
            return self
        check_writable_dir(directory, self.option)
        while self._fd is None:
            fd = self._open()
            if self._locked(fd):  # else another run removed the file in between: open the new one
                self._fd = fd
        os.ftruncate(self._fd, 0)
        os.write(
            self._fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode()
        )
        os.fsync(self._fd)
        return self

    def _refuse(self, what, fd=None):
        if fd is not None:
            os.close(fd)
        raise RunDirError(f"{self.path} is {what}, not a run lock file: move it away or give another {self.option}")

    def _open(self):
        """The ``.lock``'s descriptor, opened without following a link (and without blocking)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            reason = e.strerror or str(e)
        else:
            reason = None
        if reason is not None:
            if os.path.islink(self.path):
                self._refuse("a symbolic link")
            if os.path.isdir(self.path):
                self._refuse("a folder")
            raise RunDirError(f"cannot open the lock file {self.path} ({reason}); give another {self.option}")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            self._refuse("not a regular file", fd)
        if st.st_nlink > 1:
            self._refuse(f"a file with {st.st_nlink} hard links", fd)
        return fd

    def _locked(self, fd):
        """flocks ``fd``; False (``fd`` closed) when the path no longer names the locked file."""
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise RunDirError(
                f"run directory {os.path.dirname(self.path)} is in use by {holder} (lock file "
                f"{self.path}); wait for that run to end or give another {self.option}"
            ) from None
        try:
            current = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        st = os.fstat(fd)
        if current is None or (current.st_dev, current.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            return False
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        if text and not LOCK_TEXT_RE.match(text):
            self._refuse("a file holding other data", fd)
        return True

    def release(self):
        """Removes the ``.lock`` while still holding it, then drops the lock."""
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except OSError as e:
                warn(f"could not remove the lock file {self.path} ({e.strerror or e})")
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def temporary_path(path):
    """Where ``path`` is written before it is renamed into place: ``name.partial.ext``
    (the suffix is kept, ``.weights.h5`` whole: Keras checks it)."""
    path = str(path)
    suffix = ".weights.h5" if path.endswith(".weights.h5") else os.path.splitext(path)[1]
    return f"{path[: len(path) - len(suffix)]}.partial{suffix}"


def save_atomically(save, path):
    """``save(temporary path)``, then the temporary file renamed to ``path``: a killed
    run never leaves a truncated file under its final name (local or ``gs://`` paths)."""
    temporary = temporary_path(path)
    try:
        save(temporary)
        tf.io.gfile.rename(temporary, str(path), overwrite=True)
    finally:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.remove(temporary)


def write_text(path, text):
    """Writes ``text`` to ``path`` atomically (`save_atomically`)."""

    def save(temporary):
        with tf.io.gfile.GFile(temporary, "w") as f:
            f.write(text)

    save_atomically(save, path)


def _finite(value):
    """``value`` with every NaN / infinity replaced by None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(path, value, indent=1):
    """Writes ``value`` as strict JSON (NaN and infinities as null) to ``path`` atomically."""
    write_text(path, json.dumps(_finite(value), ensure_ascii=False, indent=indent, allow_nan=False) + "\n")


def checkpoint_number(prefix):
    match = CHECKPOINT_RE.match(os.path.basename(prefix) + ".index")
    return int(match.group(1)) if match else None


def scan_checkpoints(directory):
    """Prefixes of the ``ckpt-N`` checkpoints in ``directory``, oldest first."""
    if not tf.io.gfile.isdir(directory):
        return []
    found = []
    for name in tf.io.gfile.listdir(directory):
        match = CHECKPOINT_RE.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name[: -len(".index")])))
    return [prefix for _, prefix in sorted(found)]


def orbax_steps(directory):
    """Paths of the finished orbax checkpoint steps ``N/`` in ``directory``, oldest first."""
    if not tf.io.gfile.isdir(directory):
        return []
    found = []
    for name in tf.io.gfile.listdir(directory):
        name = name.rstrip("/")
        path = os.path.join(directory, name)
        if (
            ORBAX_STEP_RE.match(name)
            and tf.io.gfile.isdir(path)
            and (is_local(path) or tf.io.gfile.exists(os.path.join(path, ORBAX_COMMIT)))
        ):
            found.append((int(name), path))
    return [path for _, path in sorted(found)]


def checkpoint_updates(directory):
    """``{backend: [update, ...]}`` of the checkpoints in ``directory``, oldest first."""
    return {
        "tensorflow": [checkpoint_number(p) for p in scan_checkpoints(directory)],
        "jax": [int(os.path.basename(p)) for p in orbax_steps(directory)],
    }


def newest_update(output_dir):
    """The update number of the newest checkpoint in ``output_dir/checkpoints`` (0 when none)."""
    updates = checkpoint_updates(os.path.join(output_dir, "checkpoints"))
    return max(updates["tensorflow"] + updates["jax"], default=0)


def refuse_other_format(directory, backend):
    """A run's checkpoints resume on the backend that wrote them: an error
    when ``directory`` holds the other backend's."""
    other = next(name for name in FORMATS if name != backend)
    found = checkpoint_updates(directory)[other]
    if found:
        raise RunDirError(
            f"{directory} holds {FORMATS[other]} up to update {found[-1]}, written under "
            f"KERAS_BACKEND={other}; resume the run there, or pass --restart to move them aside and "
            f"start from update 0 under KERAS_BACKEND={backend}"
        )


def disk_full(update, directory, kept):
    """The error of a checkpoint that did not fit on the disk (``kept``: the
    checkpoints left, oldest first): a `RunDirError`."""
    raise RunDirError(
        f"cannot write checkpoint {update} to {directory}: no space left on device; "
        + (f"the previous checkpoint {os.path.basename(kept[-1])} is kept" if kept else "no earlier checkpoint exists")
        + "; free some space and start the run again to resume"
    ) from None


def _state_file_problem(directory, prefixes):
    """Why the state file cannot be trusted (or None): missing, unparsable,
    or naming a checkpoint other than the newest one on disk."""
    path = os.path.join(directory, "checkpoint")
    if not tf.io.gfile.exists(path):
        return f"{path} is missing"
    try:
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
        from google.protobuf import text_format
        from tensorflow.python.checkpoint.checkpoint_management import CheckpointState

        state = text_format.Parse(text, CheckpointState())
    except Exception as e:  # noqa: BLE001 - garbled text, bytes, protobuf errors alike
        return f"{path} is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    latest = os.path.basename(state.model_checkpoint_path)
    if prefixes and latest != os.path.basename(prefixes[-1]):
        return f"{path} names {latest!r}, not the newest checkpoint {os.path.basename(prefixes[-1])!r}"
    return None


def write_state_file(directory, prefixes):
    """Rewrites the state file so that it lists ``prefixes`` (newest last)."""
    tf.compat.v1.train.update_checkpoint_state(
        directory,
        prefixes[-1],
        all_model_checkpoint_paths=prefixes,
        all_model_checkpoint_timestamps=[time.time()] * len(prefixes),
    )


def _move_aside(prefix, folder):
    tf.io.gfile.makedirs(folder)
    for path in tf.io.gfile.glob(prefix + ".*"):
        tf.io.gfile.rename(path, os.path.join(folder, os.path.basename(path)), overwrite=True)


def move_step_aside(path, folder):
    """Moves the checkpoint folder ``path`` into ``folder`` (replacing one of
    the same name moved there before)."""
    tf.io.gfile.makedirs(folder)
    target = os.path.join(folder, os.path.basename(path))
    if tf.io.gfile.exists(target):
        tf.io.gfile.rmtree(target)
    tf.io.gfile.rename(path, target)


def restore_newest(checkpoint, directory, repair=True):
    """Restores ``checkpoint`` (a ``tf.train.Checkpoint``) from the newest
    ``ckpt-N`` in ``directory`` that restores.

    Checkpoints that fail are moved to ``directory/unrestorable/`` with a
    warning naming them, and the state file is rewritten to list those that
    remain (not with ``repair=False``: another process owns the folder).
    Returns the restored prefix, or None when there was none;
    raises `CheckpointError` when checkpoints exist but none restores.
    """
    prefixes = scan_checkpoints(directory)
    if not prefixes:
        return None
    problem = _state_file_problem(directory, prefixes)
    if problem and repair:
        warn(f"{problem}; resuming from the checkpoint files found in {directory}")
    failed = []
    for prefix in reversed(prefixes):
        try:
            checkpoint.restore(prefix).assert_existing_objects_matched()
        except RESTORE_ERRORS as e:
            detail = first_line(e)
            if repair:
                warn(f"checkpoint {prefix} does not restore ({type(e).__name__}: {detail}); trying the previous one")
            failed.append(prefix)
            continue
        if repair:
            for bad in failed:
                _move_aside(bad, os.path.join(directory, "unrestorable"))
                warn(f"moved the unrestorable {bad}.* to {os.path.join(directory, 'unrestorable')}")
            if problem or failed:
                write_state_file(directory, [p for p in prefixes if p not in failed])
        return prefix
    raise CheckpointError(
        f"none of the {len(prefixes)} checkpoints in {directory} restores (newest "
        f"{prefixes[-1]}); fix or remove them, or pass --restart to move them aside and "
        f"start from update 0"
    )


def move_previous_run(output_dir):
    """--restart: moves checkpoints/, logs/, log.jsonl and export/ into
    ``restarted-<time>/`` (nothing is deleted); returns that folder or None."""
    names = [
        n for n in ("checkpoints", "logs", "log.jsonl", "export") if tf.io.gfile.exists(os.path.join(output_dir, n))
    ]
    if not names:
        return None
    target = os.path.join(output_dir, time.strftime("restarted-%Y%m%d-%H%M%S"))
    tf.io.gfile.makedirs(target)
    for name in names:
        tf.io.gfile.rename(os.path.join(output_dir, name), os.path.join(target, name))
    return target


def continue_log(path, update):
    """Drops the records of ``log.jsonl`` after ``update`` (a resumed run
    redoes those updates, so they would appear twice) and any torn last line
    of a killed run. Returns the number of records dropped."""
    if not tf.io.gfile.exists(path):
        return 0
    with tf.io.gfile.GFile(path) as f:
        lines = f.read().splitlines()
    kept, dropped = [], 0
    for line in lines:
        try:
            record = json.loads(line)
            keep = int(record["update"]) <= update
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            keep = False
        if keep:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        write_text(path, "".join(line + "\n" for line in kept))
    return dropped
