"""Keras 2's backend API (``keras.backend as K``) on Keras 3's ``keras.ops``.

``gau_keras.backend.K`` is this module: bert4keras scripts call ``K.sum``,
``K.cast``, ``K.eval``, ``K.set_value``, ``K.sparse_categorical_crossentropy``,
``K.in_train_phase``, ... as they did on Keras 2, and run on every Keras 3
backend. The names, signatures and defaults are Keras 2's; the results equal
``tf_keras.backend``'s on the same inputs (tests/bert4keras/test_backend.py checks them
against the original). ``reshape``, ``flatten`` and ``where`` are the extended
versions bert4keras installed on its ``K`` (they accept every Keras 2 call too).

Where Keras 3 has no equivalent of a Keras 2 concept:

* no global learning phase: ``learning_phase()`` and ``in_train_phase`` read the
  ``training`` flag Keras 3 passes down the layer calls (True under ``fit``,
  False under ``predict``/``evaluate``); outside any layer call there is no
  phase and they answer "not training" (0 / the alternative), which is what
  Keras 2 answered outside ``fit``;
* no graph/session: ``update*``/``set_value`` assign at once, ``eval`` and
  ``get_value`` return numpy, ``function`` wraps a functional ``keras.Model``,
  and ``gradients`` works only inside a traced TensorFlow function (it raises
  elsewhere and names the Keras 3 way: a ``train_step`` with a tape);
* ``zeros``/``ones``/``eye`` return a ``keras.Variable`` (as Keras 2 did) only
  when called eagerly outside layer calls, and a tensor inside them;
* ``argmax``/``argmin`` return int32 (Keras 3's index dtype; Keras 2 gave int64);
* ``random_*``: an int ``seed`` gives the same draw on every call (Keras 3's
  stateless seeds); ``seed=None`` gives fresh randomness each call, in ``fit`` too;
  a ``keras.random.SeedGenerator`` may be passed as well.
"""

import builtins
import math

import keras
import numpy as np
from keras import ops
from keras.src.backend.common import global_state, stateless_scope, symbolic_scope

# --------------------------------------------------------------------------- configuration


def floatx():
    """The default float dtype, e.g. 'float32'."""
    return keras.config.floatx()


def set_floatx(value):
    keras.config.set_floatx(value)


def epsilon():
    """The fuzz factor of the crossentropies and ``clip``s (1e-7 by default)."""
    return keras.config.epsilon()


def set_epsilon(value):
    keras.config.set_epsilon(value)


def image_data_format():
    return keras.config.image_data_format()


def set_image_data_format(data_format):
    keras.config.set_image_data_format(data_format)


def backend():
    """The name of Keras 3's backend ('tensorflow', 'jax', 'torch')."""
    return keras.backend.backend()


def clear_session():
    """Resets Keras's global state (layer name counters, ...)."""
    keras.backend.clear_session()


def name_scope(name):
    return keras.name_scope(name)


def symbolic(f):
    """Identity decorator (bert4keras marked its optimizers' graph code with it)."""
    return f


def _call_context_training():
    """The ``training`` flag of the layer call in progress, or None outside calls."""
    context = global_state.get_global_attribute("current_call_ctx")
    return None if context is None else getattr(context, "training", None)


def set_learning_phase(value):
    """Keras 2's global phase switch: Keras 3 has none, so this refuses and says what replaces it."""
    raise RuntimeError(
        f"K.set_learning_phase({value!r}): Keras 3 has no global learning phase; pass training=True/False to "
        "the model or layer call (model(x, training=False)), or use model.predict, which runs in inference "
        "mode (README.md, 'Porting from bert4keras')"
    )


def learning_phase():
    """1 inside a layer call made with ``training=True`` (``fit``), else 0.

    Keras 3 has no global phase to set: ``set_learning_phase`` does not exist;
    pass ``training=`` to the model or layer call instead.
    """
    return 1 if _call_context_training() else 0


# --------------------------------------------------------------------------- introspection


def is_keras_tensor(x):
    return isinstance(x, keras.KerasTensor)


def is_tensor(x):
    """True for a backend tensor or a symbolic KerasTensor (not for numpy arrays)."""
    return is_keras_tensor(x) or ops.is_tensor(x)


def _is_variable(x):
    return isinstance(x, keras.Variable) or type(x).__name__.endswith("Variable")


