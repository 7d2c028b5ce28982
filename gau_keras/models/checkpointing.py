"""Loading and writing TF1 checkpoints by variable name: the mixin every builder class
(``Transformer``) has, the readers of checkpoint files and dicts, and the checks with their
messages (missing / mis-shaped / unused variables, the model a checkpoint seems to be for).

Design notes: docs/models.md (The TF1 checkpoint).
"""

import logging
import re
import warnings

import keras
import numpy as np

from gau_keras import checkpoints
from gau_keras.layers import FeedForward, MultiHeadAttention
from gau_keras.models.registry import MODELS
from gau_keras.snippets.arrays import orthogonally_resize

logger = logging.getLogger(__name__)

#: what ``load_weights_from_checkpoint`` does with checkpoint variables no mapping names
UNUSED_VARIABLE_ACTIONS = ("warn", "error", "ignore")
#: layers that a model's options leave out (heads, the segment table): a checkpoint's variables
#: for them are not "unused" when the model lacks them; those of other layers the model lacks are
#: (BERT's position table read by NEZHA or RoFormer)
OPTIONAL_LAYERS = {
    "Pooler-Dense",
    "NSP-Proba",
    "MLM-Dense",
    "MLM-Norm",
    "MLM-Bias",
    "Output-Mapping",
    "Discriminator-Dense",
    "Discriminator-Prediction",
    "Embedding-Segment",
    "Decoder-Output-LM",
}
#: the Pooler-Dense weights a BERT checkpoint has and GAU-alpha / RoFormerV2 ones lack
POOLER_VARIABLES = {"kernel": "bert/pooler/dense/kernel", "bias": "bert/pooler/dense/bias"}
# training state that TF1/TF2 checkpoints keep beside the model's variables
_OPTIMIZER_STATE = re.compile(
    r"(^|/)(global_step|beta[12]_power|good_steps|(current_)?loss_scale|_CHECKPOINTABLE_OBJECT_GRAPH)$"
    r"|/((adam|lamb|adafactor|lazy|ema)_\w+|Adam(_\d+)?|Momentum|RMSProp(_\d+)?|Adagrad\w*"
    r"|ExponentialMovingAverage|accumulator\w*)$"
    r"|^(optimizer|training)/"
)


class CheckpointWarning(UserWarning):
    """A checkpoint that loads but does not fit the model exactly (missing
    optional weights, variables the model does not use)."""


