"""The bert4keras-style Transformer base: layer reuse by name, the build
sequence, the options every model shares (attention-bias applications, RoPE
positions, conditional norms, RealFormer's scores); checkpoints by name come
from ``checkpointing.CheckpointMapping``.

Design notes: docs/models.md and docs/architecture.md (Extension points).
"""

import logging

import keras
from keras import ops

from gau_keras import activations as gau_activations
from gau_keras.initializers import ScaledTruncatedNormal
from gau_keras.layers import (
    AttentionBias,
    Embedding,
    LayerNormalization,
    MultiHeadAttention,
    SinusoidalPositionEmbedding,
)
from gau_keras.layers.heads import FirstToken
from gau_keras.layers.recompute import default_recompute
from gau_keras.models.checkpointing import UNUSED_VARIABLE_ACTIONS, CheckpointMapping
from gau_keras.models.decoding import NOT_ROUTED, DecodeStep

logger = logging.getLogger(__name__)

APPLICATIONS = ("encoder", "lm", "unilm")
_UNSET = object()
#: ``Transformer.build`` arguments of bert4keras (``build_transformer_model`` passes them on)
BUILD_ARGUMENTS = (
    "attention_caches",
    "layer_norm_cond",
    "layer_norm_cond_hidden_size",
    "layer_norm_cond_hidden_act",
    "additional_input_layers",
)


