"""``CachedLM``: bert4keras's ``beam_search`` and ``random_sample`` over a key/value cache.

The sequence lives in one buffer of ``max_length`` slots (prompt, then the output ids); the
first pass runs the model over the whole buffer once and keeps every attention layer's keys
and values; each step after runs the one new token per row against them, writing its own
slot. Shapes never change, so the loop compiles once per (rows, ``max_length``, search). A
step's attention reads the filled slots only, up to the next of a few block lengths
(``gau_keras.ops.over_filled_slots``, from 512 slots up), so what a token costs grows with its
position only by the traffic of the keys it attends to.
"""

import keras
import numpy as np
from keras import ops

from gau_keras.generation.sampling import choose
from gau_keras.models.decoding import ranks_of, visibility

NEG_INF = -1e30


class CachedLM:
    """Cached decoding for a model built with ``application='lm'`` or ``'unilm'``, a GPT, or a
    T5 (its decoder, on the encoder's output computed once).

    Args:
        model: a model of ``build_transformer_model`` or a ``Backbone`` (anything with its
            builder as ``.transformer``), or the builder itself.
        max_length: the buffer: prompt + output ids together fit in it (T5: the output ids;
            default: the model's ``max_position``); one compiled loop serves every length up to it.
        max_input_length: T5: the most encoder input ids (default ``max_length``); inputs are
            padded to it, so every input length shares one compiled loop too.
    """

    def __init__(self, model, max_length=None, max_input_length=None):
        transformer = getattr(model, "transformer", model)
        if not hasattr(transformer, "cached_logits"):
            raise TypeError(f"CachedLM: {type(model).__name__} is not a gau_keras model (no builder)")
        self.transformer = transformer
        # an encoder-decoder (T5) decodes with its decoder, on its encoder's output
        self.decoder = getattr(transformer, "_decoder", None) or transformer
        self.encoder = transformer.encoder if self.decoder is not transformer else None
        refusal = self.decoder.cache_refusal()
        if refusal:
            raise ValueError(f"CachedLM: {refusal}")
        self.model = transformer.model if transformer.model is not None else model
        self.max_length = int(max_length or transformer.max_position)
        self.max_input_length = int(max_input_length or self.max_length)
        if self.max_length < 2:
            raise ValueError(f"CachedLM: max_length must be >= 2, got {max_length!r}")
        self._compiled = {}

    # ------------------------------------------------------------------ public
    def beam_search(self, inputs, topk, maxlen, end_id, start_id=None, minlen=1, temperature=1.0, min_ends=1):
        """bert4keras's ``AutoRegressiveDecoder.beam_search`` for this model: the ids of the best
        sequence (1-D, ``start_id`` first when given).

        Args:
            inputs: ``[token_ids]`` or ``[token_ids, segment_ids]`` of one prompt (1-D each).
            topk: beams; maxlen: the most steps; end_id: the id that ends a sequence;
            start_id, minlen, temperature, min_ends: as bert4keras's.
        """
        prompt, output_start = self._prompt(inputs, start_id, maxlen)
        rows = int(topk)
        if rows < 1:
            raise ValueError(f"beam_search: topk must be >= 1, got {topk!r}")
        rows = min(rows, self.transformer.vocab_size)
        ids, feed, length = self._buffer(prompt, output_start, rows)
        run = self._function("beam", rows)
        args = self._scalars(length, maxlen, end_id, minlen, temperature, min_ends, len(output_start))
        out_ids, out_length = run(ids, feed, *args)
        out_ids, out_length = np.asarray(out_ids), int(np.asarray(out_length))
        return out_ids[length - len(output_start) : out_length].astype(int)

    def random_sample(
        self, inputs, n, maxlen, end_id, topk=None, topp=None, start_id=None, minlen=1, temperature=1.0, min_ends=1
    ):
        """bert4keras's ``AutoRegressiveDecoder.random_sample`` for this model: ``n`` sampled
        sequences (finished ones first, in the order they ended; ``start_id`` first in each).
        The draws come from numpy's global generator (``np.random.seed`` makes them repeat)."""
        rows = []
        for row in self._sampled(inputs, int(n), maxlen, end_id, topk, topp, start_id, minlen, temperature, min_ends):
            rows = row
        return rows

    def stream(self, inputs, maxlen, end_id, topk=None, topp=None, start_id=None, temperature=1.0, chunk=8):
        """The ids of one sampled sequence as they come, ``chunk`` steps of the compiled loop at a
        time (``topk=1``: greedy): yields lists of new ids (the output start first); stops at
        ``end_id`` (included) or after ``maxlen`` steps."""
        sent = 0
        for rows in self._sampled(inputs, 1, maxlen, end_id, topk, topp, start_id, 1, temperature, 1, chunk):
            ids = rows[0].tolist()
            if len(ids) > sent:
                yield ids[sent:]
                sent = len(ids)

    def _sampled(self, inputs, n, maxlen, end_id, topk, topp, start_id, minlen, temperature, min_ends, chunk=None):
        """Yields the ``n`` sequences (``random_sample``'s order) after every ``chunk`` steps
        (None: once, at the end)."""
        prompt, output_start = self._prompt(inputs, start_id, maxlen)
        if n < 1:
            raise ValueError(f"random_sample: n must be >= 1, got {n!r}")
        if topk is not None and int(topk) < 1:
            raise ValueError(f"random_sample: topk must be >= 1 (or None), got {topk!r}")
        if topp is not None and not 0 < topp <= 1:
            raise ValueError(f"random_sample: topp must be in (0, 1] (or None), got {topp!r}")
        ids, feed, length = self._buffer(prompt, output_start, n)
        scalars = self._scalars(length, maxlen, end_id, minlen, temperature, min_ends, len(output_start))
        steps, rest = int(scalars[1]), (scalars[2],) + scalars[3:]
        uniform = np.random.random((self.max_length, n)).astype("float32")
        limits = (np.int32(topk or 0), np.float32(1.0 if topp is None else topp))
        start, run = self._function("sample_start", n), self._function("sample_run", n)
        state = start(ids, feed, np.int32(length))
        stop = 0
        while stop < steps:
            stop = steps if chunk is None else min(steps, stop + chunk)
            state = run(state, feed, np.int32(length), np.int32(stop), *rest, uniform, *limits)
            step, ends = int(np.asarray(state[0])), np.asarray(state[4])
            yield self._rows(np.asarray(state[1]), ends, length - len(output_start), length + step)
            if step < stop:  # every row ended
                break

    def _rows(self, ids, ends, start, length):
        """The sequences of the buffer rows: finished ones first, in the order they ended."""
        order = sorted(range(len(ids)), key=lambda row: (ends[row] if ends[row] >= 0 else self.max_length + 1, row))
        return [ids[row, start : (ends[row] + 1 if ends[row] >= 0 else length)].astype(int) for row in order]

    # ----------------------------------------------------------------- inputs
    def _prompt(self, inputs, start_id, maxlen):
        """(prompt [token_ids, segment_ids, source] as arrays, the output's first ids); for T5 the
        decoder's prompt is empty and ``source`` is the encoder's input ids or output."""
        if int(maxlen) < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen!r}")
        inputs = list(inputs)
        output_start = [] if start_id is None else [int(start_id)]
        if self.encoder is not None:
            if not output_start:
                raise ValueError("an encoder-decoder starts its output with start_id (T5: 0): give one")
            empty = np.zeros((0,), "int32")
            return [empty, empty, self._source(inputs[0])], output_start
        token_ids = np.asarray(inputs[0], dtype="int32").reshape(-1)
        segment_ids = np.asarray(inputs[1], dtype="int32").reshape(-1) if len(inputs) > 1 else np.zeros_like(token_ids)
        if segment_ids.shape != token_ids.shape:
            raise ValueError(f"segment_ids has {segment_ids.size} ids, token_ids {token_ids.size}")
        if token_ids.size + len(output_start) >= self.max_length:
            raise ValueError(
                f"the prompt has {token_ids.size + len(output_start)} ids; the buffer holds {self.max_length} "
                f"(max_length), with room for at least one new id"
            )
        return [token_ids, segment_ids, None], output_start

    def _source(self, source):
        """The encoder's input ids [Lc] (int) or its output [Lc, H] (float, as bert4keras's T5
        examples pass ``encoder.predict(...)[0]``), checked against ``max_input_length``."""
        source = np.asarray(source)
        if source.ndim not in (1, 2) or (source.ndim == 2 and source.shape[-1] != self.transformer.hidden_size):
            raise ValueError(
                f"inputs[0] must be the encoder's input ids [length] or its output [length, "
                f"{self.transformer.hidden_size}], got shape {source.shape}"
            )
        if len(source) > self.max_input_length:
            raise ValueError(f"the input has {len(source)} positions; max_input_length is {self.max_input_length}")
        return source

    def _buffer(self, prompt, output_start, rows):
        """ids [rows, max_length] (prompt, output start, then zeros), what the passes read besides
        (``feed``: segment ids [rows, max_length], T5's context [rows, Lc, H] and its mask [rows,
        Lc], padded to ``max_input_length``) and the length used."""
        token_ids, segment_ids, source = prompt
        output_segment = 1 if self.decoder.application == "unilm" else 0
        ids = np.concatenate([token_ids, np.asarray(output_start, "int32")])
        length = ids.size
        buffer = np.zeros((rows, self.max_length), "int32")
        buffer[:, :length] = ids
        segments = np.full((rows, self.max_length), output_segment, "int32")
        segments[:, : token_ids.size] = segment_ids
        context, context_mask = (None, None) if source is None else self._context(source, rows)
        return buffer, (segments, context, context_mask), length

    def _context(self, source, rows):
        """T5's encoder output [rows, max_input_length, H] (the encoder run once here, on ids)
        and its real positions, bool [rows, max_input_length]."""
        size = self.max_input_length
        if source.ndim == 1:
            ids = np.zeros((rows, size), "int32")
            ids[:, : len(source)] = source
            context = keras.ops.convert_to_numpy(self.encoder([ids.astype(keras.config.floatx())], training=False))
            return context, ids != 0
        context = np.zeros((rows, size, source.shape[-1]), keras.config.floatx())
        context[:, : len(source)] = source
        return context, np.broadcast_to(np.arange(size) < len(source), (rows, size)).copy()

    def _scalars(self, length, maxlen, end_id, minlen, temperature, min_ends, start_count):
        if end_id is None:  # no end: every step runs
            end_id = -1
        elif not 0 <= int(end_id) < self.transformer.vocab_size:
            last = self.transformer.vocab_size - 1
            raise ValueError(f"end_id must be an id of the vocabulary (0..{last}), got {end_id!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if int(min_ends) < 1:
            raise ValueError(f"min_ends must be >= 1, got {min_ends!r}")
        steps = min(int(maxlen), self.max_length - length)
        return (
            np.int32(length),
            np.int32(steps),
            np.int32(end_id),
            np.int32(int(minlen) - start_count),  # output ids to generate before an end counts
            np.float32(temperature),
            np.int32(min_ends),
        )

    # ----------------------------------------------------------------- loops
    def _function(self, kind, rows):
        key = (kind, rows)
        if key not in self._compiled:
            loop = {"beam": self._beam_loop, "sample_start": self._sample_start, "sample_run": self._sample_run}[kind]
            self._compiled[key] = _compile(loop, self.model)
        return self._compiled[key]

    def _first_pass(self, ids, feed, length):
        """Logits [B, V] of the last prompt position, and the caches of the whole buffer."""
        segments, context, context_mask = feed
        ranks = ranks_of(self.decoder.application, segments)
        positions = ops.arange(self.max_length, dtype="int32")
        visible = visibility(ids, ranks, positions, length, self.decoder.decode_masks_padding)
        logits, caches = self.decoder.cached_logits(
            ids, segments, None, 0, visible, context, context_mask, logits_at=length - 1
        )
        return logits[:, 0], caches, ranks

    def _step(self, ids, feed, ranks, caches, position):
        """Logits [B, V] after the ids at ``position``, and the updated caches."""
        segments, context, context_mask = feed
        token = ops.slice(ids, [0, position], [ops.shape(ids)[0], 1])
        segment = ops.slice(segments, [0, position], [ops.shape(ids)[0], 1])
        visible = visibility(ids, ranks, ops.reshape(position, (1,)), position + 1, self.decoder.decode_masks_padding)
        logits, caches = self.decoder.cached_logits(token, segment, caches, position, visible, context, context_mask)
        return logits[:, 0], caches

    def _sample_start(self, ids, feed, length):
        """The sampling state after the first pass: (step, ids, caches, logits, ends, counts)."""
        logits, caches, _ = self._first_pass(ids, feed, length)
        rows = ops.shape(ids)[0]
        ends = ops.full((rows,), -1, "int32")  # the position each row ended at
        return ops.convert_to_tensor(0, "int32"), ids, caches, logits, ends, ops.zeros((rows,), "int32")

    def _sample_run(self, state, feed, length, stop, end_id, minlen, temperature, min_ends, uniform, topk, topp):
        """``state`` advanced until step ``stop`` or until every row has ended."""
        ranks = ranks_of(self.decoder.application, feed[0])

        def cond(step, ids, caches, logits, ends, counts):
            return ops.logical_and(ops.less(step, stop), ops.any(ops.less(ends, 0)))

        def body(step, ids, caches, logits, ends, counts):
            position = length + step
            probas = ops.softmax(logits / temperature, axis=-1)
            live = ops.less(ends, 0)
            token = ops.where(live, choose(probas, uniform[step], topk, topp), 0)
            ids = ops.slice_update(ids, [0, position], token[:, None])
            ended = ops.logical_and(live, ops.equal(token, end_id))
            counts = counts + ops.cast(ended, "int32")
            finished = ops.logical_and(ended, ops.greater_equal(counts, min_ends))
            ends = ops.where(ops.logical_and(finished, step + 1 >= minlen), position, ends)
            logits, caches = self._step(ids, feed, ranks, caches, position)
            return step + 1, ids, caches, logits, ends, counts

        return ops.while_loop(cond, body, tuple(state))

    def _beam_loop(self, ids, feed, length, steps, end_id, minlen, temperature, min_ends):
        logits, caches, ranks = self._first_pass(ids, feed, length)
        rows = ops.shape(ids)[0]
        beam_count = ids.shape[0]  # static: one compiled loop per number of beams
        row_index = ops.arange(rows, dtype="int32")
        scores = ops.where(ops.equal(row_index, 0), 0.0, NEG_INF)  # one beam at first, as bert4keras
        live_count = ops.convert_to_tensor(rows, "int32")
        counts = ops.zeros((rows,), "int32")
        found = ops.convert_to_tensor(False)
        result = ids[0]  # the sequence returned once one is

        def cond(step, ids, caches, logits, scores, live_count, counts, found, result):
            return ops.logical_and(ops.less(step, steps), ops.logical_not(found))

        def body(step, ids, caches, logits, scores, live_count, counts, found, result):
            position = length + step
            logp = ops.log(ops.softmax(logits / temperature, axis=-1) + 1e-12)
            top, flat = ops.top_k(ops.reshape(scores[:, None] + logp, (-1,)), rows)
            vocab = ops.shape(logp)[-1]
            beams, token = flat // vocab, ops.cast(flat % vocab, "int32")
            live = ops.less(row_index, live_count)  # bert4keras keeps as many beams as are live
            top = ops.where(live, top, NEG_INF)
            ids = ops.slice_update(ops.take(ids, beams, axis=0), [0, position], token[:, None])
            ended = ops.logical_and(live, ops.equal(token, end_id))
            counts = ops.take(counts, beams, axis=0) + ops.cast(ended, "int32")
            done = ops.logical_and(ops.logical_and(ended, ops.greater_equal(counts, min_ends)), step + 1 >= minlen)
            leader = ops.argmax(top)
            found = ops.take(done, leader)
            result = ops.where(found, ops.take(ids, leader, axis=0), result)
            # the finished beams leave; the live ones first, in score order (the next step's ranks)
            scores, order = ops.top_k(ops.where(done, NEG_INF, top), rows)
            ids, counts = ops.take(ids, order, axis=0), ops.take(counts, order, axis=0)
            if beam_count > 1:  # one beam (greedy) has nothing to reorder: no copy of every cache per step
                rows_from = ops.take(beams, order, axis=0)  # the caches are still the old beams'
                caches = [tuple(ops.take(part, rows_from, axis=0) for part in cache) for cache in caches]
            live_count = ops.sum(ops.cast(ops.greater(scores, NEG_INF / 2), "int32"))
            logits, caches = self._step(ids, feed, ranks, caches, position)
            return step + 1, ids, caches, logits, scores, live_count, counts, found, result

        state = (ops.convert_to_tensor(0, "int32"), ids, caches, logits, scores, live_count, counts, found, result)
        step, ids, caches, logits, scores, live_count, counts, found, result = ops.while_loop(cond, body, state)
        return ops.where(found, result, ops.take(ids, ops.argmax(scores), axis=0)), length + step


def _compile(loop, model):
    """``loop`` compiled for the backend: ``tf.function(jit_compile=True)`` on TensorFlow,
    ``jax.jit`` over the model's variables as arguments on JAX, as is elsewhere."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(loop, jit_compile=True)
    if backend == "jax":
        import jax

        variables = list(model.variables)

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loop(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([v.value for v in variables], *args)
    return loop
