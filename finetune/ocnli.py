"""OCNLI: natural language inference, the cmnli model on OCNLI's files.

    python -m finetune.ocnli --data-dir ../shared/data/clue                          # FewCLUE ocnli
    python -m finetune.ocnli --task-name ocnli_full --data-dir ../shared/data/clue   # 10k train, full dev
"""
import sys

from finetune.cmnli import NliTask
from finetune.runner import run


class OcnliTask(NliTask):
    task_names = ("ocnli", "ocnli_full")
    defaults = dict(epochs=3, batch_size=32, maxlen=128, lr=5e-5)


if __name__ == "__main__":
    sys.exit(run(OcnliTask))
