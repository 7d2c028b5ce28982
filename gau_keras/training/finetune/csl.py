"""CSL: do the keywords belong to the paper abstract? [CLS] of (keywords, abstract).

    python -m finetune.csl --data-dir ../shared/data/clue
"""
import sys

from gau_keras.training.finetune.classification import (
    KEYWORD_SEPARATOR,  # noqa: F401  (re-exported)
    classification_task,
)
from gau_keras.training.finetune.runner import run

CslTask = classification_task("csl", __name__)

if __name__ == "__main__":
    sys.exit(run(CslTask))
