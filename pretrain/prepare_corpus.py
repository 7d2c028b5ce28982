"""Corpus -> whole-word-MLM TFRecord shards: ``gau_keras.training.pretrain.prepare_corpus`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/prepare_corpus.py corpus.txt --vocab vocab.txt --output-dir data/mlm
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras import flags  # noqa: E402
from gau_keras.training.pretrain.prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(flags.command_status(main))
