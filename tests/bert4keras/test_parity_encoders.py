"""gau_keras's BERT-family encoders vs the ORIGINAL bert4keras 0.11.5 (run in a subprocess).

Models: bert, roberta (an alias of bert), albert, albert_unshared, nezha, roformer (v1)
and electra, each with the options bert4keras gives it (heads, position options,
segment options, embedding/attention sizes, vocabulary surgery, RealFormer's residual
attention scores, conditional layer norm, layer-name prefix, lm/unilm applications).

Method, per case (tests/reference/harness.py::run_bert4keras_code; one subprocess for
every forward case and one for every reverse case, their results cached for the JAX pass):
  * forward (bert4keras -> us): bert4keras builds the model from a tiny config, every
    trainable weight is moved off its initial value by seeded noise, its own
    ``save_weights_as_checkpoint`` writes the weights, and it returns every checkpoint
    variable, every model output, the hidden states (the last ``FeedForward-Norm``) and
    the MLM logits (the input of ``MLM-Activation``) on a fixed batch. We build the same
    model, load those variables (as a dict, or from a file we write: cases alternate)
    and compare. Cases with vocabulary surgery (keep_tokens / compound_tokens) and
    albert_unshared load the checkpoint of another bert4keras model (the full-vocabulary
    or shared ALBERT one) on both sides.
  * reverse (us -> bert4keras): we build the model, set every trainable weight to seeded
    values, save it with our ``save_weights_as_checkpoint``; the variables travel to the
    snippet as arrays (so the result stays cacheable), the snippet writes them into a
    TF1 checkpoint file and bert4keras loads that file.
  * the checkpoint our ``save_weights_as_checkpoint`` writes has the names and shapes
    (and, after a load, the values) of the one bert4keras writes for the same model;
    the keras model has bert4keras's layer names and output order.

Tolerances: hidden states and probabilities 1e-5 absolute, logits 1e-4 absolute.
Run with ``-s`` to see the max |diff| of each case and the markdown parity table
printed at the end of the module.

The batch (length 40, or 80 where the sequence must outrun a position table): a short
right-padded row, a left-padded two-segment row, a full row and a right-padded
two-segment row. Its tokens are real Chinese text tokenized with the 12000-token vocab
of ../shared/data (or $GAU_KERAS_DATA) when it is there, random ids otherwise.
"""

import dataclasses
import json
import os
import pathlib

import numpy as np
import pytest

from gau_keras import build_transformer_model
from tests.reference.harness import run_bert4keras_code

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

HIDDEN_ATOL, PROBS_ATOL, LOGITS_ATOL = 1e-5, 1e-5, 1e-4
#: vocab-wide outputs ([B, L, V], V >= VOCAB_WIDE) are compared on every VOCAB_STRIDE-th column
#: (the softmax still runs over the whole vocab): this keeps the cached reference results small
VOCAB_WIDE, VOCAB_STRIDE = 1000, 16
NOISE = 0.05  # scale of the seeded noise put on every weight
SEED = 20240607
LENGTH, LONG_LENGTH = 40, 80
COND_WIDTH = 8
VOCAB = 12000
SPECIAL_IDS = (0, 100, 101, 102, 103)  # [PAD] [UNK] [CLS] [SEP] [MASK] of the shared vocab

BASE_CONFIG = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}
#: ALBERT and ELECTRA configs carry an embedding_size (the released ones do too)
SMALL_EMBEDDING = {"embedding_size": 16}

SHARED_DATA = pathlib.Path(
    os.environ.get("GAU_KERAS_DATA", pathlib.Path(__file__).resolve().parents[3] / "shared" / "data")
)


# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Case:
    """One model build, the same on both sides."""

    group: str  # model family (the cases are listed by family)
    name: str  # what it checks
    model: str
    options: dict = dataclasses.field(default_factory=dict)  # build_transformer_model keywords
    application: str = "encoder"
    config: dict = dataclasses.field(default_factory=dict)  # overrides of BASE_CONFIG
    feeds: tuple = ("token_ids", "segment_ids")  # arrays fed to the model inputs, in order
    cond: int = 0  # width of the layer_norm_cond Input (0: no conditional layer norm)
    source: str = None  # model whose checkpoint this one loads (None: its own)

    @property
    def key(self):
        return f"{self.model}.{self.name}"

    @property
    def full_config(self):
        return {**BASE_CONFIG, **self.config}

    @property
    def prefix(self):
        return self.options.get("prefix") or ""

    @property
    def source_options(self):
        """Options of the model that writes the checkpoint: the same heads, no vocabulary surgery."""
        return {k: v for k, v in self.options.items() if k not in ("keep_tokens", "compound_tokens")}

    def literal(self):
        """The case as plain literals for the bert4keras snippet."""
        return {
            "key": self.key,
            "model": self.model,
            "options": self.options,
            "application": self.application,
            "config": self.full_config,
            "feeds": list(self.feeds),
            "cond": self.cond,
            "source": None if self.source is None else [self.source, self.source_options],
        }


