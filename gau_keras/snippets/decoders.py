"""bert4keras's decoders: ``ViterbiDecoder`` (best label path of a CRF) and
``AutoRegressiveDecoder`` (beam search and random sampling for seq2seq / LM).

    class Continue(AutoRegressiveDecoder):            # a causal LM (application='lm')
        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            ids = np.concatenate([inputs[0], output_ids], axis=1)
            return self.last_token(lm).predict([ids, np.zeros_like(ids)])

    writer = Continue(start_id=None, end_id=tokenizer.token_sep_id, maxlen=20)
    continuations = writer.random_sample([prompt_ids], n=3, topp=0.9)

All numpy; the search draws with numpy's global RNG in the same order as
bert4keras, so a seeded run gives bert4keras's samples.
"""

import functools
import numbers

import numpy as np

from gau_keras.snippets.arrays import softmax

_RTYPES = ("probas", "logits")


def _check_int(name, value, least):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
        raise ValueError(f"AutoRegressiveDecoder: {name} must be an integer >= {least}, got {value!r}")


def _check_temperature(temperature):
    if not (isinstance(temperature, numbers.Real) and np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"AutoRegressiveDecoder: temperature must be a finite number > 0, got {temperature!r}")


class ViterbiDecoder:
    """Viterbi decoding over label scores with a transition matrix.

    Args:
        trans: [num_labels, num_labels] transition scores (from -> to).
        starts: labels allowed first (None: all).
        ends: labels allowed last (None: all).
    """

    def __init__(self, trans, starts=None, ends=None):
        shape = np.shape(trans)
        if len(shape) != 2 or shape[0] != shape[1] or shape[0] == 0:
            raise ValueError(
                f"ViterbiDecoder: trans must be a square [num_labels, num_labels] matrix, got shape {shape}"
            )
        if np.isnan(np.asarray(trans, dtype=float)).any():
            raise ValueError("ViterbiDecoder: trans holds NaN")
        self.trans = trans
        self.num_labels = len(trans)
        for name, labels in (("starts", starts), ("ends", ends)):
            outside = (
                []
                if labels is None
                else [
                    label for label in labels if not isinstance(label, (int, np.integer)) or not 0 <= label < len(trans)
                ]
            )
            if outside:
                raise ValueError(f"ViterbiDecoder: {name} names no label of the {len(trans)}: {outside}")
        every = range(self.num_labels)
        self.non_starts = [] if starts is None else [i for i in every if i not in starts]
        self.non_ends = [] if ends is None else [i for i in every if i not in ends]

    def decode(self, nodes):
        """The best label path, [seq_len] ints, for ``nodes`` [seq_len, num_labels] scores.

        ``nodes`` is not modified (bert4keras subtracts the disallowed start/end
        labels from it in place).
        """
        nodes = np.array(nodes, dtype=np.result_type(np.asarray(nodes).dtype, np.float32))
        if nodes.ndim != 2 or nodes.shape[1] != self.num_labels:
            raise ValueError(
                f"ViterbiDecoder.decode: nodes must be [seq_len, {self.num_labels}] "
                f"(the labels of trans), got shape {nodes.shape}"
            )
        if len(nodes) == 0:
            return np.zeros(0, dtype=int)
        if np.isnan(nodes).any():
            raise ValueError(
                f"ViterbiDecoder.decode: nodes hold NaN at steps "
                f"{np.flatnonzero(np.isnan(nodes).any(axis=1)).tolist()[:8]}"
            )
        nodes[0, self.non_starts] -= np.inf
        nodes[-1, self.non_ends] -= np.inf
        labels = np.arange(self.num_labels)[None]
        scores = nodes[0][:, None]  # best score of a path ending in each label
        paths = labels  # [steps so far, num_labels]: those paths
        for step_scores in nodes[1:]:
            totals = scores + self.trans + step_scores[None]  # [from, to]
            best_from = totals.argmax(0)
            scores = totals.max(0)[:, None]
            paths = np.concatenate([paths[:, best_from], labels], 0)
        return paths[:, scores[:, 0].argmax()]