class Transformer(CheckpointMapping):
    """Base class: subclasses define ``get_inputs``, ``apply_embeddings``,
    ``apply_main_layers``, ``apply_final_layers`` and ``variable_mapping``.

    ``variable_mapping()`` returns ``{layer_name: {weight_attr: ckpt_name}}``
    where ``weight_attr`` is an attribute path on the layer (e.g.
    ``'i_dense.kernel'``), so loading never depends on weight order. A
    bert4keras-style list of checkpoint names is also accepted (matched to
    ``layer.trainable_weights`` in order).
    """

    #: whether the encoder reads segment ids (sentence-pair tasks feed them)
    takes_segment_ids = True
    #: whether the model has bert4keras's MLM head (``with_mlm``)
    has_mlm_head = True
    #: whether the model is an encoder (hidden states without heads: what fine-tuning builds on);
    #: False for the decoder-only language models (GPT), whose output is always the LM head's
    is_encoder = True
    #: config keys without which the model cannot be built
    required_config_keys = ("vocab_size", "hidden_size", "num_hidden_layers")

    #: exponent of the depth factor of the initializer (2: RoFormerV2, 3: GAU-alpha)
    initializer_order = 2
    #: the attention normalisation when the config names none
    default_normalization = "softmax"
    #: which of bert4keras's BERT options the class honours (the others are refused, saying why)
    supports_pooler = False
    supports_custom_position_ids = False
    supports_nsp = False
    supports_hierarchical_position = False
    supports_shared_segment_embeddings = False
    supports_residual_attention_scores = False
    supports_layer_norm_cond = False

    def __init__(
        self,
        vocab_size,
        hidden_size,
        num_hidden_layers,
        num_attention_heads=1,
        intermediate_size=None,
        hidden_act="relu",
        dropout_rate=None,
        attention_dropout_rate=None,
        embedding_size=None,
        attention_head_size=None,
        attention_key_size=None,
        sequence_length=None,
        keep_tokens=None,
        compound_tokens=None,
        segment_vocab_size=2,
        max_position=512,
        layer_norm_epsilon=None,
        softmax_plus_min_len=16,
        normalization=None,
        recompute=None,
        with_mlm=False,
        with_pool=False,
        with_nsp=False,
        custom_position_ids=False,
        hierarchical_position=None,
        shared_segment_embeddings=False,
        residual_attention_scores=False,
        autoresize_weights=False,
        application="encoder",
        ignore_invalid_weights=False,
        unused_checkpoint_variables="warn",
        layers=None,
        prefix=None,
        name=None,
    ):
        if keep_tokens is not None:
            vocab_size = len(keep_tokens)
        if compound_tokens is not None:
            vocab_size += len(compound_tokens)
        if application not in APPLICATIONS:
            raise ValueError(f"application must be one of {APPLICATIONS}, got {application!r}")
        if unused_checkpoint_variables not in UNUSED_VARIABLE_ACTIONS:
            raise ValueError(
                f"unused_checkpoint_variables must be one of {UNUSED_VARIABLE_ACTIONS}, "
                f"got {unused_checkpoint_variables!r}"
            )
        self.application = application
        self._refuse_bert_only_options(
            with_pool,
            with_nsp,
            custom_position_ids,
            hierarchical_position,
            shared_segment_embeddings,
            residual_attention_scores,
        )
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = attention_head_size or hidden_size // num_attention_heads
        self.attention_key_size = attention_key_size or self.attention_head_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.dropout_rate = dropout_rate or 0.0
        self.attention_dropout_rate = attention_dropout_rate or 0.0
        self.embedding_size = embedding_size or hidden_size
        self.sequence_length = sequence_length
        self.keep_tokens = keep_tokens
        self.compound_tokens = compound_tokens
        self.segment_vocab_size = segment_vocab_size
        self.max_position = max_position
        self.layer_norm_epsilon = layer_norm_epsilon
        self.softmax_plus_min_len = softmax_plus_min_len
        self.normalization = normalization or self.default_normalization
        # bert4keras's RECOMPUTE: the attention/FFN layers recompute their forward in the backward pass
        self.recompute = default_recompute() if recompute is None else bool(recompute)
        self.application = application
        # bert4keras: LM and UniLM models always have the MLM head
        self.with_mlm = with_mlm or application in ("lm", "unilm")
        self.with_pool = with_pool
        self.with_nsp = with_nsp
        self.custom_position_ids = custom_position_ids
        self.hierarchical_position = hierarchical_position
        self.shared_segment_embeddings = shared_segment_embeddings
        self.residual_attention_scores = residual_attention_scores
        self.autoresize_weights = autoresize_weights
        self.ignore_invalid_weights = ignore_invalid_weights
        self.unused_checkpoint_variables = unused_checkpoint_variables
        self.layers = {} if layers is None else layers
        self.prefix = prefix or ""
        self.name = name
        # per graph (the model inputs they are computed from): see graph_inputs
        self._attention_biases = GraphCache()
        self._position_biases = GraphCache()
        self.attention_scores = None
        self.inputs = self.input = None
        self.outputs = self.output = None
        self.model = None
        self.encoder_output = None
        self.layer_norm_conds = [None, None, "linear"]
        self._decode = None  # the DecodeStep of a cached pass in progress (cached_logits)
        self.built = False

    def _refuse_bert_only_options(
        self,
        with_pool,
        with_nsp,
        custom_position_ids,
        hierarchical_position,
        shared_segment_embeddings,
        residual_attention_scores,
    ):
        """bert4keras accepts these for every model and some of its models ignore
        them; here an option the model cannot honour is an error saying why."""
        model = type(self).__name__
        if with_pool and not self.supports_pooler:
            raise ValueError(
                f"with_pool={with_pool!r}: {model} has no pooler (it is not a BERT-style encoder with a [CLS] position)"
            )
        if custom_position_ids and not self.supports_custom_position_ids:
            raise ValueError(f"custom_position_ids=True: {model} takes no position ids")
        if with_nsp and not self.supports_nsp:
            raise ValueError(
                f"with_nsp={with_nsp!r}: {model} has no next-sentence head (GAU-alpha and "
                f"RoFormerV2 were pretrained without NSP); use with_pool and a Dense(2) of your own"
            )
        if hierarchical_position and not self.supports_hierarchical_position:
            raise ValueError(
                f"hierarchical_position={hierarchical_position!r} decomposes BERT's absolute "
                f"position embeddings; {model} has none (it uses relative or rotary positions, "
                f"which need no decomposition to run past max_position)"
            )
        if shared_segment_embeddings and not self.supports_shared_segment_embeddings:
            raise ValueError(
                f"shared_segment_embeddings=True is not supported by {model}: its token embedding "
                f"masks id 0, which would mask every first-segment token"
            )
        if residual_attention_scores and not self.supports_residual_attention_scores:
            raise ValueError(f"residual_attention_scores=True (RealFormer) is not supported by {model}")
        if residual_attention_scores and self.application != "encoder":
            raise ValueError(
                f"residual_attention_scores=True with application={self.application!r}: the "
                f"scores of the previous layer cannot be added to the boolean LM/UniLM mask "
                f"(bert4keras 0.11.5 fails there too); use application='encoder'"
            )

    # ------------------------------------------------------------------ build
    def build(
        self,
        attention_caches=None,
        layer_norm_cond=None,
        layer_norm_cond_hidden_size=None,
        layer_norm_cond_hidden_act=None,
        additional_input_layers=None,
        **kwargs,
    ):
        """Creates ``self.model`` once: a plain ``keras.Model`` (``build_transformer_model``
        gives it bert4keras-era (Keras 2) calls, ``gau_keras.bert4keras.model``).

        bert4keras's build arguments: ``additional_input_layers`` (Keras inputs
        appended to the model's, for layers of your own that use them) is
        supported; so is ``layer_norm_cond`` (a tensor [B, c] or [B, L, c]
        conditioning every layer norm's gamma and beta, through a Dense of
        ``layer_norm_cond_hidden_size`` units and ``layer_norm_cond_hidden_act``
        when given) by the models whose norms have gamma and beta (BERT and its
        family); ``attention_caches`` is refused with the reason. Other keywords
        (bert4keras passes the whole config) are ignored, as there.
        """
        if self.built:
            return self.model
        model = type(self).__name__
        if attention_caches:
            raise ValueError(
                f"attention_caches: {model} has no cached-key/value attention; "
                f"AutoRegressiveDecoder recomputes the prefix at each step"
            )
        if layer_norm_cond is not None and not self.supports_layer_norm_cond:
            raise ValueError(
                f"layer_norm_cond: {model}'s norms are parameter-free RMS norms (no gamma/beta "
                f"to condition); conditional layer norm applies to BERT and its family"
            )
        self.layer_norm_conds = [layer_norm_cond, layer_norm_cond_hidden_size, layer_norm_cond_hidden_act or "linear"]
        self.build_graph(additional_input_layers)
        self.model = keras.Model(self.inputs, self.output, name=self.name)
        self.built = True
        return self.model

    def build_graph(self, additional_input_layers=None):
        """Creates the inputs and applies the layers: sets ``inputs`` and ``outputs``, not ``model``
        (a ``Backbone`` is the model of a graph built this way)."""
        inputs = self.get_inputs()
        self.set_inputs(inputs, additional_input_layers)
        self.set_outputs(self.call(inputs))

    def set_inputs(self, inputs, additional_input_layers=None):
        """Sets ``inputs`` (a list) and ``input`` (the one input, or the list)."""
        inputs = [] if inputs is None else list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if additional_input_layers is not None:
            extra = additional_input_layers
            inputs.extend(extra if isinstance(extra, (list, tuple)) else [extra])
        self.inputs = inputs
        self.input = inputs if len(inputs) > 1 else inputs[0]

    def set_outputs(self, outputs):
        """Sets ``outputs`` (a list) and ``output`` (the one output, or the list)."""
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        self.outputs = outputs
        self.output = outputs if len(outputs) > 1 else outputs[0]

    def call(self, inputs):
        x = self.apply_embeddings(inputs)
        for index in range(self.num_hidden_layers):
            x = self.apply_main_layers(x, index)
        self.encoder_output = x  # the hidden states before any head
        return self.apply_final_layers(x)

    def get_inputs(self):
        """``Input-Token`` [B, L], ``Input-Segment`` (unless ``segment_vocab_size=0``) and, with
        ``custom_position_ids``, ``Input-Position``."""
        inputs = [self.input_layer("Input-Token")]
        if self.segment_vocab_size > 0:
            inputs.append(self.input_layer("Input-Segment"))
        if self.custom_position_ids:
            inputs.append(self.input_layer("Input-Position"))
        return inputs

    def input_layer(self, name):
        """An id input [B, sequence_length] named ``prefix + name``, of Keras's floatx as in
        bert4keras (so that a loss may do arithmetic on ``inputs[1]``; the embeddings cast
        the ids to integers)."""
        return keras.Input(shape=(self.sequence_length,), dtype=keras.config.floatx(), name=self.prefixed(name))

    def embed_tokens(self, token_ids):
        """``Embedding-Token`` (vocab_size x embedding_size, id 0 masked) on ids [B, L] -> [B, L, E]:
        the token table every model reads, and its tied output heads."""
        return self.apply(
            token_ids,
            Embedding,
            input_dim=self.vocab_size,
            output_dim=self.embedding_size,
            embeddings_initializer=self.initializer,
            mask_zero=True,
            name="Embedding-Token",
        )

    def layer_norm(self, x, name, epsilon=None):
        """bert4keras's LayerNormalization (gamma and beta), conditioned on ``layer_norm_cond``
        when the model was built with one; ``epsilon`` None = Keras's (1e-7)."""
        cond, units, activation = self.layer_norm_conds
        return self.apply(
            self.simplify([x, cond]),
            LayerNormalization,
            epsilon=epsilon,
            conditional=cond is not None,
            hidden_units=units,
            hidden_activation=activation,
            hidden_initializer=self.initializer,
            name=name,
        )

    @staticmethod
    def simplify(inputs):
        """``inputs`` without its Nones; a single remaining item unwrapped."""
        inputs = [i for i in inputs if i is not None]
        return inputs[0] if len(inputs) == 1 else inputs

    def prefixed(self, name):
        return None if name is None else self.prefix + name

    def apply(self, inputs=None, layer=None, arguments=None, **kwargs):
        """Calls the layer named ``kwargs['name']``, creating it on first use.

        A Dropout with rate 0 is skipped, as in bert4keras.
        """
        if layer is keras.layers.Dropout and not kwargs.get("rate"):
            return inputs
        residual_scores = layer is MultiHeadAttention and self.residual_attention_scores
        if residual_scores:
            kwargs["return_attention_scores"] = True
        name = self.prefixed(kwargs.get("name"))
        kwargs["name"] = name
        if name not in self.layers and self._decode is not None:
            raise ValueError(
                f"{type(self).__name__}: a cached pass reached the layer {name!r}, which the built model "
                f"does not have: this model cannot decode with a key/value cache"
            )
        if name not in self.layers:
            if isinstance(kwargs.get("activation"), str):  # 'gelu' as bert4keras's set_gelu chose
                kwargs["activation"] = gau_activations.get(kwargs["activation"])
            instance = layer(**kwargs)
            self.layers[instance.name] = instance
            name = instance.name
        if inputs is None:
            return self.layers[name]
        if self._decode is not None:
            output = self._decode.call(self.layers[name], inputs, arguments)
            if output is not NOT_ROUTED:
                return output
        if residual_scores:
            return self._residual_attention(self.layers[name], inputs, dict(arguments or {}))
        return self.layers[name](inputs, **(arguments or {}))

    def _residual_attention(self, layer, inputs, arguments):
        """RealFormer (``residual_attention_scores``): the previous attention layer's scores
        [B, heads, L, L] are this one's additive bias; returns the attention output and keeps
        its scores for the next layer."""
        if self.attention_scores is not None:
            inputs = list(inputs)
            inputs.insert(3, self.attention_scores)
            arguments["a_bias"] = True
        output, self.attention_scores = layer(inputs, **arguments)
        return output

    @property
    def initializer(self):
        return ScaledTruncatedNormal(self.num_hidden_layers, order=self.initializer_order)

    #: the name of the MLM head's activation layer (BERT's family: ``MLM-Activation``)
    mlm_activation_name = "Output-MLM-Activation"

    def mlm_transform(self, x, width, arguments=None):
        """Hook: the MLM head's layers before the tied token embedding, on hidden states of
        ``width``: Output-Mapping (when width != embedding_size) -> Output-MLM-Dropout
        (``arguments``: its call arguments, e.g. ``training``)."""
        if self.embedding_size != width:
            x = self.apply(
                x,
                keras.layers.Dense,
                units=self.embedding_size,
                use_bias=False,
                kernel_initializer=self.initializer,
                name="Output-Mapping",
            )
        return self.apply(
            x, keras.layers.Dropout, arguments=arguments, rate=self.dropout_rate, name="Output-MLM-Dropout"
        )

    def mlm_output_bias(self, logits):
        """Hook: what follows the tied token embedding's logits (none here; BERT: MLM-Bias)."""
        return logits

    def mlm_head_logits(self, x, width, arguments=None):
        """The one MLM head up to its logits, on hidden states [..., width] -> [..., V]:
        ``mlm_transform`` -> Embedding-Token (dense: the tied matrix) -> ``mlm_output_bias``.
        Layers are made on first use and reused after (the head of the built model)."""
        x = self.mlm_transform(x, width, arguments)
        x = self.apply(x, Embedding, arguments={"mode": "dense"}, name="Embedding-Token")
        return self.mlm_output_bias(x)

    def apply_mlm_head(self, x, width):
        """The MLM head on hidden states of ``width``: its logits (``mlm_head_logits``) ->
        ``mlm_activation_name`` (softmax for ``with_mlm=True``, else the named activation)."""
        activation = "softmax" if self.with_mlm is True else self.with_mlm
        # float32 under mixed precision: a softmax over the vocab in float16 is off by ~1e-2
        return self.apply(
            self.mlm_head_logits(x, width),
            keras.layers.Activation,
            activation=activation,
            dtype="float32",
            name=self.mlm_activation_name,
        )

    def apply_pooler(self, x):
        """bert4keras's BERT pooler: ``Pooler`` ([CLS] vector, [B, H]) ->
        ``Pooler-Dense`` (tanh for ``with_pool=True``, else the named activation)."""
        x = self.apply(x, FirstToken, name="Pooler")
        activation = "tanh" if self.with_pool is True else self.with_pool
        return self.apply(
            x,
            keras.layers.Dense,
            units=self.hidden_size,
            activation=activation,
            kernel_initializer=self.initializer,
            name="Pooler-Dense",
        )

    def apply_heads(self, x, width):
        """The heads on hidden states ``x`` [B, L, width]: the pooler's (``apply_pooler``) and
        the MLM head's outputs, packed by ``pack_outputs``."""
        heads = []
        if self.with_pool:
            heads.append(self.apply_pooler(x))
        if self.with_mlm:
            heads.append(self.apply_mlm_head(x, width))
        return pack_outputs(x, heads)

    def apply_final_layers(self, x):
        return self.apply_heads(x, self.hidden_size)

    # ------------------------------------------------------------- biases
    @property
    def attention_bias(self):
        """The attention bias of the model's own graph (bert4keras's attribute), or None."""
        return self._attention_biases.get(self._own_input(self._bias_source()[0]))

    @attention_bias.setter
    def attention_bias(self, value):
        self._attention_biases.set(self._own_input(self._bias_source()[0]), value)

    @property
    def position_bias(self):
        """The position embeddings of the model's own graph (bert4keras's attribute), or None."""
        return self._position_biases.get(self._own_input("Input-Token"))

    @position_bias.setter
    def position_bias(self, value):
        self._position_biases.set(self._own_input("Input-Token"), value)

    def _own_input(self, name):
        """The model's own input ``name``: the key of its graph in the caches (None before it has inputs)."""
        if not self.inputs:
            return None
        return self.inputs[self._input_index(name)]

    def _bias_source(self):
        """(input the application's attention bias comes from, its mode, its layer name)."""
        if self.application == "lm":
            return "Input-Token", "lm", "Attention-LM-Mask"
        return "Input-Segment", "unilm", "Attention-UniLM-Mask"

    def graph_input(self, x, name):
        """The input ``name`` ('Input-Token', ...) of the graph ``x`` is computed from: the
        model's own, or, when ``x`` comes from another model's inputs (layers of this
        model applied to that model's tensors, as bert-of-theseus does), that model's
        input of the same name (any prefix)."""
        roots = graph_inputs(x)
        own = self.inputs[self._input_index(name)]
        if not roots or any(root is own for root in roots):
            return own
        for root in roots:
            if _input_name(root).endswith(name):
                return root
        raise ValueError(
            f"{self.prefixed(name)!r}: the tensors passed to {type(self).__name__}'s layers come "
            f"from the inputs {[_input_name(r) for r in roots]}, none of which is an {name!r}"
        )

    def _input_index(self, name):
        names = [self.prefixed("Input-Token")]
        if getattr(self, "segment_vocab_size", 0) > 0:
            names.append(self.prefixed("Input-Segment"))
        if self.prefixed(name) not in names:
            raise ValueError(f"{type(self).__name__} has no input {name!r} (it has {names})")
        return names.index(self.prefixed(name))

    def compute_attention_bias(self, inputs=None):
        """The additive attention bias of the application ([1|B, L, L]) or None, for the
        graph of ``inputs`` (a tensor of the graph; default: the model's own inputs):
        built once per graph, so layers applied to another model's tensors get a bias
        computed from that model's inputs."""
        if self.application == "encoder":
            return None
        if self._decode is not None:
            return self._decode.visible
        if self.application == "unilm" and getattr(self, "segment_vocab_size", 0) <= 0:
            raise ValueError("application='unilm' needs segment ids: segment_vocab_size must be > 0")
        source_name, mode, layer_name = self._bias_source()
        source = self.graph_input(self.inputs if inputs is None else inputs, source_name)
        return self._attention_biases.get_or_build(
            source, lambda: self.apply(source, AttentionBias, mode=mode, name=layer_name)
        )

    def compute_position_bias(self, inputs=None):
        """Rotary sinusoidal embeddings [1, L, attention_key_size] (or [B, L,
        attention_key_size] from ``Input-Position``) for the graph of ``inputs``
        (hidden states [B, L, ...]), built once per graph."""

        def build():
            # [1 or B, L, d]; from the Input-Position ids with custom_position_ids
            positions = (
                [inputs, self.inputs[1 + int(self.segment_vocab_size > 0)]] if self.custom_position_ids else inputs
            )
            return self.apply(
                positions,
                SinusoidalPositionEmbedding,
                output_dim=self.attention_key_size,
                merge_mode="zero",
                custom_position_ids=self.custom_position_ids,
                name="Embedding-Rotary-Position",
            )

        if self._decode is not None:
            return build()
        return self._position_biases.get_or_build(self.graph_input(inputs, "Input-Token"), build)

    # ------------------------------------------------------------ cached decoding
    def cache_refusal(self):
        """Why this model cannot decode with a key/value cache, or None when it can (a causal or
        UniLM application with the MLM head; no option that needs the whole sequence)."""
        model = type(self).__name__
        if self.application not in ("lm", "unilm"):
            return (
                f"{model} was built with application={self.application!r}: a bidirectional encoder "
                f"sees later tokens, so its outputs change as the sequence grows (use 'lm' or 'unilm')"
            )
        if not self.with_mlm:
            return f"{model} has no language-model head"
        if self.custom_position_ids or self.layer_norm_conds[0] is not None:
            return f"{model}: custom_position_ids and layer_norm_cond take inputs the cache does not hold"
        return None

    def cached_logits(
        self, token_ids, segment_ids, caches, index, visible, context=None, context_mask=None, logits_at=None
    ):
        """The LM logits of T new tokens over a key/value cache: the model's own
        ``apply_embeddings``, ``apply_main_layers`` and ``decode_logits``, with the attention
        layers reading and writing ``caches`` (``models.decoding.DecodeStep``).

        Args:
            token_ids, segment_ids: int [B, T], the new tokens at positions ``index`` ..
                ``index + T - 1`` (``segment_ids`` unused by models without segments).
            caches: the attention layers' ``(k, v)`` caches in call order, or None (the first
                pass, T = N: its keys and values become the caches).
            index: int scalar (tensor), the position of the first new token.
            visible: bool [B, T, N], the cache slots each new token may attend to.
            context, context_mask: a decoder's encoder output [B, Lc, H] and its real tokens
                bool [B, Lc] (T5), or None.
            logits_at: int scalar (tensor), or None: the LM head runs on that one of the T
                positions only (a first pass needs the last prompt position's logits, not
                the whole buffer's), and the logits are [B, 1, V].
        Returns:
            (logits [B, T, V] (or [B, 1, V]) float32, the updated caches).
        """
        step = DecodeStep(caches, index, visible, token_ids.shape[1], context, context_mask)
        self._decode = step
        # what the model's own code records of the graph it builds (biases, encoder_output) is
        # that graph's: the pass's tensors do not replace it
        kept = (list(self._attention_biases._items), list(self._position_biases._items), self.encoder_output)
        kept_attributes = {name: self.__dict__.get(name, _UNSET) for name in ("attention_bias", "position_bias")}
        try:
            x = self.apply_embeddings(self.decode_inputs(token_ids, segment_ids, context))
            for layer_index in range(self.num_hidden_layers):
                x = self.apply_main_layers(x, layer_index)
            if logits_at is not None:
                x = self.decode_position(x, logits_at)
            logits = self.decode_logits(x)
        finally:
            self._decode = None
            self._attention_biases._items, self._position_biases._items, self.encoder_output = kept
            for name, value in kept_attributes.items():  # T5's plain attributes
                if value is _UNSET:
                    self.__dict__.pop(name, None)
                else:
                    self.__dict__[name] = value
        return ops.cast(logits, "float32"), step.new_caches

    #: whether a cached pass hides id 0 from the attention, as the model's mask does (T5's decoder: no)
    decode_masks_padding = True

    def decode_inputs(self, token_ids, segment_ids, context):
        """Hook: what ``apply_embeddings`` takes in a cached pass (the ids, and the segment ids
        of a model that has them; T5's decoder: the context and the ids)."""
        return [token_ids] + ([segment_ids] if self.segment_vocab_size > 0 else [])

    def decode_position(self, x, index):
        """Hook: the main layers' output ``x`` [B, T, H] at the one position ``index`` (int
        scalar): [B, 1, H]. What ``decode_logits`` takes in a first pass."""
        return ops.take(x, ops.reshape(index, (1,)), axis=1)

    def decode_logits(self, x):
        """Hook: the LM logits [B, T, V] of the last hidden states (the MLM head's)."""
        return self.mlm_head_logits(x, self.hidden_size)