#: items of compound_tokens: a plain list (equal weights) and an (ids, weights) pair
COMPOUND = [[101, 102], ([200, 300, 400], [0.5, 0.3, 0.2]), [5, 6, 7, 8]]
#: compound tokens over the KEPT vocabulary (indices into keep_tokens)
KEPT_COMPOUND = [[5, 6], ([7, 8, 9], [1.0, 2.0, 3.0])]
HEADS = {"with_pool": True, "with_nsp": True, "with_mlm": True}
COND_MLM = {"with_mlm": True}


def forward_cases():
    keep = _keep_tokens()
    bert = [
        Case("bert", "default", "bert"),
        Case("bert", "pool_nsp_mlm", "bert", dict(HEADS)),
        Case("bert", "nsp_implies_pool", "bert", {"with_nsp": True}),
        Case("bert", "pool_only", "bert", {"with_pool": True}),
        Case("bert", "pool_linear_mlm_linear", "bert", {"with_pool": "linear", "with_mlm": "linear"}),
        Case("bert", "hierarchical", "bert", {"hierarchical_position": True}, config={"max_position_embeddings": 16}),
        Case(
            "bert",
            "hierarchical_0.3_long",
            "bert",
            {"hierarchical_position": 0.3, "with_pool": True},
            config={"max_position_embeddings": 32},
            feeds=("long_token_ids", "long_segment_ids"),
        ),
        Case(
            "bert",
            "custom_position_ids",
            "bert",
            {"custom_position_ids": True, "with_pool": True},
            feeds=("token_ids", "segment_ids", "position_ids"),
        ),
        Case(
            "bert", "segment_vocab_size_0", "bert", {"segment_vocab_size": 0, "with_pool": True}, feeds=("token_ids",)
        ),
        Case("bert", "shared_segment_embeddings", "bert", {"shared_segment_embeddings": True}),
        Case("bert", "embedding_size_16_mlm", "bert", {"embedding_size": 16, "with_mlm": True}),
        Case("bert", "head_size_12_key_size_6", "bert", {"attention_head_size": 12, "attention_key_size": 6}),
        Case(
            "bert",
            "keep_tokens_mlm",
            "bert",
            {"keep_tokens": keep, "with_mlm": True},
            feeds=("keep_token_ids", "segment_ids"),
            source="bert",
        ),
        Case(
            "bert",
            "compound_tokens_mlm",
            "bert",
            {"compound_tokens": COMPOUND, "with_mlm": True},
            feeds=("compound_token_ids", "segment_ids"),
            source="bert",
        ),
        Case(
            "bert",
            "keep_and_compound_mlm",
            "bert",
            {"keep_tokens": keep, "compound_tokens": KEPT_COMPOUND, "with_mlm": True},
            feeds=("keep_compound_token_ids", "segment_ids"),
            source="bert",
        ),
        Case("bert", "residual_attention_scores", "bert", {"residual_attention_scores": True, "with_pool": True}),
        Case(
            "bert", "cond_ln_mlm", "bert", dict(COND_MLM), feeds=("token_ids", "segment_ids", "cond"), cond=COND_WIDTH
        ),
        Case(
            "bert",
            "cond_ln_hidden_tanh_pool",
            "bert",
            {"with_pool": True, "layer_norm_cond_hidden_size": 16, "layer_norm_cond_hidden_act": "tanh"},
            feeds=("token_ids", "segment_ids", "cond"),
            cond=COND_WIDTH,
        ),
        Case("bert", "prefix_heads", "bert", {"prefix": "Enc-", **HEADS}),
        Case("bert", "lm", "bert", application="lm"),
        Case("bert", "lm_mlm_linear", "bert", {"with_mlm": "linear"}, application="lm"),
        Case("bert", "unilm", "bert", application="unilm"),
        # residual_attention_scores with application='lm'/'unilm' is left out: bert4keras
        # 0.11.5 itself fails to build it (Transformer.apply adds the boolean LM/UniLM
        # mask to the float attention scores: "TypeError: Value passed to parameter 'x'
        # has DataType bool"), so there is no reference to compare with.
        Case("bert", "default", "roberta", {"with_mlm": True}),
    ]
    albert = [
        Case("albert", "default", "albert", config=SMALL_EMBEDDING),
        Case("albert", "pool_nsp_mlm", "albert", dict(HEADS), config=SMALL_EMBEDDING),
        Case("albert", "no_embedding_size", "albert", {"with_mlm": True}),
        Case(
            "albert", "residual_attention_scores", "albert", {"residual_attention_scores": True}, config=SMALL_EMBEDDING
        ),
        Case(
            "albert",
            "cond_ln_hidden_mlm",
            "albert",
            {"with_mlm": True, "layer_norm_cond_hidden_size": 4},
            config=SMALL_EMBEDDING,
            feeds=("token_ids", "segment_ids", "cond"),
            cond=COND_WIDTH,
        ),
        Case(
            "albert",
            "keep_tokens_mlm",
            "albert",
            {"keep_tokens": keep, "with_mlm": True},
            config=SMALL_EMBEDDING,
            feeds=("keep_token_ids", "segment_ids"),
            source="albert",
        ),
        Case("albert", "lm", "albert", config=SMALL_EMBEDDING, application="lm"),
        Case("albert", "unilm", "albert", config=SMALL_EMBEDDING, application="unilm"),
        # albert_unshared reads the (shared) ALBERT checkpoint into every layer
        Case("albert", "from_albert", "albert_unshared", config=SMALL_EMBEDDING, source="albert"),
        Case(
            "albert",
            "from_albert_pool_mlm",
            "albert_unshared",
            {"with_pool": True, "with_mlm": True},
            config=SMALL_EMBEDDING,
            source="albert",
        ),
    ]
    nezha = [
        # 80 tokens: relative distances beyond NEZHA's clip at 64
        Case("nezha", "default_long", "nezha", feeds=("long_token_ids", "long_segment_ids")),
        Case("nezha", "pool_nsp_mlm", "nezha", dict(HEADS)),
        Case("nezha", "segment_vocab_size_0", "nezha", {"segment_vocab_size": 0}, feeds=("token_ids",)),
        Case("nezha", "shared_segment_embeddings", "nezha", {"shared_segment_embeddings": True}),
        Case("nezha", "embedding_size_16", "nezha", {"embedding_size": 16, "with_pool": "linear"}),
        # key size = head size: bert4keras adds the relative table (key_size wide) to the
        # attention output (head_size wide), so NEZHA cannot have them differ
        Case("nezha", "head_size_12", "nezha", {"attention_head_size": 12}),
        Case("nezha", "residual_attention_scores", "nezha", {"residual_attention_scores": True}),
        Case(
            "nezha",
            "cond_ln",
            "nezha",
            {"with_pool": True},
            feeds=("token_ids", "segment_ids", "cond"),
            cond=COND_WIDTH,
        ),
        Case("nezha", "lm", "nezha", application="lm"),
        Case("nezha", "unilm", "nezha", application="unilm"),
    ]
    roformer = [
        Case("roformer", "default", "roformer"),
        Case("roformer", "pool_nsp_mlm", "roformer", dict(HEADS)),
        # (roformer with custom_position_ids needs segment ids: bert4keras reads the
        # position ids as its third input, self.inputs[2])
        Case(
            "roformer",
            "custom_position_ids",
            "roformer",
            {"custom_position_ids": True, "with_mlm": True},
            feeds=("token_ids", "segment_ids", "position_ids"),
        ),
        Case("roformer", "head_size_12_key_size_6", "roformer", {"attention_head_size": 12, "attention_key_size": 6}),
        Case("roformer", "segment_vocab_size_0", "roformer", {"segment_vocab_size": 0}, feeds=("token_ids",)),
        Case("roformer", "residual_attention_scores", "roformer", {"residual_attention_scores": True}),
        Case(
            "roformer",
            "cond_ln_hidden",
            "roformer",
            {"layer_norm_cond_hidden_size": 16},
            feeds=("token_ids", "segment_ids", "cond"),
            cond=COND_WIDTH,
        ),
        Case("roformer", "lm", "roformer", application="lm"),
        Case("roformer", "unilm", "roformer", application="unilm"),
    ]
    electra = [
        Case("electra", "default", "electra", config=SMALL_EMBEDDING),
        Case("electra", "discriminator", "electra", {"with_discriminator": True}, config=SMALL_EMBEDDING),
        Case("electra", "discriminator_linear", "electra", {"with_discriminator": "linear"}),
        Case("electra", "no_embedding_size", "electra"),
        Case(
            "electra",
            "compound_tokens",
            "electra",
            {"compound_tokens": COMPOUND, "with_discriminator": True},
            config=SMALL_EMBEDDING,
            feeds=("compound_token_ids", "segment_ids"),
            source="electra",
        ),
        Case(
            "electra",
            "hierarchical_custom_position_ids",
            "electra",
            {"hierarchical_position": True, "custom_position_ids": True},
            config={**SMALL_EMBEDDING, "max_position_embeddings": 16},
            feeds=("token_ids", "segment_ids", "position_ids"),
        ),
    ]
    return bert + albert + nezha + roformer + electra


