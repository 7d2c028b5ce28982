"""Decoding speed: cached (``gau_keras.generation.CachedLM``) against recompute (bert4keras's
``AutoRegressiveDecoder``, the model run over the prompt and every id so far at each step) and,
for GPT2, against keras-hub's ``GPT2CausalLM.generate()`` at the same size, in one run.

Sizes (``--size``): ``small`` (the default) is GPT-2 small's shape (hidden 768, 12 layers, 12
heads, FFN 3072) at the 21128-id Chinese vocabulary, GAU-alpha as released (24 GAU layers, hidden
768, e = 1536, s = 128, 12000 ids) and SRU++ at GPT-2 small's width and depth; ``tiny`` is hidden
256, 4 layers, 4 heads, 12000 ids (s = 64).

For each model and each number of new tokens N (batch 1, greedy = beam search with topk 1; with
``--sample`` also batch 4, top-k sampling):

  * cached: ``CachedLM(model, max_length=prompt + N).beam_search([prompt], topk=1, maxlen=N,
    end_id=E, minlen=N)`` (``random_sample(n=4, topk=K, ...)`` for sampling). The first call
    (compilation included) is timed apart; then ``--repeats`` calls, the median reported.
  * recompute: ``AutoRegressiveDecoder`` whose ``predict`` runs
    ``self.last_token(model).predict([prompt + output ids])`` (as tests/generation/test_cached.py
    and bert4keras's scripts write it). First call: a short run of ``min(N, 8)`` steps; then one
    timed run of N steps (it is the slow path). Where N is not in ``--recompute-lengths`` it is
    not run; its per-token time is then *estimated* (marked ``est.``) from a least-squares line
    of the measured per-token times against the mean sequence length ``prompt + N / 2``.
    ``--recompute compiled``: the same decoder, its ``predict`` calling ``last_token(model)``
    through one ``tf.function(reduce_retracing=True)`` instead (a graph per step, as Keras 2's
    ``predict`` ran bert4keras's); the library's ``last_token(...).predict`` runs eagerly.
  * keras-hub (GPT2 only, where ``keras_hub`` imports): ``GPT2CausalLM`` of the same sizes,
    ``compile(sampler='greedy')``, ``generate`` of a [1, prompt + N] buffer with the prompt
    unmasked and ``stop_token_ids=None``: N new tokens. First call apart, then the median of
    ``--repeats``. Absent keras_hub, the column says so and the reason is printed.

Every run is forced to produce exactly N ids (``minlen = maxlen = N``: the end id E never stops
it) and the script checks the lengths; cached and recompute greedy ids are compared (``ids
equal``). The models have random weights (seeded): the numbers are speed only. Per-token time =
wall time of the whole call / N (the cached call's prompt pass included). ``flat`` compares the
cached per-token time at the largest N with the smallest (target: within 1.5x).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import format_number, markdown_table  # noqa: E402

MODELS = ("gpt2", "gau_alpha", "srupp")
DEFAULT_MODELS = ("gpt2", "gau_alpha")
SIZES = {
    # GPT-2 small (124M at GPT-2's vocab; 21128 is the Chinese BERT vocab of uer/gpt2-chinese-cluecorpussmall)
    "small": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 21128},
    "tiny": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 12000},
    "quick": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100},  # --quick
}
# --size small builds GAU-alpha as released (chinese_GAU-alpha-char_L-24_H-768: 24 GAU layers, s = 128)
RELEASED_GAU_ALPHA = {"num_hidden_layers": 24, "vocab_size": 12000, "attention_key_size": 128}
HEADERS = [
    "model",
    "batch",
    "mode",
    "new tokens",
    "cached first call s",
    "cached ms/token",
    "cached tokens/s",
    "recompute first call s",
    "recompute ms/token",
    "recompute tokens/s",
    "cached speedup",
    "keras-hub first call s",
    "keras-hub ms/token",
    "keras-hub tokens/s",
    "cached / keras-hub tokens/s",
    "ids equal",
]


def model_config(name, sizes, max_position, size="tiny"):
    """Our config of ``name`` at ``sizes``; at ``size='small'`` GAU-alpha takes the released model's
    depth, vocabulary and key size (``RELEASED_GAU_ALPHA``)."""
    if name == "gau_alpha" and size == "small":
        sizes = dict(sizes, **{k: v for k, v in RELEASED_GAU_ALPHA.items() if k != "attention_key_size"})
    hidden = sizes["hidden_size"]
    config = dict(sizes, max_position_embeddings=max_position, type_vocab_size=2)
    if name == "srupp":  # SRU++: attention width p = H / 4 (the paper's ratio), every layer attends
        return dict(
            vocab_size=sizes["vocab_size"],
            hidden_size=hidden,
            num_hidden_layers=sizes["num_hidden_layers"],
            num_attention_heads=1,
            proj_size=hidden // 4,
        )
    if name == "gau_alpha":
        # GAU-alpha: e = 2H, s = 128 at H 768; here s = H / 4
        key_size = RELEASED_GAU_ALPHA["attention_key_size"] if size == "small" else hidden // 4
        config.update(intermediate_size=2 * hidden, attention_key_size=key_size, hidden_act="swish")
    else:
        config.update(intermediate_size=4 * hidden, hidden_act="gelu")
    return config


def build(name, config, seed):
    import keras

    from gau_keras import build_transformer_model

    keras.utils.set_random_seed(seed)
    return build_transformer_model(config, model=name, application="lm")


def recompute_decoder(model, steps, end_id, compiled=False):
    """bert4keras's decoder; ``compiled``: ``last_token(model)`` called through one
    ``tf.function(reduce_retracing=True)`` (a graph per call, as Keras 2's ``predict`` ran)
    instead of ``last_token(model).predict`` (eager: the library's recompute path)."""
    import numpy as np

    from gau_keras.snippets import AutoRegressiveDecoder

    class Decoder(AutoRegressiveDecoder):
        """The recompute path, as a bert4keras script writes it."""

        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            token_ids = np.concatenate([inputs[0], output_ids], 1)
            segment_ids = np.zeros_like(token_ids)
            feed = [token_ids, segment_ids][: len(model.inputs)]
            if compiled:
                return graph_call(model, self.last_token(model), feed)
            return self.last_token(model).predict(feed)

    return Decoder(start_id=None, end_id=end_id, maxlen=steps, minlen=steps)


_GRAPHS = {}


def graph_call(model, last, feed):
    """``last(feed)`` through a ``tf.function`` that generalises the length (TensorFlow only),
    one per ``model`` (traced in the warm-up run, reused by the timed one)."""
    import tensorflow as tf

    if model not in _GRAPHS:
        _GRAPHS[model] = tf.function(lambda x: last(x, training=False), reduce_retracing=True)
    return _GRAPHS[model]([tf.constant(a, "int32") for a in feed]).numpy()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def check_lengths(label, outputs, n):
    for ids in outputs:
        if len(ids) != n:
            raise RuntimeError(f"{label}: produced {len(ids)} ids, asked for {n}")


def run_cached(model, prompt, n, end_id, mode, batch, topk, repeats):
    import numpy as np

    from gau_keras.generation import CachedLM

    lm = CachedLM(model, max_length=len(prompt) + n)
    if mode == "greedy":
        call = lambda: [lm.beam_search([prompt], topk=1, maxlen=n, end_id=end_id, minlen=n)]  # noqa: E731
    else:
        call = lambda: lm.random_sample([prompt], n=batch, maxlen=n, end_id=end_id, topk=topk, minlen=n)  # noqa: E731
    np.random.seed(0)
    first, out = timed(call)
    check_lengths("cached", out, n)
    times = []
    for _ in range(repeats):
        seconds, out = timed(call)
        check_lengths("cached", out, n)
        times.append(seconds)
    return first, statistics.median(times), out


def run_recompute(model, prompt, n, end_id, mode, batch, topk, compiled=False):
    import numpy as np

    warm = recompute_decoder(model, min(n, 8), end_id, compiled)
    decoder = recompute_decoder(model, n, end_id, compiled)
    if mode == "greedy":
        first, _ = timed(lambda: warm.beam_search([prompt], topk=1))
        seconds, out = timed(lambda: [decoder.beam_search([prompt], topk=1)])
    else:
        np.random.seed(0)
        first, _ = timed(lambda: warm.random_sample([prompt], n=batch, topk=topk))
        seconds, out = timed(lambda: decoder.random_sample([prompt], n=batch, topk=topk))
    check_lengths("recompute", out, n)
    return first, seconds, out


def keras_hub_reason():
    """None when keras_hub imports, else why not."""
    try:
        import keras_hub  # noqa: F401
    except Exception as e:  # ImportError, or a keras_hub that fails to import
        return f"{type(e).__name__}: {e}"
    return None


def run_keras_hub(sizes, max_position, prompt, n, mode, batch, topk, repeats, seed):
    import keras
    import keras_hub
    import numpy as np

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=sizes["vocab_size"],
        num_layers=sizes["num_hidden_layers"],
        num_heads=sizes["num_attention_heads"],
        hidden_dim=sizes["hidden_size"],
        intermediate_dim=4 * sizes["hidden_size"],
        dropout=0.0,
        max_sequence_length=max_position,
    )
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    sampler = "greedy" if mode == "greedy" else keras_hub.samplers.TopKSampler(k=topk, seed=seed)
    causal_lm.compile(sampler=sampler)
    rows = 1 if mode == "greedy" else batch
    token_ids = np.zeros((rows, len(prompt) + n), "int32")
    token_ids[:, : len(prompt)] = prompt
    padding_mask = np.zeros_like(token_ids, dtype=bool)
    padding_mask[:, : len(prompt)] = True
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}

    def call():
        out = causal_lm.generate(inputs, stop_token_ids=None)
        if out["token_ids"].shape != token_ids.shape or not np.all(out["padding_mask"]):
            raise RuntimeError(f"keras-hub: generated {out['token_ids'].shape}, not {n} new tokens per row")
        return out

    first, _ = timed(call)
    times = [timed(call)[0] for _ in range(repeats)]
    return first, statistics.median(times)


