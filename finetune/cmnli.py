"""CMNLI: natural language inference (entailment / neutral / contradiction) on the [CLS] of the pair.

    python -m finetune.cmnli --data-dir CLUE_DATA

Records labelled '-' (no annotator majority) are skipped and counted by the loader.
OCNLI has the same format: see `finetune.ocnli`.
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask


class NliTask(ClassificationTask):
    """Input: ``[CLS] premise [SEP] hypothesis [SEP]``; labels contradiction/entailment/neutral."""
    task_names = ("cmnli",)
    defaults = dict(epochs=2, batch_size=32, maxlen=128, lr=5e-5)

    def texts(self, example):
        return example.text_a, example.text_b


if __name__ == "__main__":
    sys.exit(run(NliTask))
