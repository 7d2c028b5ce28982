"""A learning-rate x effective-batch sweep of pretrain.py: ``gau_keras.training.pretrain.sweep`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/sweep.py --config pretrain/configs/tiny.json --out runs/sweep/gau \
        --learning-rates 3e-3,1e-2 --batch-sizes 32,128 --sequences 40960
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras.training.pretrain.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
