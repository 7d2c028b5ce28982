"""OCNLI: natural language inference, the cmnli model on OCNLI's files.

    python -m finetune.ocnli --data-dir ../shared/data/clue                          # FewCLUE ocnli
    python -m finetune.ocnli --task-name ocnli_full --data-dir ../shared/data/clue   # 10k train, full dev
"""
import sys

from gau_keras.training.finetune.classification import classification_task
from gau_keras.training.finetune.runner import run

OcnliTask = classification_task("ocnli", __name__)

if __name__ == "__main__":
    sys.exit(run(OcnliTask))