def estimate(points, mean_length):
    """Per-token seconds at ``mean_length`` from a least-squares line through ``points``
    ([(mean_length, per-token seconds)]); None with fewer than two points."""
    if len(points) < 2:
        return None
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my + slope * (mean_length - mx)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated: gpt2, gau_alpha, srupp")
    p.add_argument("--lengths", default="64,256,1024", help="new tokens per run, comma-separated")
    p.add_argument(
        "--recompute-lengths",
        default=None,
        help="lengths at which recompute runs (default: all of --lengths; 'none' for none); others are estimated",
    )
    p.add_argument(
        "--recompute",
        choices=("eager", "compiled"),
        default="eager",
        help="eager: last_token(model).predict (the library's path); compiled: through a tf.function",
    )
    p.add_argument("--prompt-length", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="timed cached and keras-hub calls (median)")
    p.add_argument("--sample", action="store_true", help="also batch 4 top-k sampling")
    p.add_argument("--sample-batch", type=int, default=4)
    p.add_argument("--topk", type=int, default=40)
    p.add_argument("--no-keras-hub", action="store_true", help="leave keras-hub out even where it imports")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--size",
        choices=("small", "tiny"),
        default="small",
        help="small: GPT-2 small's sizes (hidden 768, 12 layers, 12 heads), GAU-alpha as released; "
        "tiny: hidden 256, 4 layers, 4 heads",
    )
    p.add_argument("--quick", action="store_true", help="smoke test: tiny models, 8 new tokens, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.repeats = "8", 1
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}: choose from {', '.join(MODELS)}")
    args.lengths = sorted(int(n) for n in args.lengths.split(","))
    if args.recompute_lengths is None:
        args.recompute_lengths = list(args.lengths)
    elif args.recompute_lengths.strip().lower() == "none":
        args.recompute_lengths = []
    else:
        args.recompute_lengths = sorted(int(n) for n in args.recompute_lengths.split(","))
    return args


