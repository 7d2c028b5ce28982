"""Named entities (CLUENER2020) with BERT + CRF, the bert4keras way: the encoder's last block
taken by its layer name (``Transformer-<n-1>-FeedForward-Norm``), a Dense of per-token tag
scores into a ``ConditionalRandomField`` (``sparse_loss``, ``sparse_accuracy``, a learning
rate multiplied for its transitions), and a ``ViterbiDecoder`` over the learnt ``trans`` whose
tag paths are mapped back to characters with ``tokenizer.rematch``; the entities found are
scored against the labelled ones (F1).

    BERT_DIR=chinese_L-12_H-768_A-12 python3 tests/bert4keras_scripts/crf_ner_bert.py

``BERT_DIR`` is a checkpoint folder laid out as Google's (bert_config.json, bert_model.ckpt,
vocab.txt). ``main()`` returns the evaluated loss before and after training, the transition
matrix, each dev text with its tag path and entities, the dev F1 and the tagger.
"""

import json
import os

import numpy as np
from keras.layers import Dense
from prologue import checkpoint_folder, data_dir, json_rows

from gau_keras.backend import K, keras
from gau_keras.layers import ConditionalRandomField
from gau_keras.models import build_transformer_model
from gau_keras.optimizers import Adam
from gau_keras.snippets import DataGenerator, ViterbiDecoder, sequence_padding, to_array
from gau_keras.tokenizers import Tokenizer

config_path, checkpoint_path, dict_path = checkpoint_folder("BERT_DIR")
maxlen = 64
batch_size = 8
learning_rate = 2e-5
crf_lr_multiplier = 1000  # the transitions learn at 1000x the encoder's rate
required_files = [os.path.join(data_dir, "clue", "cluener", name) for name in ("train.json", "dev.json")]
categories = ["address", "book", "company", "game", "government", "movie", "name", "organization", "position", "scene"]
# tag 0 is O; category c has B = 2c + 1 and I = 2c + 2
num_labels = len(categories) * 2 + 1

tokenizer = Tokenizer(dict_path, do_lower_case=True)


def load_data(filename, limit):
    """[(text, [(start, end, category), ...])] with inclusive character offsets."""
    D = []
    for row in json_rows(filename, limit):
        entities = []
        for category, names in row["label"].items():
            for spans in names.values():
                entities.extend((start, end, category) for start, end in spans)
        D.append((row["text"], sorted(entities)))
    return D


class data_generator(DataGenerator):
    """([token ids, segment ids], tags [B, L]) batches."""

    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids, batch_labels = [], [], []
        for is_end, (text, entities) in self.sample(random):
            tokens = tokenizer.tokenize(text, maxlen=maxlen)
            mapping = tokenizer.rematch(text, tokens)
            start_mapping = {chars[0]: i for i, chars in enumerate(mapping) if chars}
            end_mapping = {chars[-1]: i for i, chars in enumerate(mapping) if chars}
            labels = np.zeros(len(tokens), dtype=int)
            for start, end, category in entities:
                if start in start_mapping and end in end_mapping:
                    start, end = start_mapping[start], end_mapping[end]
                    labels[start] = categories.index(category) * 2 + 1
                    labels[start + 1 : end + 1] = categories.index(category) * 2 + 2
            batch_token_ids.append(tokenizer.tokens_to_ids(tokens))
            batch_segment_ids.append([0] * len(tokens))
            batch_labels.append(labels)
            if len(batch_token_ids) == self.batch_size or is_end:
                batch_token_ids = sequence_padding(batch_token_ids)
                batch_segment_ids = sequence_padding(batch_segment_ids)
                yield [batch_token_ids, batch_segment_ids], sequence_padding(batch_labels)
                batch_token_ids, batch_segment_ids, batch_labels = [], [], []


class NamedEntityRecognizer(ViterbiDecoder):
    """The best tag path of a text under the model's scores and ``trans``, as character spans."""

    def recognize(self, model, text):
        tokens = tokenizer.tokenize(text, maxlen=maxlen)
        mapping = tokenizer.rematch(text, tokens)
        token_ids = tokenizer.tokens_to_ids(tokens)
        token_ids, segment_ids = to_array([token_ids], [[0] * len(token_ids)])
        nodes = model.predict([token_ids, segment_ids], verbose=0)[0]
        path = self.decode(nodes)
        entities, starting = [], False
        for i, label in enumerate(path):
            if label > 0 and label % 2 == 1 and mapping[i]:
                starting = True
                entities.append([[i], categories[(label - 1) // 2]])
            elif label > 0 and starting and mapping[i] and categories[(label - 2) // 2] == entities[-1][1]:
                entities[-1][0].append(i)
            else:
                starting = False
        spans = [(mapping[w[0]][0], mapping[w[-1]][-1], category) for w, category in entities]
        return path, spans


def f1_score(recognizer, model, data):
    """(f1, precision, recall) of the recognised (start, end, category) spans."""
    X, Y, Z = 1e-10, 1e-10, 1e-10
    for text, entities in data:
        found = set(recognizer.recognize(model, text)[1])
        truth = set(entities)
        X += len(found & truth)
        Y += len(found)
        Z += len(truth)
    return 2 * X / (Y + Z), X / Y, X / Z


def main(rows=32, dev_rows=8, epochs=1, learning_rate=learning_rate, **model_options):
    for path in required_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is absent: this script needs ../shared/data (or GAU_KERAS_DATA)")
    with open(config_path) as f:
        bert_layers = json.load(f)["num_hidden_layers"]
    train_generator = data_generator(load_data(required_files[0], rows), batch_size)
    valid_data = load_data(required_files[1], dev_rows)

    model = build_transformer_model(config_path, checkpoint_path, **model_options)
    output_layer = "Transformer-%s-FeedForward-Norm" % (bert_layers - 1)
    output = model.get_layer(output_layer).output
    output = Dense(num_labels)(output)
    CRF = ConditionalRandomField(lr_multiplier=crf_lr_multiplier)
    output = CRF(output)
    tagger = keras.models.Model(model.input, output)
    tagger.compile(loss=CRF.sparse_loss, optimizer=Adam(learning_rate), metrics=[CRF.sparse_accuracy])

    def evaluate():
        return tagger.evaluate(train_generator.forfit(random=False), steps=len(train_generator), verbose=0)[0]

    loss_before = evaluate()
    history = tagger.fit(train_generator.forfit(), steps_per_epoch=len(train_generator), epochs=epochs, verbose=0)
    loss_after = evaluate()

    trans = K.eval(CRF.trans)
    NER = NamedEntityRecognizer(trans=trans, starts=[0], ends=[0])
    decoded = [(text,) + NER.recognize(tagger, text) for text, _ in valid_data]
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "history": history.history,
        "trans": trans,
        "decoded": decoded,
        "f1": f1_score(NER, tagger, valid_data),
        "output_layer": output_layer,
        "tagger": tagger,
    }


if __name__ == "__main__":
    result = main()
    print(result["loss_before"], "->", result["loss_after"], "f1, precision, recall:", result["f1"])
    for text, _, spans in result["decoded"]:
        print(text, [(text[start : end + 1], category) for start, end, category in spans])
