"""TNEWS: news-title topic classification (15 classes) from the [CLS] vector.

    python -m finetune.tnews --data-dir ../shared/data/clue --out-dir runs
"""
import sys

from gau_keras.training.finetune.classification import classification_task
from gau_keras.training.finetune.runner import run

TnewsTask = classification_task("tnews", __name__)

if __name__ == "__main__":
    sys.exit(run(TnewsTask))
