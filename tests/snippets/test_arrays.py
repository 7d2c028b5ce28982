"""gau_keras.snippets.arrays (bert4keras parity: tests/snippets/test_parity.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gau_keras.snippets import arrays
from gau_keras.snippets.arrays import sequence_padding


def test_to_array_one_or_several():
    assert isinstance(arrays.to_array([1, 2]), np.ndarray)
    a, b = arrays.to_array([[1]], [2.5])
    assert a.shape == (1, 1) and b.dtype == np.float64


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 9), max_size=7), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(0, 9)),
    st.sampled_from(["post", "pre"]),
    st.integers(-2, 2),
)
def test_sequence_padding_shapes_and_values(seqs, length, mode, value):
    out = arrays.sequence_padding(seqs, length=length, value=value, mode=mode)
    target = max(len(s) for s in seqs) if length is None else length
    assert out.shape == (len(seqs), target)
    for row, s in zip(out, seqs):
        kept = s[:target]
        pad = [value] * (target - len(kept))
        assert row.tolist() == (kept + pad if mode == "post" else pad + kept)


def test_sequence_padding_dtypes_and_seq_dims():
    assert arrays.sequence_padding([[1, 2], [3]]).dtype == np.int64
    floats = arrays.sequence_padding([np.ones((2, 3), "float32"), np.ones((1, 3), "float32")], value=-1)
    assert floats.dtype == np.float32 and floats.shape == (2, 2, 3) and (floats[1, 1] == -1).all()
    grids = [np.ones((2, 2)), np.ones((3, 3))]
    out = arrays.sequence_padding(grids, seq_dims=2)
    assert out.shape == (2, 3, 3) and out[0, 2].sum() == 0 and out[0, :2, :2].sum() == 4
    out = arrays.sequence_padding(grids, length=[2, 4], seq_dims=2, mode="pre")
    assert out.shape == (2, 2, 4) and out[0, :, :2].sum() == 0


def test_sequence_padding_errors():
    with pytest.raises(ValueError, match="mode"):
        arrays.sequence_padding([[1]], mode="middle")
    with pytest.raises(ValueError, match="empty"):
        arrays.sequence_padding([])


def test_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1001.0, 999.0], [0.0, 0.0, 0.0]])
    p = arrays.softmax(x)
    assert np.allclose(p.sum(-1), 1) and np.allclose(p[1], 1 / 3)
    assert p[0].argmax() == 1
    assert np.allclose(arrays.softmax(x, axis=0).sum(0), 1)


def test_orthogonally_resize_keeps_norm_and_blocks():
    a = np.arange(1.0, 9.0).reshape(2, 4)
    b = arrays.orthogonally_resize(a, (2, 8))
    assert b.shape == (2, 8)
    assert np.isclose(np.linalg.norm(b), np.linalg.norm(a))
    assert np.allclose(b[0] / b[0, 0], [1, 2, 1, 2, 3, 4, 3, 4])  # windows of 2 repeated
    with pytest.raises(ValueError, match="new_shape"):
        arrays.orthogonally_resize(a, (2,))


# ---------------------------------------------------------------- bad input (issue 36)


@pytest.mark.parametrize(
    "args, message",
    [
        (([[[1, 2], [3]], [[4]]],), "sequence 0 is ragged"),
        (([[1, 2], [3]], -1), r"length must be None, an integer >= 0 or 1 of them, got \[-1\]"),
        (([[1, 2], [3]], 2.5), "length must be None"),
        (([[1, 2], [3]], None, 0, 2), r"seq_dims=2 but sequence 0 has only 1 axes \(shape \(2,\)\)"),
        (([[1, 2], [3]], None, 0, 0), "seq_dims must be a positive integer, got 0"),
        (
            ([np.zeros((2, 3)), np.zeros((2, 4))],),
            r"the axes after the first 1 must agree; sequence 1 has shape \(2, 4\)",
        ),
    ],
)
def test_sequence_padding_names_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        sequence_padding(*args)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(-5, 5), max_size=6), min_size=1, max_size=5),
    length=st.one_of(st.none(), st.integers(0, 8)),
    mode=st.sampled_from(["post", "pre"]),
)
def test_sequence_padding_pads_and_cuts_every_row(rows, length, mode):
    padded = sequence_padding(rows, length=length, value=9, mode=mode)
    target = max(len(r) for r in rows) if length is None else length
    assert padded.shape == (len(rows), target)
    for row, got in zip(rows, padded.tolist()):
        kept = row[:target]
        fill = [9] * (target - len(kept))
        assert got == (kept + fill if mode == "post" else fill + kept)


def test_sequence_padding_takes_numpy_lengths():
    assert sequence_padding([[1, 2], [3]], length=np.int64(3)).tolist() == [[1, 2, 0], [3, 0, 0]]
    assert sequence_padding([[1, 2], [3]], length=np.array(1)).tolist() == [[1], [3]]
