"""A pretraining run's export copied into a model directory: ``gau_keras.training.pretrain.bundle_model`` as a script
(that module's docstring and ``--help`` say more).

    python3 pretrain/bundle_model.py --run-dir runs/gau_alpha_tiny --config pretrain/configs/tiny.json \
        --output gau_keras/pretrained/gau_alpha_tiny --overwrite
"""

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, CHECKOUT)  # this checkout's gau_keras, installed or not
# importing gau_keras sets this script's TensorFlow log level before TensorFlow loads (gau_keras.cli_env)

from gau_keras.training.pretrain.bundle_model import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
