"""Masked-LM pretraining: ``gau_keras.training.pretrain.pretrain`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/pretrain.py --config pretrain/configs/tiny.json
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras import flags  # noqa: E402
from gau_keras.training.pretrain.pretrain import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(flags.command_status(main))