class CheckpointMapping:
    """Name-based checkpoint mapping of a builder class: ``variable_mapping()`` returns
    ``{layer_name: {weight_attr: ckpt_name}}`` (``weight_attr`` an attribute path on the
    layer, e.g. ``'i_dense.kernel'``) or, as bert4keras, a list of names matched to the
    layer's ``trainable_weights`` in order. The class needs ``layers``, ``prefixed``,
    ``keep_tokens``, ``compound_tokens``, ``ignore_invalid_weights``,
    ``unused_checkpoint_variables`` and ``num_hidden_layers``."""

    def variable_mapping(self):
        return {}

    def load_embeddings(self, embeddings, where="the checkpoint"):
        """Applies ``keep_tokens`` then ``compound_tokens`` to a [V, E] matrix."""
        if self.keep_tokens is not None:
            embeddings = embeddings[_checked_ids(self.keep_tokens, len(embeddings), "keep_tokens", where)]
        if self.compound_tokens is not None:
            extra = []
            for item in self.compound_tokens:
                ids, weights = (item, [1.0] * len(item)) if isinstance(item, list) else item
                ids = _checked_ids(ids, len(embeddings), "compound_tokens", where)
                extra.append(np.average(embeddings[ids], axis=0, weights=weights))
            embeddings = np.concatenate([embeddings, np.asarray(extra, embeddings.dtype)], axis=0)
        return embeddings

    def embedding_variable_names(self):
        """Checkpoint variables that hold vocab rows (keep/compound tokens apply)."""
        return {"bert/embeddings/word_embeddings"}

    def vocab_column_variable_names(self):
        """Checkpoint variables whose columns are vocab rows (T5.1.1's untied output kernel
        [H, V]): keep/compound tokens apply to their transpose."""
        return set()

    def transposed_variable_names(self):
        """Checkpoint variables stored transposed relative to the Keras weight (BERT's NSP
        ``output_weights`` [2, H] for a Dense kernel [H, 2])."""
        return set()

    def checkpoint_hint(self, reader):
        """A sentence naming the model a checkpoint that does not fit seems to be for, or ''."""
        return checkpoint_hint(reader.shapes, type(self))

    def _weight_pairs(self, mapping):
        """Yields (layer_name, weight, ckpt_name) for the layers this model has."""
        for layer_name, variables in mapping.items():
            layer = self.layers.get(self.prefixed(layer_name))
            if layer is None:
                continue
            if isinstance(variables, dict):
                for attr, ckpt_name in variables.items():
                    yield layer_name, _resolve_attr(layer, attr, layer_name), ckpt_name
            else:
                for weight, ckpt_name in zip(layer.trainable_weights, variables):
                    yield layer_name, weight, ckpt_name

    def optional_variables(self):
        """Checkpoint variables that may be absent: the layer then keeps its
        initial weights, with one warning (GAU-alpha / RoFormerV2 checkpoints
        have no pooler)."""
        return set(POOLER_VARIABLES.values())

    def load_variable(self, checkpoint, name):
        """One variable of ``checkpoint`` (a path or a ``{name: array}`` dict)."""
        return _reader(checkpoint).get(name)

    def load_weights_from_checkpoint(self, checkpoint, mapping=None, unused_variables=None):
        """Loads weights by checkpoint variable name (see ``variable_mapping``).

        Args:
            checkpoint: TF1 checkpoint prefix or directory, or ``{name: array}``.
            mapping: ``{layer_name: {weight_attr: ckpt_name}}``; default
                ``variable_mapping()``.
            unused_variables: what to do with checkpoint variables that no
                entry of the mapping names (e.g. layers 4-5 of a 6-layer
                checkpoint loaded into a 4-layer model): 'warn' (one
                ``CheckpointWarning`` listing them), 'error' (a
                ``CheckpointError``) or 'ignore'; default the model's
                ``unused_checkpoint_variables``. Optimizer state
                (``*/adam_m``, ``global_step``, ...) never counts.
        Returns:
            the number of weights assigned.
        """
        reader = _reader(checkpoint)
        mapping = mapping or self.variable_mapping()
        action = unused_variables or self.unused_checkpoint_variables
        if action not in UNUSED_VARIABLE_ACTIONS:
            raise ValueError(f"unused_variables must be one of {UNUSED_VARIABLE_ACTIONS}, got {action!r}")
        assignments, absent = [], {}
        for layer_name, weight, ckpt_name in self._weight_pairs(mapping):
            expected = tuple(weight.shape)
            if ckpt_name not in reader:
                if ckpt_name in self.optional_variables():
                    absent.setdefault(layer_name, []).append(ckpt_name)
                    continue
                self._invalid_weight(
                    f"layer {layer_name!r} (weight {weight.path}, shape {expected}): checkpoint "
                    f"variable {ckpt_name!r} is missing from {reader.path!r}",
                    reader,
                )
                continue
            value = reader.get(ckpt_name)
            if ckpt_name in self.transposed_variable_names():
                value = np.transpose(value)
            if ckpt_name in self.embedding_variable_names():
                value = self.load_embeddings(value, f"{ckpt_name!r} of {reader.path!r}")
            if ckpt_name in self.vocab_column_variable_names():
                value = self.load_embeddings(value.T, f"{ckpt_name!r} of {reader.path!r}").T
            if tuple(value.shape) != expected and self.autoresize_weights and value.ndim == len(expected):
                value = self._autoresized(layer_name, weight, value)
            if tuple(value.shape) != expected:
                self._invalid_weight(
                    f"layer {layer_name!r} (weight {weight.path}) has shape {expected} but "
                    f"checkpoint variable {ckpt_name!r} in {reader.path!r} has shape "
                    f"{tuple(value.shape)}",
                    reader,
                )
                continue
            assignments.append((weight, value, ckpt_name))
        if absent:
            warnings.warn(
                f"checkpoint {reader.path!r} has no "
                + "; ".join(
                    f"{', '.join(names)} (layer {layer!r} keeps its random initial weights)"
                    for layer, names in absent.items()
                ),
                CheckpointWarning,
                stacklevel=2,
            )
        self._check_unused(reader, mapping, action)
        _warn_non_finite(reader, assignments)
        for weight, value, _ in assignments:
            weight.assign(value)
        return len(assignments)

    def _autoresized(self, layer_name, weight, value):
        """bert4keras's ``autoresize_weights``: ``value`` orthogonally resized to the weight's shape
        (``snippets.orthogonally_resize``), then rescaled so that the layer's outputs keep their
        scale: an attention's q and k weights by (new / old head width) ** 0.25 (the scores are
        divided by sqrt(key_size)), a feed-forward's input weights by sqrt(new / old width) and its
        output weights by sqrt(old / new input width) (all of them the latter for relu, as
        bert4keras). The weight's place in the layer's trainable weights decides, as there."""
        layer = self.layers[self.prefixed(layer_name)]
        new, old = tuple(weight.shape), value.shape
        value = orthogonally_resize(np.asarray(value), new)
        index = next(i for i, w in enumerate(layer.trainable_weights) if w is weight)
        if isinstance(layer, MultiHeadAttention):
            count = 4 if layer.use_bias else 2
            if layer.attention_scale and index < count:
                value = value * (new[-1] / old[-1]) ** 0.25
        elif isinstance(layer, FeedForward):
            count = (2 if layer.use_bias else 1) - (2 if self.hidden_act in ("relu", "leaky_relu") else 0)
            value = value * (np.sqrt(new[-1] / old[-1]) if index < count else np.sqrt(old[0] / new[0]))
        return value

    def _invalid_weight(self, message, reader):
        """A variable that cannot be loaded: logged and skipped with ``ignore_invalid_weights`` (the
        weight keeps its initial value, as in bert4keras), else an error with the checkpoint's hint."""
        if not self.ignore_invalid_weights:
            raise checkpoints.CheckpointError(message + self.checkpoint_hint(reader))
        logger.warning("%s; ignored (ignore_invalid_weights=True)", message)

    def _check_unused(self, reader, mapping, action):
        """Warns about / refuses checkpoint variables that no layer of the model reads: those
        ``mapping`` does not name and those it names for layers the model lacks, unless the
        model's options leave such a layer out (``OPTIONAL_LAYERS``)."""
        if action == "ignore":
            return
        named = {ckpt_name for _, _, ckpt_name in self._weight_pairs(mapping)}
        named.update(
            ckpt_name
            for layer, variables in mapping.items()
            if layer in OPTIONAL_LAYERS
            for ckpt_name in (variables.values() if isinstance(variables, dict) else variables)
        )
        unused = sorted(n for n in reader.shapes if n not in named and not _OPTIMIZER_STATE.search(n))
        if not unused:
            return
        message = (
            f"checkpoint {reader.path!r} has {len(unused)} variable(s) that {type(self).__name__} "
            f"({self.num_hidden_layers} layers) does not use: {summarize_names(unused)}"
        )
        if action == "error":
            raise checkpoints.CheckpointError(message + " (unused_checkpoint_variables='error')")
        warnings.warn(
            message + "; pass unused_checkpoint_variables='error' to make this an error, 'ignore' to silence it",
            CheckpointWarning,
            stacklevel=3,
        )

    def save_weights_as_checkpoint(self, filename, mapping=None, dtype=None):
        """Writes the mapped weights as a TF1 checkpoint with the original names.

        Layers that share one checkpoint name (ALBERT's one layer group read by
        ``albert_unshared``) must hold equal values: other values cannot be written in
        that format, which is an error naming the variable and the layers."""
        values, writers = {}, {}
        transposed = self.transposed_variable_names()
        for layer_name, weight, ckpt_name in self._weight_pairs(mapping or self.variable_mapping()):
            value = keras.ops.convert_to_numpy(weight.value)
            if ckpt_name in transposed:
                value = np.transpose(value)
            if ckpt_name in values and not np.array_equal(values[ckpt_name], value):
                raise checkpoints.CheckpointError(
                    f"save_weights_as_checkpoint: layers {writers[ckpt_name]!r} and {layer_name!r} both map "
                    f"to checkpoint variable {ckpt_name!r} but hold different values (the layers were trained "
                    f"apart); the checkpoint format has one variable for them"
                )
            values[ckpt_name], writers[ckpt_name] = value, layer_name
        return checkpoints.save_checkpoint(filename, values, dtype=dtype)


