"""IFLYTEK: app-description classification (119 classes) from the [CLS] vector.

    python -m finetune.iflytek --data-dir ../shared/data/clue --out-dir runs
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask


class IflytekTask(ClassificationTask):
    """Input: ``[CLS] description [SEP]`` (long descriptions are cut at --maxlen); label "0".."118"."""
    task_names = ("iflytek",)
    defaults = dict(epochs=3, batch_size=16, maxlen=256, lr=5e-5)

    def texts(self, example):
        return example.text, None


if __name__ == "__main__":
    sys.exit(run(IflytekTask))
