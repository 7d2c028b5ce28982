"""Numpy helpers of bert4keras's snippets: batch conversion, padding,
softmax and the window-repeating resize of weight matrices."""

import numpy as np

_PAD_MODES = ("post", "pre")


def to_array(*args):
    """``np.array`` of each argument; one argument gives one array, several a list."""
    arrays = [np.array(a) for a in args]
    return arrays[0] if len(args) == 1 else arrays


def sequence_padding(inputs, length=None, value=0, seq_dims=1, mode="post"):
    """Pads (and cuts) a batch of sequences to one length: [B, *length, ...].

    Args:
        inputs: a list of sequences (lists or arrays); their first ``seq_dims``
            axes are padded, the remaining axes must agree.
        length: an int, a list of ``seq_dims`` ints, or None for the longest in
            the batch along each padded axis. Longer sequences are cut.
        value: the padding value (cast to the sequences' dtype).
        seq_dims: how many leading axes are sequence axes (2 for [L, L] labels).
        mode: 'post' pads at the end, 'pre' at the start (cutting always keeps
            the start).

    Returns:
        ``np.array`` of the padded sequences (dtype as numpy infers it from
        them: int64 for lists of ints).
    """
    if mode not in _PAD_MODES:
        raise ValueError('"mode" argument must be "post" or "pre".')
    if len(inputs) == 0:
        raise ValueError("sequence_padding: inputs is empty (no sequence to pad)")
    if isinstance(seq_dims, bool) or not isinstance(seq_dims, (int, np.integer)) or seq_dims < 1:
        raise ValueError(f"sequence_padding: seq_dims must be a positive integer, got {seq_dims!r}")
    shapes = [_regular_shape(x, i) for i, x in enumerate(inputs)]
    for i, shape in enumerate(shapes):
        if len(shape) < seq_dims:
            raise ValueError(
                f"sequence_padding: seq_dims={seq_dims} but sequence {i} has only {len(shape)} axes (shape {shape})"
            )
        if shape[seq_dims:] != shapes[0][seq_dims:]:
            raise ValueError(
                f"sequence_padding: the axes after the first {seq_dims} must agree; sequence {i} "
                f"has shape {shape}, sequence 0 {shapes[0]}"
            )
    if length is None:
        length = np.max([shape[:seq_dims] for shape in shapes], axis=0)
    elif np.ndim(length) == 0:  # an int, a numpy integer or a 0-d array
        length = [length.item() if isinstance(length, np.ndarray) else length]
    if len(length) < seq_dims or any(
        isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in length[:seq_dims]
    ):
        raise ValueError(
            f"sequence_padding: length must be None, an integer >= 0 or {seq_dims} of them, got {length!r}"
        )
    cut = tuple(slice(None, length[axis]) for axis in range(seq_dims))
    cut = cut if seq_dims > 1 else cut[0]

    rank = len(np.shape(inputs[0]))

    def pad(x):
        x = np.asarray(x)[cut]
        widths = [(0, 0)] * rank
        for axis in range(seq_dims):
            missing = length[axis] - np.shape(x)[axis]
            widths[axis] = (0, missing) if mode == "post" else (missing, 0)
        return np.pad(x, widths, "constant", constant_values=value)

    return np.array([pad(x) for x in inputs])


def _regular_shape(x, index):
    """The shape of sequence ``index``; a ragged one (inner lists of different lengths) is named."""
    try:
        return np.shape(np.asarray(x))
    except ValueError:
        raise ValueError(
            f"sequence_padding: sequence {index} is ragged (its inner lists differ in length, so "
            f"it is no array); pad its inner lists to one length first"
        ) from None


def softmax(x, axis=-1):
    """Numpy softmax along ``axis`` (max-shifted, so large logits do not overflow)."""
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def orthogonally_resize(a, new_shape, window=2):
    """Resizes weight matrix ``a`` to ``new_shape``, keeping its Frobenius norm.

    Along a growing axis, blocks of ``window`` consecutive entries are repeated
    (the axis length must divide by ``window``) until the axis is long enough;
    every axis is then cut to its new length and the result is rescaled to the
    norm of ``a``. bert4keras uses it to initialise a wider model from a
    narrower one.
    """
    if a.ndim != len(new_shape):
        raise ValueError(
            f"orthogonally_resize: new_shape {tuple(new_shape)} must have {a.ndim} axes like a (shape {a.shape})"
        )
    norm = np.linalg.norm(a)
    for axis, (old, new) in enumerate(zip(a.shape, new_shape)):
        repeats = -(-new // old)
        if old == new or repeats <= 1:
            continue
        if old % window:
            raise ValueError(f"orthogonally_resize: axis {axis} has length {old}, not a multiple of window={window}")
        blocks = a.reshape(a.shape[:axis] + (old // window, window) + a.shape[axis + 1 :])
        blocks = np.repeat(blocks, repeats, axis=axis)
        a = blocks.reshape(a.shape[:axis] + (old * repeats,) + a.shape[axis + 1 :])
    a = a[tuple(slice(None, n) for n in new_shape)]
    return a / np.linalg.norm(a) * norm
