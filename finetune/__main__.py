"""``python -m finetune TASK [options]``: CLUE fine-tuning from a checkout, the same
command as ``gau-keras finetune TASK`` (`gau_keras.training.finetune.runner`).

    python -m finetune tnews --data-dir ../shared/data/clue --out-dir runs
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)   # this checkout's gau_keras, installed or not

from gau_keras.training.finetune.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="python -m finetune"))
