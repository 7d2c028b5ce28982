"""TNEWS: news-title topic classification (15 classes) from the [CLS] vector.

    python -m finetune.tnews --data-dir ../shared/data/clue --out-dir runs
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask


class TnewsTask(ClassificationTask):
    """Input: ``[CLS] title [SEP]``; label: the tnews code ("100".."116")."""
    task_names = ("tnews",)
    defaults = dict(epochs=3, batch_size=32, maxlen=64, lr=5e-5)

    def texts(self, example):
        return example.text, None


if __name__ == "__main__":
    sys.exit(run(TnewsTask))
