"""Keras 2's per-call accessors (``get_output_at`` and its kin) for gau_keras's layers.

Keras 2 layers kept one inbound node per call; ``layer.get_output_at(i)`` gave
the output of the i-th call (bert4keras's examples read a shared layer's last
call with ``get_output_at(-1)``). Keras 3 keeps the nodes (``_inbound_nodes``)
but dropped the accessors; the face gives them back to bert4keras's layer names,
the classes ``gau_keras.layers`` exports (``add_to_layer_names``, when the face
is imported: ``import gau_keras`` imports it). Keras's own classes, and
``keras.layers.Layer``, are left as they are.
"""

__all__ = [
    "get_input_at",
    "get_output_at",
    "get_input_shape_at",
    "get_output_shape_at",
    "add_node_accessors",
    "add_to_layer_names",
]


def _node(layer, node_index, what):
    nodes = layer._inbound_nodes
    if not nodes:
        raise ValueError(f"layer {layer.name!r} has not been called on a tensor yet: it has no {what}")
    try:
        return nodes[node_index]
    except (IndexError, TypeError):
        raise ValueError(
            f"layer {layer.name!r}: node_index={node_index!r} is not one of its {len(nodes)} "
            f"call(s) (0 … {len(nodes) - 1}, or -1 for the last)"
        ) from None


def _one_or_list(tensors):
    tensors = list(tensors)
    return tensors[0] if len(tensors) == 1 else tensors


def _shapes(tensors):
    tensors = list(tensors)
    shapes = [tuple(t.shape) for t in tensors]
    return shapes[0] if len(shapes) == 1 else shapes


def get_input_at(self, node_index):
    """The input tensor(s) of the layer's call number ``node_index`` (-1: the last call)."""
    return _one_or_list(_node(self, node_index, "input").input_tensors)


def get_output_at(self, node_index):
    """The output tensor(s) of the layer's call number ``node_index`` (-1: the last call)."""
    return _one_or_list(_node(self, node_index, "output").output_tensors)


def get_input_shape_at(self, node_index):
    """The input shape(s) of the layer's call number ``node_index``."""
    return _shapes(_node(self, node_index, "input").input_tensors)


def get_output_shape_at(self, node_index):
    """The output shape(s) of the layer's call number ``node_index``."""
    return _shapes(_node(self, node_index, "output").output_tensors)


def add_node_accessors(cls):
    """Adds the four accessors to a layer class of gau_keras (a class decorator)."""
    for function in (get_input_at, get_output_at, get_input_shape_at, get_output_shape_at):
        setattr(cls, function.__name__, function)
    return cls


def add_to_layer_names():
    """Adds the accessors to every layer class of gau_keras that ``gau_keras.layers`` exports
    (not to the Keras classes it also re-exports)."""
    from gau_keras import layers

    for name in layers.__all__:
        cls = getattr(layers, name)
        if isinstance(cls, type) and cls.__module__.startswith("gau_keras."):
            add_node_accessors(cls)
