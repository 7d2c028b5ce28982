"""Masked-LM pretraining: ``gau_keras.training.pretrain.pretrain`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/pretrain.py --config pretrain/configs/tiny.json
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)   # this checkout's gau_keras, installed or not

from gau_keras import flags  # noqa: E402
from gau_keras.training.pretrain.pretrain import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(flags.command_status(main))
