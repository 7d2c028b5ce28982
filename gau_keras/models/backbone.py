"""``Backbone``: a model class per architecture (keras-hub's shape) over the bert4keras
builder of that architecture.

``BertBackbone(vocab_size=..., hidden_size=..., ...)`` is the ``keras.Model`` that
``build_transformer_model(model='bert', ...)`` returns: the same graph, the same layer
names, but a class of its own whose ``get_config()`` holds the constructor arguments, so a
``.keras`` file rebuilds it from its config. ``from_preset(name_or_directory)`` builds one
from a released model directory (bert_config.json, bert_model.ckpt.*) or a named preset of
the package (``GAUAlphaBackbone.from_preset("gau_alpha_tiny")``: the bundled model).
The bert4keras builder stays reachable as ``backbone.transformer`` (``variable_mapping``,
``save_weights_as_checkpoint``, ``layers`` by name). The constructor, and so a ``.keras`` file's
config, is resolved and checked as ``build_transformer_model``'s arguments are
(``config.resolve_arguments``: the same aliases, the same named errors).
"""

import os

import keras
import numpy as np

from gau_keras.models.config import ConfigError, UnknownArgumentError, resolve_arguments
from gau_keras.models.huggingface import is_hf_directory, read_hf_directory
from gau_keras.models.presets import model_files
from gau_keras.models.registry import BACKBONES, backbone_class, register_backbone_class, resolve_model_class
from gau_keras.registration import PACKAGE

__all__ = ["BACKBONES", "Backbone", "register_backbone"]


def register_backbone(cls):
    """Class decorator: a ``Backbone`` subclass, serialisable and found by its builder class
    (``registry.backbone_class``)."""
    keras.saving.register_keras_serializable(package=PACKAGE)(cls)
    return register_backbone_class(cls)


def _plain(value):
    """A config value as JSON-friendly Python (numpy ids lists -> lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _compound_item(item):
    """A ``compound_tokens`` item for a JSON config: a list of ids stays a list (equal weights);
    bert4keras's ``(ids, weights)`` tuple, which JSON would turn into a list, becomes a dict."""
    if isinstance(item, tuple):
        ids, weights = item
        return {"ids": _plain(ids), "weights": _plain(weights)}
    return _plain(item)


def _config_value(key, value):
    """A constructor argument as the JSON config holds it."""
    if key == "compound_tokens" and value is not None:
        return [_compound_item(item) for item in value]
    return _plain(value)


