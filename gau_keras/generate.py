"""``gau-keras generate``: text from a causal or UniLM model directory, streamed as it comes.

    gau-keras generate --model-dir DIR --model gpt2 "今天天气" --max-new-tokens 32
    gau-keras generate --model-dir DIR --model roformer_v2 --application unilm "问题" --strategy beam
    gau-keras generate --model-dir DIR --model mt5.1.1 "文章" --strategy beam   # T5: spiece.model

Greedy decoding and sampling (``--top-k``, ``--top-p``, ``--temperature``) print the text as
the compiled loop produces it, a few tokens at a time; beam search prints the best sequence
at the end. The model runs with a key/value cache (``gau_keras.generation.CachedLM``).
"""

import sys

from gau_keras import flags

STRATEGIES = ("greedy", "sample", "beam")
#: steps of the compiled loop between two writes to stdout
STREAM_CHUNK = 4


def add_arguments(parser):
    parser.add_argument("prompts", nargs="+", help="texts to continue (each on its own)")
    parser.add_argument(
        "--model-dir",
        default=None,
        help="directory with bert_config.json, bert_model.ckpt.* and vocab.txt of a causal or UniLM model",
    )
    flags.add_model_option(parser, help="the model of --model-dir", default="gpt2")
    parser.add_argument(
        "--application",
        choices=("lm", "unilm"),
        default=None,
        help="for an encoder (bert, roformer_v2, gau_alpha, ...) fine-tuned as a language model: its "
        "attention mask ('lm': causal; 'unilm': the prompt sees itself, the output its past)",
    )
    parser.add_argument("--strategy", choices=STRATEGIES, default="greedy", help="(default: greedy)")
    parser.add_argument("--num-beams", type=flags.positive_int, default=4, help="beams of --strategy beam (4)")
    parser.add_argument("--top-k", type=flags.positive_int, default=None, help="sample among the k likeliest ids")
    parser.add_argument("--top-p", type=_top_p, default=None, help="sample among the ids reaching p in total")
    parser.add_argument("--temperature", type=flags.positive_float, default=1.0, help="(default 1.0)")
    parser.add_argument("--max-new-tokens", type=flags.positive_int, default=32, help="(default 32)")
    parser.add_argument("--seed", type=int, default=None, help="numpy's seed for --strategy sample")


def _top_p(text):
    value = flags.fraction(text)
    if value == 0:
        raise flags.argparse.ArgumentTypeError("must be in (0, 1], got 0")
    return value


def check_model(model_dir, model, application):
    """The application to build ``model`` with (None for T5), or a ValueError saying why it
    cannot generate."""
    from gau_keras.models.registry import MODELS

    cls = MODELS[model]
    if model_dir is not None and getattr(cls, "is_seq2seq", None) is not None:
        if not cls.is_seq2seq:
            raise ValueError(
                f"generate: --model {model} is one half of T5; give the whole model (--model "
                f"{model.rsplit('_', 1)[0]}): its encoder reads the prompt, its decoder writes"
            )
        if application is not None:
            raise ValueError(f"generate: --application is for encoders; --model {model} is an encoder-decoder")
        return None
    if model_dir is None:
        raise ValueError(
            "generate: the bundled GAU-alpha was trained with masked-LM only: it fills masks "
            "(gau-keras fill-mask) but was never trained to continue text; give --model-dir of a causal "
            "model (--model gpt, gpt2, gpt2_ml) or of an encoder fine-tuned as a language model "
            "(--application lm or unilm)"
        )
    if MODELS[model].is_encoder and application is None:
        raise ValueError(
            f"generate: --model {model} is an encoder; its released checkpoints are trained with "
            f"masked-LM only, which does not continue text. For a checkpoint fine-tuned as a language "
            f"model, say how: --application lm or --application unilm"
        )
    return application or "lm"