def _static_dim(d):
    """An int, or None for an unknown or symbolic dimension (JAX traces Keras's shape
    inference with symbolic sizes, which refuse ``int()``)."""
    if d is None:
        return None
    try:
        return int(d)
    except (TypeError, ValueError):
        raise
    except Exception:  # noqa: BLE001 - jax's InconclusiveDimensionOperation: a symbolic size
        return None


def int_shape(x):
    """The static shape as a tuple of ints (None where unknown), or None without one."""
    try:
        return tuple(_static_dim(d) for d in x.shape)
    except (AttributeError, TypeError, ValueError):
        return None


def shape(x):
    """The shape as an int32 tensor (Keras 2), or a tuple for a KerasTensor with unknown axes.
    On JAX, whose traced shapes are always known, an int32 numpy array: its items stay
    concrete under ``jit``, so ``K.reshape(x, (K.shape(x)[0], -1))`` works in a compiled loss."""
    dims = ops.shape(x)
    if builtins.any(d is None for d in dims):
        return dims
    if keras.backend.backend() == "jax":
        return np.asarray(dims, dtype="int32")
    return ops.convert_to_tensor(list(dims), dtype="int32")


def ndim(x):
    return len(x.shape)


def dtype(x):
    """The dtype's name, e.g. 'float32'."""
    return keras.backend.standardize_dtype(x.dtype)


def count_params(x):
    return int(np.prod(int_shape(x)))


# --------------------------------------------------------------------------- variables and values


def _creates_variables():
    """Whether a Keras 2 "variable-returning" function may make a variable here:
    eagerly, outside layer calls and outside traced / symbolic / stateless code."""
    if global_state.get_global_attribute("current_call_ctx") is not None:
        return False
    if stateless_scope.in_stateless_scope() or symbolic_scope.in_symbolic_scope():
        return False
    if backend() == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly()
    return True


def variable(value, dtype=None, name=None, constraint=None):
    """A ``keras.Variable`` holding ``value`` (dtype: ``floatx()`` by default)."""
    v = keras.Variable(ops.convert_to_tensor(value, dtype=dtype or floatx()), dtype=dtype or floatx(), name=name)
    if constraint is not None:
        v.constraint = constraint  # applied by Keras 3's optimizers after each update
    return v


def constant(value, dtype=None, shape=None, name=None):
    """A constant tensor; ``shape`` reshapes a value of that size or broadcasts a scalar."""
    value = np.asarray(value, dtype=dtype or floatx())
    if shape is not None:
        shape = tuple(shape)
        value = value.reshape(shape) if value.size == int(np.prod(shape)) else np.broadcast_to(value, shape)
    return ops.convert_to_tensor(value)