#: (what marks a checkpoint, the model names it fits, the sign as the message says it), most specific first
_LAYER_NORM = "bert/encoder/layer_0/attention/output/LayerNorm/gamma"
_T5_BLOCK = "encoder/block_000/layer_001/"
_CHECKPOINT_SIGNS = (
    (lambda names: any(n.startswith("newslm/") for n in names), ("gpt2_ml",), "gpt2-ml's newslm/* variables"),
    (lambda names: "gpt/output/LayerNorm/gamma" in names, ("gpt2",), "gpt/* variables with a final LayerNorm"),
    (lambda names: any(n.startswith("gpt/") for n in names), ("gpt",), "gpt/* variables without a final LayerNorm"),
    (
        lambda names: any(n.startswith("encoder/rms_norm/") for n in names),
        ("mt5.1.1", "mt5.1.1_encoder", "mt5.1.1_decoder"),
        "mT5's rms_norm scales",
    ),
    (
        lambda names: _T5_BLOCK + "DenseReluDense/wi_0/kernel" in names,
        ("t5.1.1", "t5.1.1_encoder", "t5.1.1_decoder"),
        "T5.1.1's gated feed-forward",
    ),
    (
        lambda names: _T5_BLOCK + "DenseReluDense/wi/kernel" in names,
        ("t5", "t5_encoder", "t5_decoder"),
        "T5's encoder/block_* variables",
    ),
    (lambda names: any(n.startswith("GAU_alpha/") for n in names), ("gau_alpha",), "GAU_alpha/* variables"),
    (lambda names: any(n.startswith("electra/") for n in names), ("electra",), "electra/* variables"),
    (
        lambda names: any(n.startswith("bert/encoder/transformer/group_0/") for n in names),
        ("albert", "albert_unshared"),
        "ALBERT's shared layer group",
    ),
    (
        lambda names: _LAYER_NORM in names and "bert/embeddings/position_embeddings" in names,
        ("bert",),
        "BERT's LayerNorms and position embeddings",
    ),
    (lambda names: _LAYER_NORM in names, ("roformer", "nezha"), "BERT's LayerNorms but no position embeddings"),
    (
        lambda names: "bert/encoder/layer_0/attention/self/query/kernel" in names,
        ("roformer_v2",),
        "bias-free attention without LayerNorm",
    ),
)


