"""The recurrence written the straightforward way, differentiated by autodiff.

The reference for the tests and the baseline of ``benchmarks/srupp_speed.py``:
one ``tf.while_loop`` per direction with every gate computed inside the loop,
which keeps every step's intermediates for the backward pass.
"""

import tensorflow as tf

from gau_keras.recurrence.tensorflow.prepare import prepare


def sru_recurrence_autodiff(
    U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None, dropout_mask=None, bidirectional=False
):
    """Same contract as ``sru_recurrence``, written the straightforward way: one
    ``tf.while_loop`` per direction with every gate computed inside the loop
    (inputs read per step from time-major TensorArrays), differentiated by
    TensorFlow's autodiff, which keeps every step's intermediates.  It is the
    reference for the gradient tests and the baseline for the benchmarks."""
    p = prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    U, x, weight_c, bias, c0, pad, scale, mask_c = p.tensors
    out_dtype = p.out_dtype
    dirs, d, k = p.layout
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale
    w = tf.reshape(weight_c, [2, dirs, d])
    b = tf.reshape(bias, [2, dirs, d])
    m = tf.reshape(mask_c, [B, dirs, d])
    hs, cs_last = [], []
    for di in range(dirs):

        def time_major(t, di=di):
            t = tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))
            return tf.TensorArray(U.dtype, size=L).unstack(t if di == 0 else tf.reverse(t, [0]))

        u_ta, xp_ta = time_major(Uk[:, :, di]), time_major(xp[:, :, di])
        pad_ta = tf.TensorArray(tf.bool, size=L).unstack(
            tf.transpose(pad if di == 0 else tf.reverse(pad, [1]))[:, :, None]
        )

        def body(t, c_prev, h_acc, di=di, u_ta=u_ta, xp_ta=xp_ta, pad_ta=pad_ta):
            u, xp_t, p = u_ta.read(t), xp_ta.read(t), pad_ta.read(t)
            f = tf.sigmoid(u[..., 1] + w[0, di] * c_prev + b[0, di])
            r = tf.sigmoid(u[..., 2] + w[1, di] * c_prev + b[1, di])
            c = u[..., 0] + (c_prev - u[..., 0]) * f
            h = xp_t + (c - xp_t) * m[:, di] * r
            return t + 1, tf.where(p, c_prev, c), h_acc.write(t, tf.where(p, tf.zeros_like(h), h))

        _, c_last, h_acc = tf.while_loop(
            lambda t, *_: t < L,
            body,
            (tf.constant(0), tf.reshape(c0, [B, dirs, d])[:, di], tf.TensorArray(U.dtype, size=L)),
            maximum_iterations=U.shape[1] or L,
        )  # a static bound lets XLA compile the loop
        h = h_acc.stack()
        hs.append(tf.transpose(h if di == 0 else tf.reverse(h, [0]), [1, 0, 2]))
        cs_last.append(c_last)
    h = tf.concat(hs, axis=-1)
    return tf.cast(h, out_dtype), tf.cast(tf.concat(cs_last, axis=-1), out_dtype)
