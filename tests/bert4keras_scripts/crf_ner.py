"""Named entities (CLUENER2020) as BIO sequence labelling the bert4keras way:
per-token Dense scores into a ConditionalRandomField (its ``sparse_loss`` and
``sparse_accuracy``), decoded with a ViterbiDecoder over the learnt ``trans``
and mapped back to characters with ``tokenizer.rematch``.

    python3 tests/bert4keras_scripts/crf_ner.py

``main()`` returns the evaluated loss before/after training, the transition
matrix, and per dev text the tag path and the recognised entities.

``model_options`` of ``main`` go to ``build_transformer_model`` (the test passes
``num_hidden_layers=2``: the first 2 of the bundled model's 6 layers, to keep it short).
"""

import os

from keras.layers import Dense
from prologue import checkpoint_path, config_path, data_dir, dict_path, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import ConditionalRandomField
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, ViterbiDecoder, sequence_padding, to_array
from gau_keras.tokenizers import Tokenizer

maxlen = 48
batch_size = 8
categories = ["address", "book", "company", "game", "government", "movie", "name", "organization", "position", "scene"]
num_tags = 2 * len(categories) + 1  # O, then B-/I- per category: B = 2c + 1, I = 2c + 2
required_files = [os.path.join(data_dir, "clue", "cluener", name) for name in ("train.json", "dev.json")]

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def read_entities(path, limit):
    """(text, [(start, end, category), ...]) with inclusive character offsets."""
    samples = []
    for row in json_rows(path, limit):
        spans = [
            (start, end, category)
            for category, found in row.get("label", {}).items()
            for places in found.values()
            for start, end in places
        ]
        samples.append((row["text"], sorted(spans)))
    return samples


def tag_ids(text, spans):
    """Token ids, segment ids and the BIO tag of every token of ``text``."""
    tokens = tokenizer.tokenize(text, maxlen=maxlen)
    char_to_token = {}
    for index, chars in enumerate(tokenizer.rematch(text, tokens)):
        for char in chars:
            char_to_token.setdefault(char, index)
    tags = [0] * len(tokens)
    for start, end, category in spans:
        if start in char_to_token and end in char_to_token:
            first, last = char_to_token[start], char_to_token[end]
            tags[first] = 2 * categories.index(category) + 1
            tags[first + 1 : last + 1] = [2 * categories.index(category) + 2] * (last - first)
    return tokenizer.tokens_to_ids(tokens), [0] * len(tokens), tags


class TaggedBatches(DataGenerator):
    def __iter__(self, random=False):
        rows = []
        for is_end, (text, spans) in self.sample(random):
            rows.append(tag_ids(text, spans))
            if is_end or len(rows) == self.batch_size:
                token_ids, segment_ids, tags = zip(*rows)
                yield [sequence_padding(token_ids), sequence_padding(segment_ids)], sequence_padding(tags)
                rows = []


class EntityRecognizer(ViterbiDecoder):
    """Viterbi path over the model's per-token scores, as character spans."""

    def recognize(self, model, text):
        tokens = tokenizer.tokenize(text, maxlen=maxlen)
        chars = tokenizer.rematch(text, tokens)
        token_ids, segment_ids = to_array([tokenizer.tokens_to_ids(tokens)], [[0] * len(tokens)])
        path = self.decode(model.predict([token_ids, segment_ids], verbose=0)[0])
        entities, open_entity = [], None
        for index, tag in enumerate(path):
            if tag % 2 == 1 and chars[index]:  # B-: a new entity starts here
                open_entity = [chars[index][0], chars[index][-1], categories[(tag - 1) // 2]]
                entities.append(open_entity)
            elif tag > 0 and open_entity is not None and chars[index] and categories[(tag - 2) // 2] == open_entity[2]:
                open_entity[1] = chars[index][-1]  # I- of the same category extends it
            else:
                open_entity = None
        return path, [(text[start : end + 1], category) for start, end, category in entities]


def main(rows=32, dev_rows=4, epochs=1, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    train = TaggedBatches(read_entities(required_files[0], rows), batch_size)
    model = build_transformer_model(config_path, checkpoint_path, model="gau_alpha", **model_options)
    scores = Dense(num_tags, kernel_initializer="he_normal")(model.output)
    crf = ConditionalRandomField(lr_multiplier=100)
    tagger = keras.models.Model(model.input, crf(scores))
    tagger.compile(loss=crf.sparse_loss, optimizer=Adam(1e-3), metrics=[crf.sparse_accuracy])

    loss_before = tagger.evaluate(train.forfit(random=False), steps=len(train), verbose=0)[0]
    history = tagger.fit(train.forfit(), steps_per_epoch=len(train), epochs=epochs, verbose=0)
    loss_after = tagger.evaluate(train.forfit(random=False), steps=len(train), verbose=0)[0]

    recognizer = EntityRecognizer(trans=K.eval(crf.trans), starts=[0], ends=[0])
    decoded = [(text,) + recognizer.recognize(tagger, text) for text, _ in read_entities(required_files[1], dev_rows)]
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "history": history.history,
        "trans": K.eval(crf.trans),
        "decoded": decoded,
    }


if __name__ == "__main__":
    result = main()
    print(result["loss_before"], "->", result["loss_after"])
    for text, _, entities in result["decoded"]:
        print(text, entities)
