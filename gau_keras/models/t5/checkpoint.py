"""The TF1 checkpoint names of Google's released T5 (t5.1.0), T5.1.1 and mT5.1.1 checkpoints, as
``{layer_name: {weight_attr: checkpoint_name}}`` tables (see ``Transformer.variable_mapping``).
"""

SHARED_EMBEDDING = "shared/embedding"
LOGITS = "decoder/logits/kernel"


def _attention(scope):
    return {f"{part}_dense.kernel": f"{scope}{part}" for part in "qkvo"}


def _feed_forward(scope, gated):
    if gated:  # T5.1.1: wi_0 (through the activation) times wi_1
        return {
            "i0_dense.kernel": scope + "wi_0/kernel",
            "i1_dense.kernel": scope + "wi_1/kernel",
            "o_dense.kernel": scope + "wo/kernel",
        }
    return {"i0_dense.kernel": scope + "wi/kernel", "o_dense.kernel": scope + "wo/kernel"}


def relative_bias_name(stack):
    """The relative position table of ``stack`` ('encoder' or 'decoder'), stored [heads, buckets]."""
    return f"{stack}/block_000/layer_000/SelfAttention/relative_attention_bias"


def t5_names(num_hidden_layers, version="t5.1.0"):
    """The mapping of a T5 of ``num_hidden_layers`` blocks per stack: the shared token table,
    the two relative position tables, each block's attentions, feed-forward and norm scales, the
    final norms and (t5.1.1, mt5.1.1) the untied output kernel."""
    gated = version in ("t5.1.1", "mt5.1.1")
    norm = "rms_norm" if version == "mt5.1.1" else "layer_norm"
    final_norm = "rms_norm" if version == "mt5.1.1" else "final_layer_norm"
    mapping = {
        "Embedding-Token": {"embeddings": SHARED_EMBEDDING},
        "Encoder-Embedding-Relative-Position": {"embeddings": relative_bias_name("encoder")},
        "Decoder-Embedding-Relative-Position": {"embeddings": relative_bias_name("decoder")},
        "Encoder-Output-Norm": {"gamma": f"encoder/{final_norm}/scale"},
        "Decoder-Output-Norm": {"gamma": f"decoder/{final_norm}/scale"},
    }
    for i in range(num_hidden_layers):
        block = f"encoder/block_{i:03d}/"
        name = f"Encoder-Transformer-{i}-"
        mapping[name + "MultiHeadSelfAttention"] = _attention(block + "layer_000/SelfAttention/")
        mapping[name + "MultiHeadSelfAttention-Norm"] = {"gamma": f"{block}layer_000/{norm}/scale"}
        mapping[name + "FeedForward"] = _feed_forward(block + "layer_001/DenseReluDense/", gated)
        mapping[name + "FeedForward-Norm"] = {"gamma": f"{block}layer_001/{norm}/scale"}
        block = f"decoder/block_{i:03d}/"
        name = f"Decoder-Transformer-{i}-"
        mapping[name + "MultiHeadSelfAttention"] = _attention(block + "layer_000/SelfAttention/")
        mapping[name + "MultiHeadSelfAttention-Norm"] = {"gamma": f"{block}layer_000/{norm}/scale"}
        mapping[name + "MultiHeadCrossAttention"] = _attention(block + "layer_001/EncDecAttention/")
        mapping[name + "MultiHeadCrossAttention-Norm"] = {"gamma": f"{block}layer_001/{norm}/scale"}
        mapping[name + "FeedForward"] = _feed_forward(block + "layer_002/DenseReluDense/", gated)
        mapping[name + "FeedForward-Norm"] = {"gamma": f"{block}layer_002/{norm}/scale"}
    if gated:
        mapping["Decoder-Output-LM"] = {"kernel": LOGITS}
    return mapping


def checkpoint_version(names):
    """The T5 version whose layout the checkpoint ``names`` have ('t5.1.0', 't5.1.1' or 'mt5.1.1'),
    or None for no T5 checkpoint."""
    names = set(names)
    if any("/rms_norm/" in n for n in names if n.startswith(("encoder/", "decoder/"))):
        return "mt5.1.1"
    if any(n.endswith("/DenseReluDense/wi_0/kernel") for n in names):
        return "t5.1.1"
    if any(n.endswith("/DenseReluDense/wi/kernel") for n in names):
        return "t5.1.0"
    return None