def pack_outputs(hidden, heads):
    """bert4keras's output rule: no head -> the encoder output ``hidden``; one head -> its
    output; several -> the list of their outputs, in order (pooled or NSP, then MLM)."""
    if not heads:
        return hidden
    return heads[0] if len(heads) == 1 else list(heads)


class GraphCache:
    """Values built once per graph (an attention bias, position embeddings), found by the graph's
    input tensor itself: by identity, not ``id()``, which Python reuses once a tensor is freed."""

    def __init__(self):
        self._items = []

    def get(self, source):
        """The value of the graph of input ``source``, or None."""
        return next((value for tensor, value in self._items if tensor is source), None)

    def set(self, source, value):
        self._items = [(t, v) for t, v in self._items if t is not source] + [(source, value)]

    def get_or_build(self, source, build):
        """The value of the graph of ``source``; ``build()`` makes it on first use."""
        if not any(tensor is source for tensor, _ in self._items):
            self.set(source, build())
        return self.get(source)


def graph_inputs(tensors):
    """The model inputs (``keras.Input`` tensors) that symbolic ``tensors`` are computed
    from, in the order they are found; [] for anything that is not a symbolic tensor."""
    stack = list(keras.tree.flatten(tensors))
    seen, roots = set(), []
    while stack:
        tensor = stack.pop()
        history = getattr(tensor, "_keras_history", None)
        if history is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        node = history.operation._inbound_nodes[history.node_index]
        if node.is_input:
            roots.append(tensor)
        else:
            stack.extend(node.input_tensors)
    return roots


def _input_name(tensor):
    return tensor._keras_history.operation.name
