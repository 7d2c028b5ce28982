"""Recompute (gradient checkpointing) for whole layers: bert4keras's ``RECOMPUTE``.

A layer built with ``recompute=True`` keeps only its inputs for the backward
pass and runs its forward again there (``keras.remat``), so an attention
layer's [B, L, L] scores and everything between its input and output are not
held through the backward pass of the model.

``keras.remat`` alone is not enough for layers with dropout: the recomputed
forward draws new dropout masks (Keras's seed generators have moved on), so
the gradient would belong to another network. ``recompute_call`` replays the
layer's seed-generator states at the start of both passes, so both draw the
same masks and the gradients equal those of the plain layer.

Design notes: docs/models.md (Recompute).
"""

import os

import keras


def default_recompute():
    """bert4keras's switch: ``RECOMPUTE=1`` in the environment turns it on."""
    return os.environ.get("RECOMPUTE", "0") not in ("", "0", "false", "False")


def seed_generators(layer):
    """The Keras seed generators a layer owns (its dropouts' included)."""
    found, seen = [], set()
    for sub in [layer] + list(layer._flatten_layers(include_self=False)):
        for value in vars(sub).values():
            if isinstance(value, keras.random.SeedGenerator) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


def recompute_call(layer, call, tensors):
    """``call(*tensors)``, recomputed in the backward pass with the same randomness.

    Args:
        layer: the layer whose seed generators ``call`` uses.
        call: a function of the tensors in ``tensors`` (other arguments closed over).
        tensors: the differentiable inputs, a list.
    """
    generators = seed_generators(layer)
    start = [keras.ops.copy(g.state.value) for g in generators]  # read now, before the forward pass

    def replayed(*xs):
        for generator, state in zip(generators, start):
            generator.state.assign(state)
        return call(*xs)

    return keras.remat(replayed)(*tensors)
