"""The TF1 checkpoint names of BERT and its family (Google BERT, chinese-roberta-wwm-ext,
albert_zh / Google ALBERT, Huawei NEZHA, ZhuiyiTechnology RoFormer, Google ELECTRA, and the
bias-free, norm-free variables of ZhuiyiTechnology RoFormerV2 and GAU-alpha), as
``{layer_name: {weight_attr: checkpoint_name}}`` tables (see ``Transformer.variable_mapping``).
"""

#: ALBERT's one shared layer group and the names of its parts
ALBERT_GROUP = "bert/encoder/transformer/group_0/inner_group_0/"
BERT_BLOCK = {
    "attention": "attention/",
    "attention_norm": "attention/output/LayerNorm/",
    "intermediate": "intermediate/dense/",
    "output": "output/dense/",
    "output_norm": "output/LayerNorm/",
}
ALBERT_BLOCK = {
    "attention": "attention_1/",
    "attention_norm": "LayerNorm/",
    "intermediate": "ffn_1/intermediate/dense/",
    "output": "ffn_1/intermediate/output/dense/",
    "output_norm": "LayerNorm_1/",
}


def dense(scope, bias=True):
    """A Dense layer's kernel and (``bias=True``) bias under ``scope``."""
    return {"kernel": scope + "kernel", **({"bias": scope + "bias"} if bias else {})}


def norm(scope):
    """A LayerNorm's gamma and beta under ``scope``."""
    return {"gamma": scope + "gamma", "beta": scope + "beta"}


def embedding_names(prefix="bert/"):
    """Token, segment and position tables, their LayerNorm and the ALBERT/ELECTRA-style
    projection to the hidden size."""
    return {
        "Embedding-Token": {"embeddings": prefix + "embeddings/word_embeddings"},
        "Embedding-Segment": {"embeddings": prefix + "embeddings/token_type_embeddings"},
        "Embedding-Position": {"embeddings": prefix + "embeddings/position_embeddings"},
        "Embedding-Norm": norm(prefix + "embeddings/LayerNorm/"),
        "Embedding-Mapping": dense(prefix + "encoder/embedding_hidden_mapping_in/"),
    }


def head_names(prefix="bert/"):
    """The pooler, the next-sentence head (its kernel is stored transposed, [2, H]) and the
    MLM head (transform, its LayerNorm and the output bias; the output matrix is the tied
    token embedding)."""
    return {
        "Pooler-Dense": dense(prefix + "pooler/dense/"),
        "NSP-Proba": {"kernel": "cls/seq_relationship/output_weights", "bias": "cls/seq_relationship/output_bias"},
        "MLM-Dense": dense("cls/predictions/transform/dense/"),
        "MLM-Norm": norm("cls/predictions/transform/LayerNorm/"),
        "MLM-Bias": {"beta": "cls/predictions/output_bias"},
    }


def block_names(block, scope, parts=None, bias=True, norms=True):
    """One Transformer block: ``block``-MultiHeadSelfAttention(-Norm) and
    ``block``-FeedForward(-Norm), their variables under ``scope`` named by ``parts``
    (BERT_BLOCK or ALBERT_BLOCK); ``bias=False``: kernels only, ``norms=False``: no
    norm variables (RoFormerV2's parameter-free RMS norms)."""
    parts = parts or BERT_BLOCK
    attention = scope + parts["attention"]
    names = {f"{block}-MultiHeadSelfAttention": {}}
    for part, name in (
        ("q_dense", "self/query/"),
        ("k_dense", "self/key/"),
        ("v_dense", "self/value/"),
        ("o_dense", "output/dense/"),
    ):
        names[f"{block}-MultiHeadSelfAttention"].update(
            {f"{part}.{attr}": ckpt for attr, ckpt in dense(attention + name, bias).items()}
        )
    if norms:
        names[f"{block}-MultiHeadSelfAttention-Norm"] = norm(scope + parts["attention_norm"])
    names[f"{block}-FeedForward"] = {
        **{f"i0_dense.{attr}": ckpt for attr, ckpt in dense(scope + parts["intermediate"], bias).items()},
        **{f"o_dense.{attr}": ckpt for attr, ckpt in dense(scope + parts["output"], bias).items()},
    }
    if norms:
        names[f"{block}-FeedForward-Norm"] = norm(scope + parts["output_norm"])
    return names


def bert_names(num_layers, prefix="bert/"):
    """The whole table of a BERT of ``num_layers`` layers."""
    mapping = {**embedding_names(prefix), **head_names(prefix)}
    for i in range(num_layers):
        mapping.update(block_names(f"Transformer-{i}", f"{prefix}encoder/layer_{i}/"))
    return mapping


def roformer_v2_names(num_layers, prefix="bert/"):
    """The table of a RoFormerV2 of ``num_layers`` layers: BERT's names without biases and norms,
    the pooler with them, the MLM head's transform dense as ``Output-Mapping``."""
    embeddings, heads = embedding_names(prefix), head_names(prefix)
    mapping = {
        "Embedding-Token": embeddings["Embedding-Token"],
        "Embedding-Segment": embeddings["Embedding-Segment"],
        "Embedding-Mapping": dense(prefix + "encoder/embedding_hidden_mapping_in/", bias=False),
        "Output-Mapping": {"kernel": heads["MLM-Dense"]["kernel"]},
        "Pooler-Dense": heads["Pooler-Dense"],
    }
    for i in range(num_layers):
        mapping.update(block_names(f"Transformer-{i}", f"{prefix}encoder/layer_{i}/", bias=False, norms=False))
    return mapping
