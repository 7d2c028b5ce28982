"""AFQMC (and BUSTM, same format): are two questions paraphrases? [CLS] of the pair.

    python -m finetune.afqmc --data-dir CLUE_DATA             # afqmc/ (full CLUE)
    python -m finetune.afqmc --task-name bustm --data-dir ../shared/data/clue

``--task-name`` picks the files (``<data-dir>/<task-name>/``) and the name of
the outputs (``bustm_predict.json`` ...); the model is the same.
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask


class AfqmcTask(ClassificationTask):
    """Input: ``[CLS] sentence1 [SEP] sentence2 [SEP]``; label "0"/"1"."""
    task_names = ("afqmc", "bustm")
    defaults = dict(epochs=3, batch_size=32, maxlen=128, lr=5e-5)

    def texts(self, example):
        return example.text_a, example.text_b


if __name__ == "__main__":
    sys.exit(run(AfqmcTask))
