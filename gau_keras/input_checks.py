"""A model's input values checked against its tables, where the values are at hand.

An id outside an embedding table is no error a compiled step can report on
every backend: TensorFlow's CPU gather raises deep in a graph error, JAX's
gather fills the row with NaN (or clamps it), and a negative id reads the table
from its end on both. A sequence longer than a learned position table fails
with a shape error. So ``predict`` / ``fit`` / ``evaluate`` and the
``*_on_batch`` calls of the bert4keras-style ``Model`` check the numpy (or
nested-list) data they are given before Keras compiles anything, and the
SavedModel's signature checks its ids in the graph (``gau_keras.export``).
Data that arrives as a generator, a ``tf.data.Dataset`` or a traced tensor is
not checked: its values exist only inside the compiled step.
"""

import numpy as np

#: input layer -> (the embedding layer whose rows its ids index, the config key of that size)
ID_TABLES = {
    "Input-Token": ("Embedding-Token", "vocab_size"),
    "Input-Segment": ("Embedding-Segment", "type_vocab_size"),
    "Input-Position": ("Embedding-Position", "max_position_embeddings"),
}
#: the learned position table that bounds every id input's length
POSITION_TABLE = ("Embedding-Position", "max_position_embeddings")


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        return None


def _positions(layer):
    """How many positions a PositionEmbedding layer covers (hierarchical: input_dim squared)."""
    size = int(layer.input_dim)
    return size * size if getattr(layer, "hierarchical", None) else size


def id_bounds(model):
    """``{input layer name: (number of ids, config key)}`` for the inputs that index an embedding."""
    bounds = {}
    for name, (table, key) in ID_TABLES.items():
        layer = _layer(model, table)
        if layer is None or not getattr(layer, "input_dim", None):
            continue
        size = _positions(layer) if table == POSITION_TABLE[0] else int(layer.input_dim)
        bounds[name] = (size, key)
    return bounds


def max_length(model):
    """The longest sequence the model's learned position table covers, or None (RoPE, no positions)."""
    layer = _layer(model, POSITION_TABLE[0])
    if layer is None or getattr(layer, "custom_position_ids", False):
        return None
    return _positions(layer)


def _named_inputs(model, x):
    """``[(input layer name, numpy array)]`` for the parts of ``x`` that are arrays at hand."""
    names = [t.name.split(":")[0] for t in getattr(model, "inputs", None) or []]
    if isinstance(x, dict):
        pairs = x.items()
    elif isinstance(x, (list, tuple)) and len(x) == len(names):
        pairs = zip(names, x)
    elif len(names) == 1:
        pairs = [(names[0], x)]
    else:
        return []
    return [(name, value) for name, value in pairs if isinstance(value, np.ndarray)]


def check_inputs(model, x, where="predict"):
    """Raises a ValueError naming the input, the id (or length) and the table when ``x`` holds an id
    outside its embedding table or a sequence longer than the model's positions; ``where`` names the call.

    Args:
        model: a functional Keras model with bert4keras's layer names.
        x: the model's inputs: an array, a list with one entry per input, or a dict by input name;
            anything else (a generator, a dataset, tensors) is not checked.
    """
    bounds, longest = id_bounds(model), max_length(model)
    for name, value in _named_inputs(model, x):
        if name not in bounds or value.size == 0 or not np.issubdtype(value.dtype, np.number):
            continue
        size, key = bounds[name]
        low, high = value.min(), value.max()
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{where}: input {name} holds the id {bad:g}, outside [0, {size}) (the model's {key}={size})"
            )
        if longest is not None and value.ndim >= 2 and value.shape[1] > longest:
            raise ValueError(
                f"{where}: input {name} is {value.shape[1]} tokens long, longer than the model's "
                f"{longest} positions (max_position_embeddings={longest})"
            )
