"""C3: multiple-choice reading comprehension over dialogues and passages.

    python -m finetune c3 --data-dir ../shared/data/clue --out-dir runs

Every choice is its own sequence ``[CLS] context [SEP] question choice [SEP]``
(the context is cut first when too long). The encoder runs on all choices of
a question; a Dense layer on each [CLS] vector gives one score per choice and
a softmax over the choices is trained with cross-entropy. Questions with
fewer choices than the batch's widest (C3 has 2 to 4) get all-padding rows
that are masked out (`gau_keras.layers.heads.ChoiceLogits`).
"""

import numpy as np

from gau_keras.layers import heads
from gau_keras.training.finetune.batching import pad_stack
from gau_keras.training.finetune.task import Feature, Task


class C3Task(Task):
    head = "multiple_choice"

    def features(self, example, training):
        context = "".join(example.context)
        rows = [
            self.tokenizer.encode(context, example.question + choice, maxlen=self.maxlen) for choice in example.choices
        ]
        token_ids = pad_stack([np.array(t, "int32") for t, _ in rows])  # [C, L]
        segment_ids = pad_stack([np.array(s, "int32") for _, s in rows])
        label = example.label if example.label is not None else 0
        return [Feature((token_ids, segment_ids), label)]

    def build_model(self, transformer):
        return heads.multiple_choice_model(transformer.model, self.dropout_rate, name="c3_choice")

    def predict(self, example, features, outputs):
        return int(np.argmax(outputs[0][: len(example.choices)]))
