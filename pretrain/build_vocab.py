"""A smaller vocab derived from a corpus: ``gau_keras.training.pretrain.build_vocab`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/build_vocab.py corpus.txt --base-vocab vocab.txt --output small_vocab.txt
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras.training.pretrain.build_vocab import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
