"""AFQMC (and BUSTM, same format): are two questions paraphrases? [CLS] of the pair.

    python -m finetune.afqmc --data-dir CLUE_DATA             # afqmc/ (full CLUE)
    python -m finetune.afqmc --task-name bustm --data-dir ../shared/data/clue

``--task-name`` picks the files (``<data-dir>/<task-name>/``) and the name of
the outputs (``bustm_predict.json`` ...); the model is the same.
"""
import sys

from gau_keras.training.finetune.classification import classification_task
from gau_keras.training.finetune.runner import run

AfqmcTask = classification_task("afqmc", __name__)

if __name__ == "__main__":
    sys.exit(run(AfqmcTask))