class Backbone(keras.Model):
    """The model of one architecture; subclasses set ``transformer_class`` and ``presets``
    (``{name: model directory}``). Constructor arguments are the builder's (``vocab_size``,
    ``hidden_size``, ..., ``with_mlm``, ``application``); see ``build_transformer_model``."""

    transformer_class = None
    presets = {}

    def __init__(self, name=None, trainable=True, **config):
        config = resolve_arguments(self.transformer_class, config, model=type(self).__name__)
        transformer = self.transformer_class(name=name, **config)
        transformer.build_graph()
        super().__init__(transformer.inputs, transformer.output, name=name, trainable=trainable)
        transformer.model = self
        transformer.built = True
        self.transformer = transformer
        self._backbone_config = {key: _config_value(key, value) for key, value in config.items()}

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._backbone_config}

    def generate(
        self,
        inputs,
        max_new_tokens=32,
        end_id=None,
        strategy="greedy",
        num_beams=4,
        top_k=None,
        top_p=None,
        temperature=1.0,
        start_id=None,
        max_length=None,
        seed=None,
    ):
        """New ids after a prompt, decoded with a key/value cache in one compiled loop
        (``gau_keras.generation.CachedLM``; docs/generation.md).

        Args:
            inputs: ``[token_ids]`` or ``[token_ids, segment_ids]`` of one prompt (1-D each); T5:
                ``[encoder_token_ids]``.
            max_new_tokens: the most new ids.
            end_id: the id that ends the output (None: ``max_new_tokens`` ids).
            strategy: 'greedy', 'sample' (``top_k``, ``top_p``, ``temperature``, ``seed``: numpy's)
                or 'beam' (``num_beams``).
            start_id: the id the output starts with (T5: default 0, its decoder start).
            max_length: the cache's slots (default: the prompt plus ``max_new_tokens``).
        Returns:
            int array [new ids] (``start_id`` first when given; ``end_id`` last when reached).
        """
        from gau_keras.generation import CachedLM

        if strategy not in ("greedy", "sample", "beam"):
            raise ValueError(f"generate: strategy must be 'greedy', 'sample' or 'beam', got {strategy!r}")
        seq2seq = hasattr(self.transformer, "_decoder")
        start_id = 0 if seq2seq and start_id is None else start_id
        prompt = 0 if seq2seq else len(inputs[0])
        size = int(max_length or prompt + int(max_new_tokens) + 1 + (start_id is not None))
        source = max(len(inputs[0]), 1)  # T5: the encoder's input
        cached = getattr(self, "_cached_lm", None)
        if cached is None or cached.max_length != size or (seq2seq and cached.max_input_length < source):
            cached = self._cached_lm = CachedLM(self, max_length=size, max_input_length=source)
        if seed is not None:
            np.random.seed(seed)
        if strategy == "beam":
            return cached.beam_search(inputs, num_beams, max_new_tokens, end_id, start_id, 1, temperature)
        top_k = 1 if strategy == "greedy" else top_k
        top_p = None if strategy == "greedy" else top_p
        return cached.random_sample(inputs, 1, max_new_tokens, end_id, top_k, top_p, start_id, 1, temperature)[0]

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("compound_tokens") is not None:
            config["compound_tokens"] = [
                item if isinstance(item, list) else (item["ids"], item["weights"]) for item in config["compound_tokens"]
            ]
        try:
            return cls(**config)
        except UnknownArgumentError as error:
            # a plain ConfigError: Keras buries a TypeError from from_config under a deserialisation hint
            raise ConfigError(str(error)) from None

    @classmethod
    def preset_directory(cls, preset):
        """The model directory of a preset name of this class, or ``preset`` itself when it is
        a directory; an error listing the presets otherwise."""
        if not isinstance(preset, (str, os.PathLike)):
            raise TypeError(
                f"{cls.__name__}.from_preset: preset must be a preset name "
                f"({sorted(cls.presets) or 'none'}) or a model directory, got {preset!r}"
            )
        if preset in cls.presets:
            return cls.presets[preset]()
        if os.path.isdir(os.fspath(preset)):
            return os.fspath(preset)
        raise ValueError(
            f"{cls.__name__}.from_preset: {preset!r} is neither a preset of this class "
            f"({sorted(cls.presets) or 'none'}) nor a model directory"
        )

    @classmethod
    def _hugging_face(cls, directory):
        """(config arguments, checkpoint) of a Hugging Face directory of this class's model."""
        name, config, checkpoint = read_hf_directory(directory)
        if resolve_model_class(name) is not cls.transformer_class:
            other = backbone_class(resolve_model_class(name))
            raise ConfigError(
                f"{cls.__name__}.from_preset: {directory!r} holds a {name!r} model (its config.json's "
                f"model_type); load it with {other.__name__}.from_preset"
            )
        return config, checkpoint

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """The backbone of a preset (a name in ``presets`` or a released model directory:
        bert_config.json or config.json, bert_model.ckpt.*), with its checkpoint loaded unless
        ``load_weights=False``; ``kwargs`` override the config (``with_mlm=True``, ...). A Hugging
        Face model directory (config.json, model.safetensors or pytorch_model.bin) is read by
        ``gau_keras.models.huggingface``; its ``model_type`` must be this class's model."""
        directory = cls.preset_directory(preset)
        if is_hf_directory(directory):
            config_path, checkpoint = cls._hugging_face(directory)
        else:
            config_path, checkpoint, _ = model_files(directory)
        backbone = cls(**resolve_arguments(cls.transformer_class, kwargs, config_path, model=cls.__name__))
        if load_weights:
            backbone.transformer.load_weights_from_checkpoint(checkpoint)
        return backbone