def _shape_argument(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    if backend() != "tensorflow" and ops.is_tensor(shape):
        return tuple(int(d) for d in ops.convert_to_numpy(shape))
    return shape


def _filled(fill, shape, dtype, name):
    dims = _shape_argument(shape)
    tensor = fill(dims, dtype=dtype or floatx())
    static = isinstance(dims, (list, tuple)) and builtins.all(isinstance(d, int) and d > 0 for d in dims)
    if static and _creates_variables():
        return keras.Variable(tensor, dtype=dtype or floatx(), name=name)
    return tensor


def zeros(shape, dtype=None, name=None):
    """All zeros: a variable eagerly outside layer calls (as Keras 2), else a tensor."""
    return _filled(ops.zeros, shape, dtype, name)


def ones(shape, dtype=None, name=None):
    """All ones: a variable eagerly outside layer calls (as Keras 2), else a tensor."""
    return _filled(ops.ones, shape, dtype, name)


def eye(size, dtype=None, name=None):
    """Identity matrix [size, size] (or [n, m] for a pair); a variable as ``zeros``."""
    n, m = (size, size) if isinstance(size, int) else size
    tensor = ops.eye(n, m, dtype=dtype or floatx())
    return keras.Variable(tensor, name=name) if _creates_variables() else tensor


def zeros_like(x, dtype=None, name=None):
    return ops.zeros_like(x, dtype=dtype)


def ones_like(x, dtype=None, name=None):
    return ops.ones_like(x, dtype=dtype)


def identity(x, name=None):
    return ops.copy(x)


def cast(x, dtype):
    return ops.cast(x, dtype)


def cast_to_floatx(x):
    """``x`` in ``floatx()``: a tensor stays a tensor, anything else becomes numpy."""
    if is_tensor(x) or _is_variable(x):
        return ops.cast(x, floatx())
    return np.asarray(x, dtype=floatx())


def get_value(x):
    """The numpy value of a tensor or variable; other values are returned as they are."""
    if is_keras_tensor(x):
        raise ValueError(
            "K.get_value/K.eval: got a symbolic KerasTensor (a functional model's "
            "intermediate); it has no value: call the model on data instead"
        )
    if not (is_tensor(x) or _is_variable(x)):
        return x
    return ops.convert_to_numpy(x)


def eval(x):
    """The numpy value of ``x`` (Keras 3 evaluates eagerly: no session)."""
    return get_value(x)


def batch_get_value(tensors):
    return [get_value(x) for x in tensors]


def set_value(x, value):
    """Assigns numpy ``value`` (cast to the variable's dtype) to variable ``x``."""
    if not hasattr(x, "assign"):
        raise TypeError(f"K.set_value: `x` must be a variable, got {type(x).__name__}")
    x.assign(np.asarray(value, dtype=dtype(x)))


def batch_set_value(tuples):
    for x, value in tuples:
        set_value(x, value)


def update(x, new_x):
    """``x := new_x`` now (Keras 3 has no deferred update ops); returns ``x``."""
    x.assign(new_x)
    return x


def update_add(x, increment):
    x.assign_add(increment)
    return x


def update_sub(x, decrement):
    x.assign_sub(decrement)
    return x


# --------------------------------------------------------------------------- elementwise maths


def abs(x):
    return ops.absolute(x)


def square(x):
    return ops.square(x)


def sqrt(x):
    """sqrt(max(x, 0)) (Keras 2 clips negative inputs to 0)."""
    return ops.sqrt(ops.maximum(x, 0.0))


def exp(x):
    return ops.exp(x)


def log(x):
    return ops.log(x)


def sin(x):
    return ops.sin(x)


def cos(x):
    return ops.cos(x)


def sign(x):
    return ops.sign(x)


def round(x):
    """Rounds half to even, as Keras 2 (tf.round)."""
    return ops.round(x)


def pow(x, a):
    return ops.power(x, a)


def maximum(x, y):
    return ops.maximum(x, y)


def minimum(x, y):
    return ops.minimum(x, y)


def clip(x, min_value, max_value):
    """Keras 2's clip: None bounds are open, and ``max_value < min_value`` means ``min_value``."""
    if isinstance(min_value, (int, float)) and isinstance(max_value, (int, float)) and max_value < min_value:
        max_value = min_value
    min_value = -np.inf if min_value is None else min_value
    max_value = np.inf if max_value is None else max_value
    return ops.clip(x, min_value, max_value)


def equal(x, y):
    return ops.equal(x, y)


def not_equal(x, y):
    return ops.not_equal(x, y)


def greater(x, y):
    return ops.greater(x, y)


def greater_equal(x, y):
    return ops.greater_equal(x, y)


def less(x, y):
    return ops.less(x, y)


def less_equal(x, y):
    return ops.less_equal(x, y)


def stop_gradient(variables):
    """Blocks the gradient of a tensor, or of each tensor of a list."""
    if isinstance(variables, (list, tuple)):
        return [ops.stop_gradient(v) for v in variables]
    return ops.stop_gradient(variables)


# --------------------------------------------------------------------------- reductions


def sum(x, axis=None, keepdims=False):
    return ops.sum(x, axis=axis, keepdims=keepdims)


def prod(x, axis=None, keepdims=False):
    return ops.prod(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean (a bool ``x`` counts as ``floatx()``)."""
    return ops.mean(_floats_if_bool(x), axis=axis, keepdims=keepdims)


def std(x, axis=None, keepdims=False):
    return ops.std(_floats_if_bool(x), axis=axis, keepdims=keepdims)


def var(x, axis=None, keepdims=False):
    return ops.var(_floats_if_bool(x), axis=axis, keepdims=keepdims)


def _floats_if_bool(x):
    return ops.cast(x, floatx()) if dtype(x) == "bool" else x


def max(x, axis=None, keepdims=False):
    return ops.max(x, axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims=False):
    return ops.min(x, axis=axis, keepdims=keepdims)


def any(x, axis=None, keepdims=False):
    return ops.any(ops.cast(x, "bool"), axis=axis, keepdims=keepdims)


def all(x, axis=None, keepdims=False):
    return ops.all(ops.cast(x, "bool"), axis=axis, keepdims=keepdims)


def argmax(x, axis=-1):
    return ops.argmax(x, axis=axis)


def argmin(x, axis=-1):
    return ops.argmin(x, axis=axis)


def logsumexp(x, axis=None, keepdims=False):
    return ops.logsumexp(x, axis=axis, keepdims=keepdims)


def cumsum(x, axis=0):
    return ops.cumsum(x, axis=axis)


def cumprod(x, axis=0):
    return ops.cumprod(x, axis=axis)


def l2_normalize(x, axis=None):
    """x / sqrt(max(sum(x^2 over axis), 1e-12)) (tf.math.l2_normalize)."""
    squares = ops.sum(ops.square(x), axis=axis, keepdims=True)
    return x * ops.rsqrt(ops.maximum(squares, ops.cast(1e-12, squares.dtype)))


# --------------------------------------------------------------------------- activations


def softmax(x, axis=-1):
    return ops.softmax(x, axis=axis)


def relu(x, alpha=0.0, max_value=None, threshold=0.0):
    return keras.activations.relu(x, negative_slope=alpha, max_value=max_value, threshold=threshold)


def elu(x, alpha=1.0):
    return keras.activations.elu(x, alpha=alpha)


def sigmoid(x):
    return ops.sigmoid(x)


def hard_sigmoid(x):
    """Keras 2's piecewise-linear sigmoid clip(0.2 x + 0.5, 0, 1) (Keras 3's differs)."""
    return ops.clip(0.2 * x + 0.5, 0.0, 1.0)


def tanh(x):
    return ops.tanh(x)


def softplus(x):
    return ops.softplus(x)


def softsign(x):
    return ops.softsign(x)


# --------------------------------------------------------------------------- shapes


def _dims(tensor):
    """Static ints where known, dynamic scalars elsewhere."""
    dynamic = ops.shape(tensor)
    return [d if d is not None else dynamic[i] for i, d in enumerate(int_shape(tensor))]


def _product(dims):
    return math.prod(dims) if builtins.all(isinstance(d, int) for d in dims) else ops.prod(ops.stack(dims))


def reshape(tensor, *args):
    """``reshape(x, shape)`` as Keras 2, or bert4keras's per-axis form
    ``reshape(x, shape1, axis1, shape2, axis2, ...)``: axis ``axis_i`` of ``x``
    becomes the axes ``shape_i`` (one entry may be -1), the others stay.

    E.g. x [B, L, H*d]: ``reshape(x, (H, -1), -1)`` -> [B, L, H, d].
    """
    if len(args) == 1:
        return ops.reshape(tensor, args[0])
    if not args or len(args) % 2:
        raise ValueError("reshape: give `shape`, or pairs `shape_i, axis_i`; got %d extra arguments" % len(args))
    groups = [[d] for d in _dims(tensor)]
    for new, axis in zip(args[::2], args[1::2]):
        groups[axis] = _split_axis(list(new), groups[axis][0], axis)
    return ops.reshape(tensor, [d for group in groups for d in group])


def _split_axis(new, size, axis):
    """The axes replacing one of ``size``; a -1 among ``new`` takes what is left."""
    unknown = [i for i, d in enumerate(new) if d == -1]
    if len(unknown) > 1:
        raise ValueError(f"reshape: at most one -1 per axis, got {new} for axis {axis}")
    if unknown:
        new[unknown[0]] = size // _product([d for d in new if d != -1])
    return new


def flatten(tensor, start=None, end=None):
    """Merges axes ``start:end`` of ``tensor`` into one (Keras 2: all of them).

    E.g. x [B, L, H, d]: ``flatten(x, 2)`` -> [B, L, H*d].
    """
    dims = _dims(tensor)
    start, end = start or 0, end or len(dims)
    return ops.reshape(tensor, dims[:start] + [_product(dims[start:end])] + dims[end:])


def batch_flatten(x):
    """[B, ...] -> [B, prod(...)]."""
    return flatten(x, 1)


def expand_dims(x, axis=-1):
    return ops.expand_dims(x, axis)


def squeeze(x, axis):
    return ops.squeeze(x, axis=axis)


def permute_dimensions(x, pattern):
    return ops.transpose(x, axes=tuple(pattern))


def transpose(x):
    """Reverses all axes (tf.transpose)."""
    return ops.transpose(x)


def concatenate(tensors, axis=-1):
    return ops.concatenate(list(tensors), axis=axis)


def stack(x, axis=0):
    return ops.stack(list(x), axis=axis)


def tile(x, n):
    return ops.tile(x, [n] if isinstance(n, int) else n)


def repeat_elements(x, rep, axis):
    return ops.repeat(x, rep, axis=axis)


def repeat(x, n):
    """[B, d] -> [B, n, d]."""
    return ops.tile(ops.expand_dims(x, 1), [1, n, 1])


def arange(start, stop=None, step=1, dtype="int32"):
    """Keras 2's arange: int32 by default, and ``arange(negative)`` is empty."""
    if stop is None and isinstance(start, (int, float)) and start < 0:
        start = 0
    return ops.arange(start, stop, step, dtype=dtype)


def one_hot(indices, num_classes):
    return ops.one_hot(indices, num_classes)


def gather(reference, indices):
    """``reference[indices]`` along axis 0."""
    return ops.take(reference, indices, axis=0)


def temporal_padding(x, padding=(1, 1)):
    """Pads axis 1 of [B, L, d] with zeros: ``padding`` = (before, after)."""
    return ops.pad(x, [[0, 0], list(padding), [0, 0]])


def pool2d(x, pool_size, strides=(1, 1), padding="valid", data_format=None, pool_mode="max"):
    """2-D max / average pooling of [B, H, W, C] (or channels first)."""
    pool = {"max": ops.max_pool, "avg": ops.average_pool}.get(pool_mode)
    if pool is None:
        raise ValueError(f"pool2d: pool_mode must be 'max' or 'avg', got {pool_mode!r}")
    return pool(x, pool_size, strides=strides, padding=padding, data_format=data_format or image_data_format())


# --------------------------------------------------------------------------- products


def dot(x, y):
    """Keras 2's dot: the last axis of x with the second-to-last of y (the last
    when y is 1-D); x [..., k] . y [..., k, n] -> x[:-1] + y[:-2] + [n]."""
    return ops.tensordot(x, y, axes=[[ndim(x) - 1], [builtins.max(ndim(y) - 2, 0)]])


def batch_dot(x, y, axes=None):
    """Keras 2's batch_dot: per batch item, contract axis ``axes[0]`` of x with
    ``axes[1]`` of y; the result has x's other axes, then y's. Two 2-D inputs
    give [B, 1]. Default axes: the last of x with the last of a 2-D y, or the
    second-to-last of y otherwise.
    """
    x_ndim, y_ndim = ndim(x), ndim(y)
    if x_ndim < 2 or y_ndim < 2:
        raise ValueError(f"batch_dot: inputs must be at least 2-D, got shapes {int_shape(x)} and {int_shape(y)}")
    if axes is None:
        axes = [x_ndim - 1, y_ndim - 1 if y_ndim == 2 else y_ndim - 2]
    elif isinstance(axes, int):
        axes = [axes, axes]
    a, b = axes[0] % x_ndim, axes[1] % y_ndim
    if 0 in (a, b):
        raise ValueError(f"batch_dot: cannot contract the batch axis, got axes={axes}")
    letters = "bcdefghijklmnopqrstuvwxyz"
    x_sub = ["a"] + list(letters[1:x_ndim])
    y_sub = ["a"] + list(letters[x_ndim : x_ndim + y_ndim - 1])
    y_sub[b] = x_sub[a]
    out = [s for i, s in enumerate(x_sub) if i != a] + [s for i, s in enumerate(y_sub) if i not in (0, b)]
    result = ops.einsum("%s,%s->%s" % ("".join(x_sub), "".join(y_sub), "".join(out)), x, y)
    return ops.expand_dims(result, 1) if x_ndim == y_ndim == 2 else result


# --------------------------------------------------------------------------- control flow


def where(cond, x, y):
    """``cond ? x : y`` with broadcasting; a Python number takes the other
    argument's dtype (``floatx()`` if both are numbers), a non-bool ``cond`` is cast."""
    x_dtype, y_dtype = _dtype_or_none(x), _dtype_or_none(y)
    if x_dtype is None:
        x = ops.convert_to_tensor(x, dtype=y_dtype or floatx())
    if y_dtype is None:
        y = ops.convert_to_tensor(y, dtype=x_dtype or floatx())
    return ops.where(ops.cast(cond, "bool"), x, y)


def _dtype_or_none(x):
    try:
        return dtype(x)
    except (AttributeError, TypeError, ValueError):
        return None


def switch(condition, then_expression, else_expression):
    """Keras 2's switch: a scalar condition picks a branch (callables are called
    lazily); a tensor condition picks elementwise, aligned on the leading axes."""
    if isinstance(condition, (bool, int, np.bool_)):
        chosen = then_expression if condition else else_expression
        return chosen() if callable(chosen) else chosen
    condition = ops.cast(condition, "bool")
    if ndim(condition) == 0:
        then_fn = then_expression if callable(then_expression) else (lambda: then_expression)
        else_fn = else_expression if callable(else_expression) else (lambda: else_expression)
        return ops.cond(condition, then_fn, else_fn)
    then_value = then_expression() if callable(then_expression) else then_expression
    else_value = else_expression() if callable(else_expression) else else_expression
    extra = ndim(then_value) - ndim(condition)
    if extra < 0:
        raise ValueError(f"switch: `condition` has rank {ndim(condition)} > rank {ndim(then_value)} of the branches")
    condition = ops.reshape(condition, list(_dims(condition)) + [1] * extra)
    return ops.where(condition, then_value, else_value)


def in_train_phase(x, alt, training=None):
    """``x`` when training, else ``alt`` (callables are called only when chosen).

    ``training`` None reads the ``training`` flag of the layer call in progress
    (True under ``fit``, False under ``predict``); outside layer calls that is
    "not training", so ``alt``. A bool tensor chooses elementwise.
    """
    if training is None:
        training = bool(_call_context_training())
    return switch(training, x, alt)


def in_test_phase(x, alt, training=None):
    """``x`` when not training, else ``alt``."""
    return in_train_phase(alt, x, training=training)


def rnn(
    step_function,
    inputs,
    initial_states,
    go_backwards=False,
    mask=None,
    constants=None,
    unroll=False,
    input_length=None,
    time_major=False,
    zero_output_for_mask=False,
    return_all_outputs=True,
):
    """Keras 2's rnn loop: returns (last_output, outputs, new_states)."""
    from keras.src import backend as backend_impl  # the active backend's loop; not in Keras 3's public API

    return backend_impl.rnn(
        step_function,
        inputs,
        initial_states,
        go_backwards=go_backwards,
        mask=mask,
        constants=constants,
        unroll=unroll,
        input_length=input_length,
        time_major=time_major,
        zero_output_for_mask=zero_output_for_mask,
        return_all_outputs=return_all_outputs,
    )


def function(inputs, outputs, updates=None, name=None, **kwargs):
    """A callable from a list of arrays for ``inputs`` to numpy ``outputs``,
    for symbolic tensors of a functional model (Keras 2's ``K.function``)."""
    if updates:
        raise ValueError(
            "K.function: `updates` are not supported in Keras 3 (no graph to run them in); "
            "assign variables in a custom `train_step` instead"
        )
    single_input = not isinstance(inputs, (list, tuple))
    single_output = not isinstance(outputs, (list, tuple))
    inputs = [inputs] if single_input else list(inputs)
    outputs = [outputs] if single_output else list(outputs)
    if not builtins.all(is_keras_tensor(t) for t in inputs + outputs):
        raise ValueError("K.function: `inputs` and `outputs` must be symbolic tensors of a functional model")
    model = keras.Model(inputs, outputs, name=name)

    def run(values):
        values = values if isinstance(values, (list, tuple)) else [values]
        results = model(list(values), training=False)
        results = results if isinstance(results, (list, tuple)) else [results]
        return [ops.convert_to_numpy(r) for r in results]

    return run


def gradients(loss, variables):
    """Symbolic gradients of ``loss`` w.r.t. ``variables`` (a list).

    Keras 3 runs eagerly: a gradient needs a tape opened before the loss is
    computed. This works only where the graph is there to differentiate — inside
    a traced TensorFlow function (e.g. a loss or ``train_step`` run by ``fit`` on
    the TensorFlow backend); elsewhere it raises and names the Keras 3 way.
    """
    if backend() == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            tensors = [v.value if isinstance(v, keras.Variable) else v for v in variables]
            return tf.gradients(loss, tensors)
    raise RuntimeError(
        "K.gradients: Keras 3 computes eagerly, so gradients need a tape opened before the loss; "
        "write a custom `train_step` (tf.GradientTape on TensorFlow, jax.grad on JAX) that computes "
        "the loss and its gradients there (K.gradients works only inside a traced TensorFlow function; "
        "README.md, 'Porting from bert4keras', 'Patching the training function')"
    )


def get_session(*args, **kwargs):
    raise RuntimeError(
        "K.get_session: Keras 3 has no TensorFlow session; tensors evaluate eagerly (use K.eval / model.predict)"
    )


# --------------------------------------------------------------------------- random


def _random_dtype(dtype):
    return dtype or floatx()


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
    return keras.random.uniform(
        _shape_argument(shape), minval=minval, maxval=maxval, dtype=_random_dtype(dtype), seed=seed
    )


def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    return keras.random.normal(_shape_argument(shape), mean=mean, stddev=stddev, dtype=_random_dtype(dtype), seed=seed)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    return keras.random.truncated_normal(
        _shape_argument(shape), mean=mean, stddev=stddev, dtype=_random_dtype(dtype), seed=seed
    )


def random_bernoulli(shape, p=0.0, dtype=None, seed=None):
    """1 with probability ``p``, else 0 (as ``dtype``, ``floatx()`` by default)."""
    draw = random_uniform(shape, dtype=_random_dtype(dtype), seed=seed)
    return ops.cast(ops.less_equal(draw, p), _random_dtype(dtype))


def random_binomial(shape, p=0.0, dtype=None, seed=None):
    """Keras 2's older name of ``random_bernoulli``."""
    return random_bernoulli(shape, p=p, dtype=dtype, seed=seed)


def dropout(x, level, noise_shape=None, seed=None):
    return keras.random.dropout(x, level, noise_shape=noise_shape, seed=seed)


# --------------------------------------------------------------------------- losses


def categorical_crossentropy(target, output, from_logits=False, axis=-1):
    """-sum(target * log p) over ``axis``; probabilities are renormalised and clipped to [eps, 1 - eps]."""
    output = ops.convert_to_tensor(output)
    target = ops.cast(target, output.dtype)
    return ops.categorical_crossentropy(target, output, from_logits=from_logits, axis=axis)


def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1, ignore_class=None):
    """Crossentropy of integer ``target`` against ``output`` (classes on ``axis``).

    Keras 2's shape rule: a target whose rank is not ``rank(output) - 1`` (e.g.
    [B, L, 1] against [B, L, C]) is flattened, and the result has
    ``output``'s shape without the class axis. ``ignore_class`` positions give 0.
    """
    output = ops.convert_to_tensor(output)
    rank = ndim(output)
    axis %= rank
    if axis != rank - 1:
        output = ops.moveaxis(output, axis, -1)
    target = ops.cast(target, "int32")
    result_dims = _dims(output)[:-1]
    flattened = ndim(target) != rank - 1
    if flattened:
        target = ops.reshape(target, [-1])
        output = ops.reshape(output, [-1, _dims(output)[-1]])
    valid = None
    if ignore_class is not None:
        valid = ops.not_equal(target, ignore_class)
        target = ops.where(valid, target, 0)
    result = ops.sparse_categorical_crossentropy(target, output, from_logits=from_logits)
    if valid is not None:
        result = ops.where(valid, result, ops.zeros_like(result))
    return ops.reshape(result, result_dims) if flattened else result


def binary_crossentropy(target, output, from_logits=False):
    """Elementwise binary crossentropy. On probabilities it is Keras 2's formula:
    clip to [eps, 1 - eps], then -(t log(p + eps) + (1 - t) log(1 - p + eps))
    (Keras 3's drops the inner eps)."""
    output = ops.convert_to_tensor(output)
    target = ops.cast(target, output.dtype)
    logits = getattr(output, "_keras_logits", None)  # the input of a sigmoid activation, as Keras does
    if from_logits or logits is not None:
        return ops.binary_crossentropy(target, output if from_logits else logits, from_logits=True)
    eps = epsilon()
    output = ops.clip(output, eps, 1.0 - eps)
    return -(target * ops.log(output + eps) + (1.0 - target) * ops.log(1.0 - output + eps))
