"""CSL: do the keywords belong to the paper abstract? [CLS] of (keywords, abstract).

    python -m finetune.csl --data-dir ../shared/data/clue
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask

#: what joins the keywords into the first text
KEYWORD_SEPARATOR = "；"


class CslTask(ClassificationTask):
    """Input: ``[CLS] kw1；kw2；… [SEP] abstract [SEP]`` (the abstract is cut first); label "0"/"1"."""
    task_names = ("csl",)
    defaults = dict(epochs=3, batch_size=16, maxlen=256, lr=5e-5)

    def texts(self, example):
        return KEYWORD_SEPARATOR.join(example.keywords), example.abstract


if __name__ == "__main__":
    sys.exit(run(CslTask))