def load(model_dir, model, application):
    """(model, tokenizer) of a model directory: a T5's (``application`` None) reads its
    SentencePiece ``spiece.model`` (``</s>`` ends a text) or, T5-PEGASUS-style, a ``vocab.txt``;
    the others a ``vocab.txt`` (``load_pretrained``)."""
    from gau_keras import build_transformer_model
    from gau_keras.models.presets import model_files
    from gau_keras.pretrained import load_pretrained
    from gau_keras.tokenizers import SpTokenizer, Tokenizer

    if application is not None:
        return load_pretrained(model_dir, model=model, application=application)
    config, checkpoint, vocab = model_files(model_dir, ("spiece.model", "vocab.txt"))
    if vocab.endswith(".model"):
        tokenizer = SpTokenizer(vocab, token_start=None, token_end="</s>")
    else:
        tokenizer = Tokenizer(vocab, do_lower_case=True, token_start=None)
    return build_transformer_model(config, checkpoint, model=model), tokenizer


def prompt_ids(tokenizer, text, application):
    """(token ids, segment ids) of a prompt: ``[CLS] text [SEP]`` for UniLM (the output follows
    the [SEP]); ``[CLS] text`` for a causal LM (the output continues the text); the encoder's
    ids for T5 (``application`` None)."""
    token_ids, segment_ids = tokenizer.encode(text)
    if application == "lm":
        token_ids, segment_ids = token_ids[:-1], segment_ids[:-1]
    return token_ids, segment_ids


def run(args, out=None):
    """Runs the command on parsed ``args``; returns 0."""
    import numpy as np

    from gau_keras.generation import CachedLM

    out = out or sys.stdout
    application = check_model(args.model_dir, args.model, args.application)
    if args.strategy != "sample" and (args.top_k or args.top_p):
        raise ValueError(f"generate: --top-k and --top-p take --strategy sample (got --strategy {args.strategy})")
    model, tokenizer = load(args.model_dir, args.model, application)
    transformer = model.transformer
    end_id = tokenizer._token_end_id
    seq2seq = application is None
    start_id = 0 if seq2seq else None  # T5's decoder starts from id 0
    if args.seed is not None:
        np.random.seed(args.seed)
    for text in args.prompts:
        token_ids, segment_ids = prompt_ids(tokenizer, text, application)
        # absolute position tables end at max_position; rotary and relative positions do not
        limit = transformer.max_position if getattr(transformer, "absolute_positions", False) else None
        if limit is not None and len(token_ids) + 1 > limit:
            raise ValueError(
                f"generate: the prompt {text[:20]!r}... has {len(token_ids)} tokens; --model {args.model} "
                f"has {limit} positions (max_position_embeddings), with room for at least one new token"
            )
        if seq2seq:
            lm = CachedLM(model, max_length=args.max_new_tokens + 1, max_input_length=len(token_ids))
            inputs = [token_ids]
        else:
            length = len(token_ids) + args.max_new_tokens
            lm = CachedLM(model, max_length=min(length, limit) if limit else length)
            inputs = [token_ids, segment_ids]
        # a causal model continues the prompt; T5 writes a text of its own, on the next line
        head = f"{text}\n  -> " if seq2seq else text
        if args.strategy == "beam":
            ids = lm.beam_search(inputs, args.num_beams, args.max_new_tokens, end_id, start_id)
            print(head + tokenizer.decode(_text_ids(ids, end_id)), file=out, flush=True)
            continue
        top_k = 1 if args.strategy == "greedy" else args.top_k
        top_p = None if args.strategy == "greedy" else args.top_p
        print(head, end="", file=out, flush=True)
        ids, shown = [], ""
        chunks = lm.stream(inputs, args.max_new_tokens, end_id, top_k, top_p, start_id, args.temperature, STREAM_CHUNK)
        for new in chunks:
            ids.extend(new)
            decoded = tokenizer.decode(_text_ids(ids, end_id))
            print(decoded[len(shown) :], end="", file=out, flush=True)
            shown = decoded
        print(file=out, flush=True)
    return 0


def _text_ids(ids, end_id):
    """The ids a text shows: without the end id, and without T5's start id 0."""
    return [int(i) for i in ids if int(i) not in (end_id, 0)]
