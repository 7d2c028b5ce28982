"""CMNLI: natural language inference (entailment / neutral / contradiction) on the [CLS] of the pair.

    python -m finetune.cmnli --data-dir CLUE_DATA

Records labelled '-' (no annotator majority) are skipped and counted by the loader.
OCNLI has the same format: see `finetune.ocnli`.
"""
import sys

from gau_keras.training.finetune.classification import classification_task
from gau_keras.training.finetune.runner import run

NliTask = classification_task("cmnli", __name__)

if __name__ == "__main__":
    sys.exit(run(NliTask))
