"""Where a model name leads: ``@register(name, *aliases)`` on each architecture's builder class
(a ``Transformer`` subclass), ``register_backbone`` on its ``Backbone``, and the lookups the
builder, the checkpoint hints and the command lines read (``resolve_model_class``,
``model_names``, ``backbone_class``). A leaf: it imports nothing of ``gau_keras.models``.
"""

import types

_MODELS = {}
_PRIMARY = {}
_BACKBONES = {}
_ARGUMENTS = {}

#: name -> builder class, read-only (every registered name and alias)
MODELS = types.MappingProxyType(_MODELS)
#: builder class -> its ``Backbone`` class, read-only
BACKBONES = types.MappingProxyType(_BACKBONES)

#: the order a command line lists the models in (bert4keras's first); others follow as registered
LISTING_ORDER = (
    "bert",
    "albert",
    "albert_unshared",
    "nezha",
    "roformer",
    "electra",
    "gau_alpha",
    "roformer_v2",
    "srupp",
    "gpt",
    "gpt2",
    "gpt2_ml",
    "t5",
    "t5_encoder",
    "t5_decoder",
)


def register(name, *aliases, arguments=None):
    """Class decorator: the builder class answers to ``name`` (what command lines list) and
    ``aliases`` (accepted too); a name taken by another class is an error. ``arguments``:
    constructor arguments these names fix (bert4keras's ``'t5.1.1'`` is T5 with
    ``version='t5.1.1'``); names registered with arguments are not the class's listed name."""

    def decorate(cls):
        for key in (name, *aliases):
            if _MODELS.get(key, cls) is not cls:
                raise ValueError(f"model name {key!r} is already registered to {_MODELS[key].__name__}")
            _MODELS[key] = cls
            if arguments:
                _ARGUMENTS[key] = dict(arguments)
        if not arguments:
            _PRIMARY.setdefault(cls, name)
        return cls

    return decorate


def name_arguments(model):
    """The constructor arguments the model name ``model`` fixes (``register(..., arguments=)``),
    a new dict; {} for a class or a name that fixes none."""
    return dict(_ARGUMENTS.get(model.lower(), {})) if isinstance(model, str) else {}


def register_backbone_class(backbone):
    """Records ``backbone`` (a ``Backbone`` subclass) as the model class of its
    ``transformer_class``."""
    _BACKBONES[backbone.transformer_class] = backbone
    return backbone


def backbone_class(cls):
    """The ``Backbone`` class of builder class ``cls``, or None."""
    return _BACKBONES.get(cls)


def model_names(segment_ids=None):
    """One name per registered builder class (the name it registered, not an alias), in
    ``LISTING_ORDER``: what a command line lists (every key of ``MODELS`` is accepted).
    ``segment_ids=True``: only the encoders that read segment ids (what fine-tuning feeds and builds
    on); ``False``: the others."""

    def rank(name):
        return LISTING_ORDER.index(name) if name in LISTING_ORDER else len(LISTING_ORDER)

    names = sorted(_PRIMARY.values(), key=rank)  # sorted() is stable: the others as registered

    def fine_tunable(cls):
        return cls.takes_segment_ids and cls.is_encoder

    return tuple(n for n in names if segment_ids is None or fine_tunable(_MODELS[n]) == segment_ids)


def resolve_model_class(model):
    """The builder class of ``model``: a registered name or alias (any case), or a class as is."""
    if isinstance(model, str):
        key = model.lower()
        if key not in _MODELS:
            raise ValueError(f"unknown model {model!r}; expected one of {sorted(_MODELS)} or a class")
        return _MODELS[key]
    if isinstance(model, type):
        return model
    raise TypeError(f"model must be a name or a class, got {type(model).__name__}")
