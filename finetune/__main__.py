"""``python -m finetune TASK [options]``: CLUE fine-tuning from a checkout, the same
command as ``gau-keras finetune TASK`` (`gau_keras.training.finetune.runner`).

    python -m finetune tnews --data-dir ../shared/data/clue --out-dir runs
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras.training.finetune.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="python -m finetune"))