def reverse_cases():
    return [
        Case("reverse", "default", "bert"),
        Case("reverse", "pool_nsp_mlm", "bert", dict(HEADS)),
        Case("reverse", "prefix_mlm", "bert", {"prefix": "Enc-", "with_mlm": True}),
        Case("reverse", "lm", "bert", application="lm"),
        Case("reverse", "default", "albert", config=SMALL_EMBEDDING),
        Case("reverse", "pool_nsp_mlm", "albert", dict(HEADS), config=SMALL_EMBEDDING),
        Case("reverse", "default", "albert_unshared", config=SMALL_EMBEDDING),
        Case("reverse", "pool_mlm", "albert_unshared", {"with_pool": True, "with_mlm": True}, config=SMALL_EMBEDDING),
        Case("reverse", "default", "nezha"),
        Case("reverse", "pool_nsp_mlm", "nezha", dict(HEADS)),
        Case("reverse", "default", "roformer"),
        Case("reverse", "pool_nsp_mlm", "roformer", dict(HEADS)),
        Case("reverse", "default", "electra", config=SMALL_EMBEDDING),
        Case("reverse", "discriminator", "electra", {"with_discriminator": True}, config=SMALL_EMBEDDING),
    ]


# ----------------------------------------------------------------------------- inputs


def _real_texts():
    """A few Chinese documents of the shared corpus, or None when it is absent."""
    corpus = SHARED_DATA / "corpus" / "zh_corpus.txt"
    vocab = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"
    if not (corpus.is_file() and vocab.is_file()):
        return None, None
    texts = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(line.strip())
            if len(texts) >= 16:
                break
    return texts, vocab