class AutoRegressiveDecoder:
    """Base class of autoregressive decoders; subclasses define ``predict``.

    Args:
        start_id: the id the output starts with (None: an empty start, as for
            UniLM, where the input ends with [SEP]).
        end_id: the id that ends a sequence.
        maxlen: the most decoding steps.
        minlen: an end is accepted only once the output has this many ids.
        cached: optional ``gau_keras.generation.CachedLM`` of the model ``predict`` runs (one
            built with ``application='lm'`` or ``'unilm'``, whose input is the prompt followed
            by the output ids): ``beam_search`` and ``random_sample`` then run its key/value
            cache in one compiled loop instead of ``predict`` (same ids for beam search; the
            inputs are ``[token_ids]`` or ``[token_ids, segment_ids]`` of the prompt).
    """

    def __init__(self, start_id, end_id, maxlen, minlen=1, cached=None):
        _check_int("maxlen", maxlen, 1)
        _check_int("minlen", minlen, 0)
        if cached is not None and not (hasattr(cached, "beam_search") and hasattr(cached, "random_sample")):
            raise TypeError(f"cached must be a gau_keras.generation.CachedLM, got {type(cached).__name__}")
        if cached is not None and end_id is None:
            raise ValueError("cached decoding needs an end_id")
        self.cached = cached
        self.start_id, self.end_id = start_id, end_id
        self.maxlen, self.minlen = maxlen, minlen
        self.models = {}  # last_token's cache: model -> its last-position model
        start = [] if start_id is None else [start_id]
        self.first_output_ids = np.array([start], dtype=int)

    @staticmethod
    def wraps(default_rtype="probas", use_states=False):
        """Decorates ``predict(self, inputs, output_ids, states)``.

        ``default_rtype``: what the decorated function returns, 'probas'
        (normalised probabilities) or 'logits' (before softmax).
        ``use_states``: whether it returns ``(scores, states)`` (else just the
        scores; states are then None). The decorated method takes
        ``(inputs, output_ids, states, temperature=1, rtype=default_rtype)``
        and returns ``(probabilities, states)`` for rtype='probas' or
        ``(log-probabilities, states)`` for 'logits', at that temperature.
        """
        if default_rtype not in _RTYPES:
            raise ValueError(f"wraps: default_rtype must be 'probas' or 'logits', got {default_rtype!r}")

        def decorator(predict):
            @functools.wraps(predict)
            def new_predict(self, inputs, output_ids, states, temperature=1, rtype=default_rtype):
                if rtype not in _RTYPES:
                    raise ValueError(f"predict: rtype must be 'probas' or 'logits', got {rtype!r}")
                scores = predict(self, inputs, output_ids, states)
                scores, states = scores if use_states else (scores, None)
                scores = np.asarray(scores)
                if np.isnan(scores).any():
                    rows = np.flatnonzero(np.isnan(scores).reshape(len(scores), -1).any(axis=1)).tolist()
                    raise ValueError(
                        f"{type(self).__name__}.predict returned NaN scores (rows {rows[:8]}) "
                        f"after {np.shape(output_ids)[1]} output ids; decoding stops here"
                    )
                if default_rtype == "logits":
                    probas = softmax(scores / temperature)
                elif temperature != 1:
                    sharpened = np.power(scores, 1.0 / temperature)
                    probas = sharpened / sharpened.sum(axis=-1, keepdims=True)
                else:
                    probas = scores
                if rtype == "logits":
                    return np.log(probas + 1e-12), states
                return probas, states

            return new_predict

        return decorator

    def last_token(self, model):
        """``model`` cut to the last position of each output ([B, L, ...] -> [B, ...]), cached.

        Its ``predict`` runs the model directly, silently: Keras 3's would print a
        progress bar and, as the length grows by one each step, retrace its
        function at every decoding step. The numbers are the same.
        """
        if model not in self.models:
            import keras

            # the sequence mask (if any) does not apply to the one position kept
            outputs = [
                keras.layers.Lambda(lambda x: x[:, -1], mask=lambda x, mask: None)(output) for output in model.outputs
            ]
            self.models[model] = _QuietModel(model.inputs, outputs)
        return self.models[model]

    def predict(self, inputs, output_ids, states=None):
        """To be defined by the subclass and decorated with ``wraps``.

        Given the inputs (arrays, one row per live sequence) and the ids so far
        [rows, steps], returns the scores of the next id [rows, vocab] (and the
        states, with ``use_states=True``).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define predict (decorated with AutoRegressiveDecoder.wraps)"
        )

    def beam_search(self, inputs, topk, states=None, temperature=1, min_ends=1):
        """The best sequence found by beam search with ``topk`` beams.

        Args:
            inputs: the model inputs of one example (a list of 1-D sequences).
            topk: beam size.
            states: initial states passed to ``predict``.
            temperature: applied to the predicted distribution.
            min_ends: a sequence ends at its ``min_ends``-th ``end_id``.

        Returns:
            the ids (1-D), ``first_output_ids`` included; once the output has
            ``minlen`` ids, a finished sequence is returned as soon as it scores
            best, else the best after ``maxlen`` steps.
        """
        _check_int("topk", topk, 1)
        _check_temperature(temperature)
        _check_int("min_ends", min_ends, 1)
        if self.cached is not None:
            return self.cached.beam_search(
                inputs, topk, self.maxlen, self.end_id, self.start_id, self.minlen, temperature, min_ends
            )
        inputs = [np.array([i]) for i in inputs]
        output_ids, output_scores = self.first_output_ids, np.zeros(1)
        for step in range(self.maxlen):
            scores, states = self.predict(inputs, output_ids, states, temperature, "logits")
            if step == 0:
                topk = min(topk, scores.shape[1])  # no more beams than ids
                inputs = [np.repeat(i, topk, axis=0) for i in inputs]
            scores = output_scores.reshape((-1, 1)) + scores  # [beams, vocab] running totals
            flat = scores.argpartition(-topk, axis=None)[-topk:]
            beams, ids = flat // scores.shape[1], flat % scores.shape[1]
            output_ids = np.concatenate([output_ids[beams], ids.reshape((-1, 1))], 1)
            output_scores = np.take_along_axis(scores, flat, axis=None)
            ended = output_ids[:, -1] == self.end_id
            end_counts = (output_ids == self.end_id).sum(1)
            if output_ids.shape[1] < self.minlen:
                continue
            best = output_scores.argmax()
            if ended[best] and end_counts[best] >= min_ends:
                return output_ids[best]
            live = ~ended | (end_counts < min_ends)
            if not live.all():  # drop the finished beams that are not best
                inputs = [i[live] for i in inputs]
                output_ids, output_scores = output_ids[live], output_scores[live]
                topk = live.sum()
        return output_ids[output_scores.argmax()]

    def random_sample(self, inputs, n, topk=None, topp=None, states=None, temperature=1, min_ends=1):
        """``n`` sequences sampled from the model.

        Args:
            inputs: the model inputs of one example (a list of 1-D sequences).
            n: how many sequences.
            topk: sample each step among the ``topk`` most likely ids only.
            topp: ... among the most likely ids whose probabilities first reach
                ``topp`` in total (nucleus sampling; after ``topk`` if both).
            states, temperature, min_ends: as for ``beam_search``.

        Returns:
            a list of ``n`` id arrays (finished ones first, in the order they
            ended; the unfinished after ``maxlen`` steps last).
        """
        _check_int("n", n, 1)
        if topk is not None:
            _check_int("topk", topk, 1)
        if topp is not None and not (isinstance(topp, numbers.Real) and 0 < topp <= 1):
            raise ValueError(f"random_sample: topp must be in (0, 1] (or None), got {topp!r}")
        _check_temperature(temperature)
        _check_int("min_ends", min_ends, 1)
        if self.cached is not None:
            return self.cached.random_sample(
                inputs, n, self.maxlen, self.end_id, topk, topp, self.start_id, self.minlen, temperature, min_ends
            )
        inputs = [np.array([i]) for i in inputs]
        output_ids = self.first_output_ids
        results = []
        for step in range(self.maxlen):
            probas, states = self.predict(inputs, output_ids, states, temperature, "probas")
            probas = probas / probas.sum(axis=1, keepdims=True)
            if step == 0:
                probas = np.repeat(probas, n, axis=0)
                inputs = [np.repeat(i, n, axis=0) for i in inputs]
                output_ids = np.repeat(output_ids, n, axis=0)
            sample_ids = _sample(probas, topk, topp)
            output_ids = np.concatenate([output_ids, sample_ids], 1)
            ended = output_ids[:, -1] == self.end_id
            end_counts = (output_ids == self.end_id).sum(1)
            if output_ids.shape[1] < self.minlen:
                continue
            finished = ended & (end_counts >= min_ends)
            if finished.any():
                results.extend(output_ids[finished])
                live = ~finished
                inputs = [i[live] for i in inputs]
                output_ids = output_ids[live]
                if len(output_ids) == 0:
                    break
        results.extend(output_ids)
        return results


def _sample(probas, topk=None, topp=None):
    """One id per row of ``probas`` [rows, vocab], drawn with np.random.choice: [rows, 1]."""
    candidates = []  # index maps back to vocabulary ids, innermost last
    if topk is not None:
        topk = min(topk, probas.shape[1])  # a topk beyond the vocabulary: every id
        top = probas.argpartition(-topk, axis=1)[:, -topk:]
        probas = np.take_along_axis(probas, top, axis=1)
        probas = probas / probas.sum(axis=1, keepdims=True)
        candidates.append(top)
    if topp is not None:
        order = probas.argsort(axis=1)[:, ::-1]
        probas = np.take_along_axis(probas, order, axis=1)
        reached = np.cumsum(probas, axis=1) >= topp
        beyond = np.roll(reached, 1, axis=1)  # past the first position that reaches topp
        beyond[:, 0] = False
        probas[beyond] = 0
        probas = probas / probas.sum(axis=1, keepdims=True)
        candidates.append(order)
    ids = np.array([[np.random.choice(len(p), p=p)] for p in probas])
    for mapping in reversed(candidates):
        ids = np.take_along_axis(mapping, ids, axis=1)
    return ids


def _quiet_model_class():
    import keras

    class QuietModel(keras.Model):
        """A functional model whose ``predict`` calls it batch by batch, eagerly and silently."""

        def predict(self, x, batch_size=None, verbose=0, **kwargs):
            if kwargs:  # steps, callbacks, ...: Keras's own predict
                return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
            if len(self.inputs) == 1 and not isinstance(x, (list, tuple, dict)):
                x = [x]  # a single-input model called with a bare array, as bert4keras scripts do
            rows = len(keras.tree.flatten(x)[0])
            size = batch_size or 32
            chunks = [
                self(keras.tree.map_structure(lambda a, s=start: np.asarray(a)[s : s + size], x), training=False)
                for start in range(0, rows, size)
            ]
            return keras.tree.map_structure(
                lambda *parts: np.concatenate([keras.ops.convert_to_numpy(p) for p in parts]), *chunks
            )

    return QuietModel


def _QuietModel(inputs, outputs):
    global _QUIET_MODEL
    if _QUIET_MODEL is None:
        _QUIET_MODEL = _quiet_model_class()
    return _QUIET_MODEL(inputs, outputs)


_QUIET_MODEL = None