def main(argv=None):
    args = parse_args(argv)
    import keras
    import numpy as np
    import tensorflow as tf

    size = "quick" if args.quick else args.size
    sizes = SIZES[size]
    max_position = args.prompt_length + max(args.lengths)
    hub_reason = "--no-keras-hub" if args.no_keras_hub else keras_hub_reason()
    modes = [("greedy", 1)] + ([("sample", args.sample_batch)] if args.sample else [])

    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, backend {keras.backend.backend()}, "
        f"{os.cpu_count()} logical CPU cores visible; GPUs: {len(tf.config.list_physical_devices('GPU'))}",
        flush=True,
    )
    print(
        f"size {size}: {sizes}, max_position {max_position}, prompt {args.prompt_length} ids; random weights "
        f"(seed {args.seed}); end id: the last of the vocabulary, minlen = maxlen = N; sampling top-k {args.topk}; "
        f"recompute: {args.recompute}",
        flush=True,
    )
    if hub_reason:
        print(f"keras-hub column skipped: {hub_reason}", flush=True)
    else:
        import keras_hub

        print(f"keras-hub {keras_hub.__version__}: GPT2CausalLM of the same sizes", flush=True)

    rows, flat_lines = [], []
    for name in args.models:
        config = model_config(name, sizes, max_position, size)
        model = build(name, config, args.seed)
        rng = np.random.default_rng(args.seed)
        prompt = rng.integers(1, config["vocab_size"] - 1, size=args.prompt_length).tolist()
        end_id = config["vocab_size"] - 1  # never stops a run: minlen = maxlen = N
        print(f"{name}: {model.count_params():,} parameters, config {config}", flush=True)
        for mode, batch in modes:
            measured, cached_per_token = [], {}
            results = []
            for n in args.lengths:
                c_first, c_time, c_out = run_cached(model, prompt, n, end_id, mode, batch, args.topk, args.repeats)
                cached_per_token[n] = c_time / n
                r_first = r_time = None
                same = "n/a"
                if n in args.recompute_lengths:
                    r_first, r_time, r_out = run_recompute(
                        model, prompt, n, end_id, mode, batch, args.topk, args.recompute == "compiled"
                    )
                    measured.append((args.prompt_length + n / 2, r_time / n))
                    if mode == "greedy":
                        same = "yes" if c_out[0].tolist() == r_out[0].tolist() else "NO"
                h_first = h_time = None
                if name == "gpt2" and not hub_reason:
                    h_first, h_time = run_keras_hub(
                        sizes, max_position, prompt, n, mode, batch, args.topk, args.repeats, args.seed
                    )
                print(
                    f"  {name} {mode} b{batch} N={n}: cached {c_time:.3f} s (first {c_first:.2f} s)"
                    + (f", recompute {r_time:.3f} s (first {r_first:.2f} s)" if r_time else "")
                    + (f", keras-hub {h_time:.3f} s (first {h_first:.2f} s)" if h_time else "")
                    + f", ids equal: {same}",
                    flush=True,
                )
                results.append((n, c_first, c_time, r_first, r_time, h_first, h_time, same))
            for n, c_first, c_time, r_first, r_time, h_first, h_time, same in results:
                tokens = n * batch
                c_tok = c_time / n
                if r_time is not None:
                    r_tok, r_mark = r_time / n, ""
                else:
                    r_tok, r_mark = estimate(measured, args.prompt_length + n / 2), " est."
                hub = "not measured" if name == "gpt2" and hub_reason else "n/a"

                def fmt(value, mark=""):
                    return "n/a" if value is None else format_number(value) + mark

                rows.append(
                    [
                        name,
                        batch,
                        mode,
                        n,
                        fmt(c_first),
                        fmt(c_tok * 1e3),
                        fmt(tokens / c_time),
                        fmt(r_first),
                        fmt(r_tok and r_tok * 1e3, r_mark),
                        fmt(r_tok and batch / r_tok, r_mark),
                        fmt(r_tok and r_tok / c_tok, r_mark),
                        fmt(h_first) if h_time else hub,
                        fmt(h_time / n * 1e3) if h_time else hub,
                        fmt(tokens / h_time) if h_time else hub,
                        fmt(h_time / c_time) if h_time else hub,
                        same,
                    ]
                )
            lo, hi = min(cached_per_token), max(cached_per_token)
            if hi != lo:
                ratio = cached_per_token[hi] / cached_per_token[lo]
                flat_lines.append(
                    f"{name} {mode} batch {batch}: cached ms/token at {hi} new tokens / at {lo} = {ratio:.2f} "
                    f"({'flat: within 1.5x' if ratio <= 1.5 else 'NOT within 1.5x'})"
                )
        del model
        keras.backend.clear_session()

    print()
    print(markdown_table(HEADERS, rows))
    print()
    for line in flat_lines:
        print(line)
    print("ms/token = wall time of the call / new tokens; tokens/s counts every row of the batch; 'est.': estimated")
    return rows


if __name__ == "__main__":
    main()
