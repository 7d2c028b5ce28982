"""CLUENER2020: fine-grained named entities (10 types), scored by entity-level P/R/F1.

    python -m finetune cluener --data-dir ../shared/data/clue --out-dir runs \
        --predict-split dev        # ../shared/data has no cluener test file

Head: GlobalPointer (`gau_keras.layers.GlobalPointer`), not a CRF. For each
entity type it scores every (start, end) token pair with a rotary-aware inner
product, trained with the multi-label cross-entropy of
`gau_keras.losses.global_pointer_crossentropy`; every span scoring > 0 is an
entity. Why not a CRF:

* the metric is entity-level, and GlobalPointer predicts exactly the scored
  objects (typed spans), where a CRF predicts per-character BIO tags whose
  errors (a broken I- run) cost whole entities;
* decoding is a threshold on [T, L, L] scores: no Viterbi, no transition
  matrix, no tag-scheme repairs, and it stays parallel on any device;
* nested or overlapping entities of different types are representable
  (a tagger gives each character one tag);
* Keras 3 has no maintained CRF layer (tensorflow-addons is end-of-life),
  so a CRF would be hand-written loss and decoding code.

Texts longer than ``--maxlen`` are cut; entities beyond the cut cannot be
found (CLUENER texts are at most 50 characters).
"""

import keras
import numpy as np

from gau_keras import flags, losses, metrics
from gau_keras.layers import heads
from gau_keras.training.finetune.task import Feature, Task


class ClueNerTask(Task):
    head = "global_pointer"
    metric = "f1"

    def __init__(self, task_name, tokenizer, maxlen, head_size=64):
        super().__init__(task_name, tokenizer, maxlen)
        self.head_size = head_size
        self.types = self.spec.labels

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument("--head-size", type=flags.positive_int, default=64, help="GlobalPointer q/k size per type")

    def features(self, example, training):
        """token ids [L], segment ids [L]; label [T, L, L] with 1 at (type, start token, end token);
        meta = the char mapping of tokens 1..L-2."""
        tokens = self.tokenizer.tokenize(example.text)[1:-1][: self.maxlen - 2]
        mapping = self.tokenizer.rematch(example.text, tokens)
        tokens = [self.tokenizer.token_start] + tokens + [self.tokenizer.token_end]
        token_ids = np.array(self.tokenizer.tokens_to_ids(tokens), "int32")
        label = np.zeros((len(self.types), len(tokens), len(tokens)), "int8")
        starts = {chars[0]: i for i, chars in enumerate(mapping, start=1) if chars}
        ends = {chars[-1]: i for i, chars in enumerate(mapping, start=1) if chars}
        for entity in example.entities or ():
            if entity.start in starts and entity.end in ends:
                label[self.types.index(entity.type), starts[entity.start], ends[entity.end]] = 1
        return [Feature((token_ids, np.zeros_like(token_ids)), label, meta=mapping)]

    def build_model(self, transformer):
        encoder = transformer.model
        logits = heads.global_pointer_head(encoder.output, encoder.inputs[0], len(self.types), self.head_size)
        return keras.Model(encoder.inputs, logits, name="cluener_global_pointer")

    def loss(self):
        return losses.global_pointer_crossentropy

    def predict(self, example, features, outputs):
        """Entities (type, start, end, text) with end inclusive, from the spans scoring > 0."""
        mapping, logits = features[0].meta, outputs[0]
        entities = []
        for t, i, j in zip(*np.nonzero(logits > 0)):
            if 1 <= i <= j <= len(mapping) and mapping[i - 1] and mapping[j - 1]:
                start, end = mapping[i - 1][0], mapping[j - 1][-1]
                entities.append((self.types[t], start, end, example.text[start : end + 1]))
        return sorted(set(entities), key=lambda e: (e[1], e[2], e[0]))

    def score(self, examples, predictions):
        scores = metrics.entity_scores([e.entities for e in examples], predictions)
        return {"precision": scores["precision"], "recall": scores["recall"], "f1": scores["f1"]}