def _rows(length, rng, texts, tokenizer):
    """[(token_ids, segment_ids)] of the four rows (unpadded), then where each goes."""
    if tokenizer is None:

        def encode(n_first, n_second=0):
            ids = [101] + rng.integers(104, VOCAB, n_first).tolist() + [102]
            segments = [0] * len(ids)
            if n_second:
                ids += rng.integers(104, VOCAB, n_second).tolist() + [102]
                segments += [1] * (n_second + 1)
            return ids, segments

        return [encode(6), encode(length // 3, length // 3), encode(length - 2), encode(length // 2 - 4, length // 3)]
    short = texts[:4]
    longer = ["，".join(texts[4 + 6 * i : 10 + 6 * i]) for i in range(2)]  # 6 titles: > 80 tokens
    return [
        tokenizer.encode(short[0], maxlen=8),
        tokenizer.encode(short[1], short[2], maxlen=(2 * length) // 3),
        tokenizer.encode(longer[0], maxlen=length),
        tokenizer.encode(short[3], longer[1], maxlen=length - 4),
    ]


_INPUTS = {}


def batch_inputs():
    """Every array a case may feed, [4, 40] (long_*: [4, 80])."""
    if _INPUTS:
        return _INPUTS
    texts, vocab = _real_texts()
    tokenizer = None
    if texts is not None:
        from gau_keras.tokenizers import Tokenizer

        tokenizer = Tokenizer(str(vocab), do_lower_case=True)
    rng = np.random.default_rng(SEED)
    for prefix, length in (("", LENGTH), ("long_", LONG_LENGTH)):
        token_ids = np.zeros((4, length), np.int32)
        segment_ids = np.zeros((4, length), np.int32)
        position_ids = np.zeros((4, length), np.int32)
        for row, (ids, segments) in enumerate(_rows(length, rng, texts, tokenizer)):
            ids, segments = ids[:length], segments[:length]
            where = slice(length - len(ids), length) if row == 1 else slice(0, len(ids))  # row 1 left-padded
            token_ids[row, where], segment_ids[row, where] = ids, segments
        if length == LENGTH:
            # custom position ids: plain, counted from the first real token, reversed,
            # restarting at the second segment (all < max_position_embeddings)
            arange = np.arange(length)
            first = int(np.argmax(token_ids[1] > 0))
            position_ids[0] = arange
            position_ids[1] = np.maximum(arange - first, 0)
            position_ids[2] = arange[::-1]
            second = int(np.argmax(segment_ids[3] > 0)) or length
            position_ids[3] = np.where(arange < second, arange, arange - second)
            _INPUTS["position_ids"] = position_ids
        _INPUTS[prefix + "token_ids"], _INPUTS[prefix + "segment_ids"] = token_ids, segment_ids
    _INPUTS["cond"] = rng.normal(size=(4, COND_WIDTH)).astype(np.float32)
    _INPUTS["real_text"] = np.array(tokenizer is not None)
    # the vocabulary-surgery batches
    keep = _keep_tokens_from(_INPUTS["token_ids"])
    new_id = {old: new for new, old in enumerate(keep)}
    keep_ids = np.vectorize(lambda i: new_id[int(i)])(_INPUTS["token_ids"]).astype(np.int32)
    _INPUTS["keep_token_ids"] = keep_ids
    compound_ids = _INPUTS["token_ids"].copy()
    compound_ids[2, 5:8] = [VOCAB, VOCAB + 1, VOCAB + 2]
    compound_ids[3, 2] = VOCAB + 1
    _INPUTS["compound_token_ids"] = compound_ids
    keep_compound = keep_ids.copy()
    keep_compound[2, 5:7] = [len(keep), len(keep) + 1]
    keep_compound[0, 1] = len(keep) + 1
    _INPUTS["keep_compound_token_ids"] = keep_compound
    return _INPUTS


def _keep_tokens_from(token_ids):
    used = sorted(set(np.unique(token_ids).tolist()) - set(SPECIAL_IDS))
    rng = np.random.default_rng(SEED + 1)
    rng.shuffle(used)
    unused = sorted(set(range(104, VOCAB)) - set(used))
    return list(SPECIAL_IDS) + [int(i) for i in used] + [int(i) for i in rng.choice(unused, 20, replace=False)]


def _keep_tokens():
    """keep_tokens for the batch: the special ids first, then every other id of the batch
    (shuffled, so that a sorted copy would not pass), then 20 ids the batch does not use."""
    inputs = batch_inputs()
    return _keep_tokens_from(inputs["token_ids"])


def model_inputs(case):
    arrays = batch_inputs()
    return [arrays[name].astype(np.float32 if name == "cond" else np.int32) for name in case.feeds]


# ----------------------------------------------------------------------------- bert4keras side

#: shared by both snippets: build a case's model in a fresh graph, run it, record it
SNIPPET_PRELUDE = r'''
import json
import os
import tempfile

from bert4keras.layers import LayerNormalization
from bert4keras.models import build_transformer_model

CASES = %(cases)r
SEED = %(seed)d
NOISE = %(noise)r
work = tempfile.mkdtemp(prefix="b4k_encoders_")


def build(case, model, options, checkpoint, seed):
    K.clear_session()
    np.random.seed(seed)
    tf.compat.v1.set_random_seed(seed)
    config_path = os.path.join(work, "bert_config.json")
    with open(config_path, "w") as f:
        json.dump(case["config"], f)
    options = dict(options)
    if case["cond"]:
        cond = keras.layers.Input(shape=(case["cond"],), name="Input-Condition")
        options.update(layer_norm_cond=cond, additional_input_layers=cond)
    transformer = build_transformer_model(config_path, checkpoint, model=model, application=case["application"],
                                          return_keras_model=False, **options)
    session()   # the Keras session on this graph (save_weights_as_checkpoint reads through it)
    return transformer


def perturb(transformer, rng):
    """Seeded noise on every trainable weight; the only other weight is NEZHA's fixed table."""
    others = [w.name for w in transformer.model.non_trainable_weights if "Relative-Position" not in w.name]
    assert not others, others
    weights = transformer.model.trainable_weights
    values = K.batch_get_value(weights)
    K.batch_set_value([(w, v + rng.normal(0, NOISE, v.shape).astype(v.dtype)) for w, v in zip(weights, values)])


def save(transformer, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    transformer.save_weights_as_checkpoint(path)
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def record(key, case, transformer):
    """Outputs, hidden states, MLM logits, layer names; conditional-norm weights (not in the checkpoint)."""
    model = transformer.model
    names = ["out%%d" %% i for i in range(len(model.outputs))]
    fetches = list(model.outputs)
    if case["model"] == "albert":   # one shared layer: its last call is the last layer
        norm = transformer.layers[transformer.prefixed("Transformer-FeedForward-Norm")]
    else:
        norm = transformer.layers[transformer.prefixed(
            "Transformer-%%d-FeedForward-Norm" %% (transformer.num_hidden_layers - 1))]
    names.append("hidden")
    fetches.append(norm.get_output_at(-1))
    head = transformer.layers.get(transformer.prefixed("MLM-Activation"))
    if head is not None:
        names.append("mlm_logits")
        fetches.append(head.input)
    values = K.function(model.inputs, fetches)([inputs[name].astype("float32") for name in case["feeds"]])
    for name, value in zip(names, values):
        if value.ndim == 3 and value.shape[-1] >= %(vocab_wide)d:
            value = value[..., ::%(vocab_stride)d]
        outputs["%%s|%%s" %% (key, name)] = value
    outputs[key + "|layers"] = np.array([layer.name for layer in model.layers])
    outputs[key + "|output_layers"] = np.array(model.output_names)
    for layer in transformer.layers.values():
        if isinstance(layer, LayerNormalization) and layer.conditional:
            for attr in ("hidden_dense", "beta_dense", "gamma_dense"):
                if hasattr(layer, attr):
                    outputs["%%s|cond|%%s|%%s" %% (key, layer.name, attr)] = K.get_value(getattr(layer, attr).kernel)


def encode(name):
    return name.replace("/", "~")
'''

FORWARD_LOOP = r"""
for index, case in enumerate(CASES):
    key, seed = case["key"], SEED + index
    rng = np.random.RandomState(seed)
    path = os.path.join(work, key, "source", "bert_model.ckpt")
    if case["source"] is None:
        transformer = build(case, case["model"], case["options"], None, seed)
        perturb(transformer, rng)
        variables = save(transformer, path)
    else:
        source_model, source_options = case["source"]
        source = build(case, source_model, source_options, None, seed)
        perturb(source, rng)
        variables = save(source, path)
        transformer = build(case, case["model"], case["options"], path, seed)
    for name, value in variables.items():
        outputs["%s|var|%s" % (key, encode(name))] = value
    saved = save(transformer, os.path.join(work, key, "target", "bert_model.ckpt"))
    outputs[key + "|saved"] = np.array(["%s %s" % (n, json.dumps(list(v.shape))) for n, v in sorted(saved.items())])
    if case["source"] is not None:
        for name, value in saved.items():
            outputs["%s|saved_value|%s" % (key, encode(name))] = value
    record(key, case, transformer)
"""

REVERSE_LOOP = r'''
def write_checkpoint(path, values):
    """A TF1 checkpoint of {name: array}, written by tf's own Saver."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.Variable(value, name="v%d" % i)
                     for i, (name, value) in enumerate(sorted(values.items()))}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver(variables).save(sess, path)


for index, case in enumerate(CASES):
    key = case["key"]
    head = key + "|var|"
    values = {name[len(head):].replace("~", "/"): value for name, value in inputs.items() if name.startswith(head)}
    path = os.path.join(work, key, "ours", "bert_model.ckpt")
    write_checkpoint(path, values)
    transformer = build(case, case["model"], case["options"], path, SEED + index)
    record(key, case, transformer)
'''

ELECTRA_REFUSALS = r"""
ELECTRA_CONFIG = next(case["config"] for case in CASES if case["model"] == "electra")
refusals = []
for label, options, application in [("with_pool", {"with_pool": True}, "encoder"),
                                     ("with_mlm", {"with_mlm": True}, "encoder"),
                                     ("lm", {}, "lm"), ("unilm", {}, "unilm")]:
    K.clear_session()
    try:
        build_transformer_model(None, None, model="electra", application=application,
                                **dict(ELECTRA_CONFIG, **options))
        refusals.append("%s none" % label)
    except Exception as e:
        refusals.append("%s %s" % (label, type(e).__name__))
outputs["refusals"] = np.array(refusals)
"""


def _snippet(cases, loop, tail=""):
    return (
        (
            SNIPPET_PRELUDE
            % {
                "cases": [c.literal() for c in cases],
                "seed": SEED,
                "noise": NOISE,
                "vocab_wide": VOCAB_WIDE,
                "vocab_stride": VOCAB_STRIDE,
            }
        )
        + loop
        + tail
    )


def _split(results):
    """{case key: {item: array}} from the snippet's flat 'key|item' outputs."""
    split = {}
    for name, value in results.items():
        key, _, item = name.partition("|")
        if not item:  # not a case's: under '_'
            key, item = "_", key
        split.setdefault(key, {})[item] = value
    return split


def _decode(name):
    return name.replace("~", "/")


_REFERENCE = {}


def reference():
    """bert4keras's results for every forward case, and electra's refusals under '_' (one
    subprocess for all: each start of TensorFlow and bert4keras costs ~10 s; cached)."""
    if not _REFERENCE:
        arrays = {k: v for k, v in batch_inputs().items() if k != "real_text"}
        _REFERENCE.update(
            _split(
                run_bert4keras_code(
                    _snippet(forward_cases(), FORWARD_LOOP, ELECTRA_REFUSALS),
                    arrays,
                    graph=True,
                    seed=SEED,
                    timeout=1800,
                )
            )
        )
    return _REFERENCE


# ----------------------------------------------------------------------------- our side


def our_build(case, checkpoint=None, config=None):
    import keras

    options = dict(case.options)
    if case.cond:
        cond = keras.Input(shape=(case.cond,), name="Input-Condition")
        options.update(layer_norm_cond=cond, additional_input_layers=cond)
    return build_transformer_model(
        case.full_config if config is None else config,
        checkpoint,
        model=case.model,
        application=case.application,
        return_keras_model=False,
        **options,
    )


def our_outputs(transformer, case):
    """{'out<i>': every model output, 'hidden': encoder_output, 'mlm_logits': input of MLM-Activation}."""
    import keras

    net = transformer.model
    names = [f"out{i}" for i in range(len(net.outputs))] + ["hidden"]
    fetches = list(net.outputs) + [transformer.encoder_output]
    head = _layer_or_none(net, case.prefix + "MLM-Activation")
    if head is not None:
        names.append("mlm_logits")
        fetches.append(head.input)
    values = keras.Model(net.inputs, fetches)(model_inputs(case), training=False)
    return {name: np.asarray(keras.ops.convert_to_numpy(v)) for name, v in zip(names, values)}


def _layer_or_none(net, name):
    try:
        return net.get_layer(name)
    except ValueError:
        return None


def our_checkpoint(transformer, directory):
    """{name: array} of what our save_weights_as_checkpoint writes."""
    import tensorflow as tf

    path = transformer.save_weights_as_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    reader = tf.train.load_checkpoint(path or os.path.join(directory, "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def set_conditional_weights(transformer, ref):
    """The conditional layer norms' dense kernels (bert4keras keeps them out of the checkpoint)."""
    net = transformer.model
    count = 0
    for item, value in ref.items():
        if item.startswith("cond|"):
            _, layer_name, attr = item.split("|")
            getattr(net.get_layer(layer_name), attr).kernel.assign(value)
            count += 1
    return count


# ----------------------------------------------------------------------------- comparison


def _activation_atol(activation):
    """A head's output: probabilities (softmax/sigmoid/tanh) 1e-5, a 'linear' one is logits."""
    return LOGITS_ATOL if activation == "linear" else PROBS_ATOL


def output_atol(case, layer_name):
    """Tolerance of a model output, from the bert4keras layer that produces it."""
    name = layer_name[len(case.prefix) :] if layer_name.startswith(case.prefix) else layer_name
    options = case.options
    if name == "MLM-Activation":
        with_mlm = options.get("with_mlm") or True
        return _activation_atol("softmax" if with_mlm is True else with_mlm)
    if name == "Pooler-Dense":
        return _activation_atol("tanh" if options.get("with_pool", True) is True else options["with_pool"])
    if name == "Discriminator-Prediction":
        return _activation_atol("sigmoid" if options["with_discriminator"] is True else options["with_discriminator"])
    return HIDDEN_ATOL  # hidden states, NSP probabilities


PARITY = []  # rows of the table printed at the end of the module


def compare(case, ours, ref, direction):
    """Max |diff| per output; a list of problems (empty when within tolerance)."""
    problems, diffs = [], {}
    output_layers = [str(n) for n in ref["output_layers"]]
    items = [f"out{i}" for i in range(len(output_layers))] + ["hidden"]
    items += ["mlm_logits"] if "mlm_logits" in ref else []
    n_ours = len([k for k in ours if k.startswith("out")])
    if n_ours != len(output_layers):
        problems.append(f"{n_ours} model outputs, bert4keras has {len(output_layers)} ({output_layers})")
    for item in items:
        if item not in ours:
            problems.append(f"no {item!r} on our side")
            continue
        expected, mine = ref[item], ours[item]
        if mine.ndim == 3 and mine.shape[-1] >= VOCAB_WIDE:
            mine = mine[..., ::VOCAB_STRIDE]
        if not np.isfinite(expected).all():
            problems.append(f"{item}: bert4keras produced non-finite values")
        if mine.shape != expected.shape:
            problems.append(f"{item}: shape {mine.shape}, bert4keras {expected.shape}")
            continue
        atol = (
            LOGITS_ATOL
            if item == "mlm_logits"
            else HIDDEN_ATOL
            if item == "hidden"
            else output_atol(case, output_layers[int(item[3:])])
        )
        diff = float(np.abs(mine.astype(np.float64) - expected).max())
        label = item if not item.startswith("out") else f"{item}:{output_layers[int(item[3:])]}"
        diffs[label] = diff
        if not diff <= atol:
            problems.append(f"{label}: max|diff| {diff:.3e} > {atol:g}")
    print(f"[{direction}] {case.key}: " + ", ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    PARITY.append((case.model, case.name, direction, diffs, not problems))
    return problems


# ----------------------------------------------------------------------------- forward tests

_OURS = {}


def loaded_from_bert4keras(case, tmp_dir):
    """(our transformer loaded with bert4keras's weights, our outputs, bert4keras's results)."""
    if case.key in _OURS:
        return _OURS[case.key]
    ref = reference()[case.key]
    variables = {_decode(k[4:]): v for k, v in ref.items() if k.startswith("var|")}
    index = [c.key for c in forward_cases()].index(case.key)
    if index % 2:  # through a file we write (and a config file), or the dict itself
        from gau_keras.checkpoints import save_checkpoint
        from tests.model_utils import write_config

        os.makedirs(tmp_dir, exist_ok=True)
        checkpoint = save_checkpoint(os.path.join(tmp_dir, "b4k", "bert_model.ckpt"), variables)
        config = write_config(tmp_dir, case.full_config)
    else:
        checkpoint, config = variables, None
    transformer = our_build(case, checkpoint, config)
    set_conditional_weights(transformer, ref)
    _OURS[case.key] = transformer, our_outputs(transformer, case), ref
    return _OURS[case.key]


FORWARD = forward_cases()


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_loads_bert4keras_weights_and_matches_outputs(case, tmp_path):
    _, ours, ref = loaded_from_bert4keras(case, str(tmp_path))
    problems = compare(case, ours, ref, "bert4keras->ours")
    assert not problems, f"{case.key}: " + "; ".join(problems)


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_saves_bert4keras_checkpoint_names_shapes_values(case, tmp_path):
    """Our save_weights_as_checkpoint after loading bert4keras's weights: bert4keras's
    names and shapes (those its own save writes for this model), and the values it loaded."""
    transformer, _, ref = loaded_from_bert4keras(case, str(tmp_path / "load"))
    ours = our_checkpoint(transformer, str(tmp_path / "ours"))
    expected = dict(line.split(" ", 1) for line in ref["saved"].tolist())
    if case.model == "albert_unshared":
        # bert4keras maps every layer to the same ALBERT variable names and writes layer
        # i > 0 as '<name>_<i>' (TF uniquifies the duplicate names in its graph); its own
        # loader never reads those copies. We write each name once (and refuse to save
        # layers that differ): the copies must hold the same values as the name itself.
        copies = {
            name for name in expected if name.rpartition("_")[0] in expected and name.rpartition("_")[2].isdigit()
        }
        assert copies, "bert4keras's albert_unshared checkpoint had no per-layer copies"
        for name in copies:
            np.testing.assert_array_equal(
                ref["saved_value|" + name.replace("/", "~")],
                ref["saved_value|" + name.rpartition("_")[0].replace("/", "~")],
            )
            del expected[name]
    got = {name: json.dumps(list(value.shape)) for name, value in ours.items()}
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not extra, f"{case.key}: variables missing {missing}, unexpected {extra}"
    wrong = {n: (got[n], expected[n]) for n in expected if got[n] != expected[n]}
    assert not wrong, f"{case.key}: shapes (ours, bert4keras) differ: {wrong}"
    prefix = "saved_value|" if case.source is not None else "var|"
    for item, value in ref.items():
        name = _decode(item[len(prefix) :])
        if item.startswith(prefix) and name in expected:
            np.testing.assert_allclose(ours[name], value, rtol=0, atol=1e-7, err_msg=f"{case.key}: {name}")


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_layer_names_and_output_order(case, tmp_path):
    transformer, _, ref = loaded_from_bert4keras(case, str(tmp_path))
    net = transformer.model
    ours, theirs = {layer.name for layer in net.layers}, {str(n) for n in ref["layers"]}
    assert ours == theirs, (
        f"{case.key}: layers only bert4keras has {sorted(theirs - ours)}, only we have {sorted(ours - theirs)}"
    )
    assert list(net.output_names) == [str(n) for n in ref["output_layers"]]


# ----------------------------------------------------------------------------- reverse tests

REVERSE = reverse_cases()
_REVERSE = {}


def _deterministic_weights(transformer, seed):
    """Every trainable weight set to a seeded value around its initial level (ones for
    gammas, zeros otherwise): the same on every backend, so the reference stays cached."""
    import keras

    rng = np.random.default_rng(seed)
    for weight in transformer.model.trainable_weights:
        value = np.asarray(keras.ops.convert_to_numpy(weight))
        base = np.round(value.mean())
        weight.assign((base + rng.normal(scale=NOISE, size=value.shape)).astype(value.dtype))


def _tie_unshared_layers(transformer):
    """albert_unshared: bert4keras loads ALBERT's single set of layer weights into every
    layer, so the layers must be equal for the round trip to mean anything."""
    net = transformer.model
    for i in range(1, transformer.num_hidden_layers):
        for block in ("MultiHeadSelfAttention", "MultiHeadSelfAttention-Norm", "FeedForward", "FeedForward-Norm"):
            net.get_layer(f"Transformer-{i}-{block}").set_weights(net.get_layer(f"Transformer-0-{block}").get_weights())


def reverse_results(tmp_dir):
    """{case key: (ours, bert4keras's results or the exception our side raised)}: all
    reverse cases in one bert4keras subprocess."""
    if _REVERSE:
        return _REVERSE
    arrays = {k: v for k, v in batch_inputs().items() if k != "real_text"}
    built, ours = [], {}
    for index, case in enumerate(REVERSE):
        try:
            transformer = our_build(case)
            _deterministic_weights(transformer, SEED + 1000 + index)
            if case.model == "albert_unshared":
                _tie_unshared_layers(transformer)
            variables = our_checkpoint(transformer, os.path.join(tmp_dir, case.key))
        except Exception as e:  # reported by this case's test, the others still run
            _REVERSE[case.key] = (None, e)
            continue
        ours[case.key] = our_outputs(transformer, case)
        arrays.update({f"{case.key}|var|{name.replace('/', '~')}": v for name, v in variables.items()})
        built.append(case)
    if built:
        refs = _split(run_bert4keras_code(_snippet(built, REVERSE_LOOP), arrays, graph=True, seed=SEED, timeout=1200))
        for case in built:
            _REVERSE[case.key] = (ours[case.key], refs[case.key])
    return _REVERSE


@pytest.mark.parametrize("case", REVERSE, ids=[c.key for c in REVERSE])
def test_bert4keras_loads_our_checkpoint_and_matches_outputs(case, tmp_path_factory):
    ours, ref = reverse_results(str(tmp_path_factory.mktemp("reverse")))[case.key]
    if isinstance(ref, Exception):
        raise ref
    problems = compare(case, ours, ref, "ours->bert4keras")
    assert not problems, f"{case.key} (our checkpoint in bert4keras): " + "; ".join(problems)


# ----------------------------------------------------------------------------- bad input


def test_electra_refuses_pool_mlm_and_lm_as_bert4keras_does():
    refusals = dict(line.split(" ") for line in reference()["_"]["refusals"].tolist())
    config = dict(BASE_CONFIG)
    # bert4keras: TypeError from delete_arguments for with_pool/with_mlm, ValueError for lm/unilm
    assert refusals == {"with_pool": "TypeError", "with_mlm": "TypeError", "lm": "ValueError", "unilm": "ValueError"}, (
        refusals
    )
    for option in ("with_pool", "with_mlm"):
        with pytest.raises((TypeError, ValueError)):
            build_transformer_model(config, model="electra", **{option: True})
    for application in ("lm", "unilm"):
        with pytest.raises(ValueError):
            build_transformer_model(config, model="electra", application=application)


def test_unknown_model_name_lists_known_names():
    with pytest.raises(ValueError) as info:
        build_transformer_model(dict(BASE_CONFIG), model="bertt")
    message = str(info.value)
    for name in ("bert", "albert", "albert_unshared", "nezha", "roformer", "electra"):
        assert repr(name) in message or name in message, (name, message)


# ----------------------------------------------------------------------------- parity table


def parity_table_markdown(rows=None):
    """The max |diff| of every case run so far, as a markdown table."""
    rows = PARITY if rows is None else rows
    lines = ["| model | case | direction | hidden | model outputs | MLM logits | ok |", "|---|---|---|---|---|---|---|"]
    for model, name, direction, diffs, ok in rows:
        hidden = diffs.get("hidden")
        logits = diffs.get("mlm_logits")
        outs = ", ".join(f"{k.split(':', 1)[1]} {v:.1e}" for k, v in diffs.items() if k.startswith("out"))
        lines.append(
            f"| {model} | {name} | {direction} | {'' if hidden is None else f'{hidden:.1e}'} | {outs} | "
            f"{'' if logits is None else f'{logits:.1e}'} | {'yes' if ok else 'NO'} |"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _print_parity_table():
    yield
    if PARITY:
        real = bool(batch_inputs()["real_text"])
        print(
            f"\n\nbert4keras 0.11.5 parity of the encoders ({'real tokens' if real else 'random ids'}, "
            f"max |diff|; tolerances: hidden/probabilities {HIDDEN_ATOL:g}, logits {LOGITS_ATOL:g})\n"
        )
        print(parity_table_markdown())
