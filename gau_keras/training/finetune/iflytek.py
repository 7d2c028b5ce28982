"""IFLYTEK: app-description classification (119 classes) from the [CLS] vector.

    python -m finetune.iflytek --data-dir ../shared/data/clue --out-dir runs
"""
import sys

from gau_keras.training.finetune.classification import classification_task
from gau_keras.training.finetune.runner import run

IflytekTask = classification_task("iflytek", __name__)

if __name__ == "__main__":
    sys.exit(run(IflytekTask))