def checkpoint_hint(names, model_class):
    """' (the checkpoint has ...: load it with model=...)' when the checkpoint ``names`` look like
    those of models other than ``model_class``; '' when they fit it or look like nothing known. A
    class of one's own fits the models it subclasses."""
    names = set(names)
    registered = model_class in MODELS.values()
    for fits, models, sign in _CHECKPOINT_SIGNS:
        if not fits(names):
            continue
        classes = [MODELS[m] for m in models]
        if any(cls is model_class or (not registered and issubclass(model_class, cls)) for cls in classes):
            return ""
        return f" (the checkpoint has {sign}: load it with " + " or ".join(f"model={m!r}" for m in models) + ")"
    return ""


def _warn_non_finite(reader, assignments, limit=8):
    """One ``CheckpointWarning`` naming the loaded variables that hold NaN or inf."""
    bad = []
    for _, value, ckpt_name in assignments:
        if value.dtype.kind in "fcV" and not np.isfinite(value).all():  # V: bfloat16
            bad.append(f"{ckpt_name} ({int(np.isnan(value).sum())} NaN, {int(np.isinf(value).sum())} inf)")
    if bad:
        shown = ", ".join(bad[:limit]) + (f", ... and {len(bad) - limit} more" if len(bad) > limit else "")
        warnings.warn(
            f"checkpoint {reader.path!r} holds NaN or inf in {len(bad)} variable(s) it loads: {shown}; "
            f"the model's outputs will not be finite",
            CheckpointWarning,
            stacklevel=3,
        )


def summarize_names(names, limit=8):
    """Checkpoint names listed compactly: names that differ only in their
    ``layer_N`` are grouped, e.g. ``GAU_alpha/encoder/layer_{4..5}/* (8 variables)``."""
    groups, singles = {}, []
    for name in names:
        match = re.match(r"(.*?layer_)(\d+)/", name)
        if match:
            groups.setdefault(match.group(1), []).append(int(match.group(2)))
        else:
            singles.append(name)
    parts = []
    for prefix, numbers in groups.items():
        layers = sorted(set(numbers))
        if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 1:
            span = f"{layers[0]}..{layers[-1]}"
        else:
            span = ",".join(map(str, layers))
        parts.append(f"{prefix}{{{span}}}/* ({len(numbers)} variables)")
    parts += singles
    shown = ", ".join(parts[:limit])
    return shown + (f", ... and {len(parts) - limit} more" if len(parts) > limit else "")


class _DictReader:
    """``{name: array}`` with the ``CheckpointReader`` interface (bert4keras
    accepts a dict as the checkpoint)."""

    path = "<dict checkpoint>"

    def __init__(self, values):
        self._values = values
        self.shapes = {name: list(np.shape(value)) for name, value in values.items()}

    def __contains__(self, name):
        return name in self._values

    def get(self, name):
        if name not in self._values:
            raise checkpoints.CheckpointError(f"the dict checkpoint has no variable {name!r}")
        return np.asarray(self._values[name])


def _reader(checkpoint):
    if isinstance(checkpoint, (_DictReader, checkpoints.CheckpointReader)):
        return checkpoint
    return _DictReader(checkpoint) if isinstance(checkpoint, dict) else checkpoints.CheckpointReader(checkpoint)


def _checked_ids(ids, rows, argument, where):
    """``ids`` as an int array, every one a row of an embedding matrix of ``rows`` rows."""
    array = np.asarray(ids)
    if array.size and (array.dtype.kind not in "iu" or array.min() < 0 or array.max() >= rows):
        bad = [i for i in np.ravel(array).tolist() if not isinstance(i, int) or not 0 <= i < rows][:5]
        raise checkpoints.CheckpointError(
            f"{argument}: id(s) {bad} are not rows of {where}, which has {rows} rows (ids 0..{rows - 1})"
        )
    return array


def _resolve_attr(layer, attr, layer_name):
    obj = layer
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise checkpoints.CheckpointError(
                f"variable_mapping: layer {layer_name!r} ({type(layer).__name__}) has no weight {attr!r}"
            )
        obj = getattr(obj, part)
    return obj
