"""What every script here starts with, as a bert4keras example's first lines: the model files
(the bundled GAU-alpha; ``checkpoint_folder`` for a BERT / ALBERT checkpoint), where the data is
(``$GAU_KERAS_DATA`` or ../shared/data) and a reader of CLUE's JSON-lines files.

The scripts import it as a sibling module (``from prologue import ...``): run as
``python3 tests/bert4keras_scripts/NAME.py`` their folder is on ``sys.path``, and
tests/bert4keras/test_scripts.py puts it there too.
"""

import json
import os

from gau_keras.pretrained import BUNDLED_DIR, model_files
from gau_keras.snippets import open

config_path, checkpoint_path, dict_path = model_files(BUNDLED_DIR)
data_dir = os.environ.get("GAU_KERAS_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))


def checkpoint_folder(variable):
    """(config_path, checkpoint_path, dict_path) in the folder named by the environment variable
    ``variable`` ('BERT_DIR', 'ALBERT_DIR'), laid out as Google's releases are (bert_config.json,
    bert_model.ckpt.*, vocab.txt): the scripts *_bert.py / *_albert.py build bert4keras's
    model='bert' / 'albert' from it (tests/bert4keras/test_scripts_bert.py writes tiny ones)."""
    folder = os.environ.get(variable, variable.lower())
    return tuple(os.path.join(folder, name) for name in ("bert_config.json", "bert_model.ckpt", "vocab.txt"))


def json_rows(path, limit=None):
    """The first ``limit`` rows (all when None) of a JSON-lines file, as dicts."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if len(rows) == limit:
                break
    return rows
