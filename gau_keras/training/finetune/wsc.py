"""WSC (CLUEWSC2020): does the pronoun (span 2) refer to the noun phrase (span 1)?

    python -m finetune.wsc --task-name cluewsc --data-dir ../shared/data/clue
    python -m finetune.wsc --data-dir CLUE_DATA                         # wsc/ or cluewsc2020/

Span-aware input, as in the CLUE baselines: the two spans are marked inside
the text with special characters and the [CLS] vector of the marked text is
classified. Span 1 (the candidate referent) is wrapped in ``< … >`` and span 2
(the pronoun) in ``[ … ]``. The CLUE baseline wraps span 1 in ``_``, but ``_``
is not in the GAU-alpha vocab (it would become [UNK]); ``<``, ``>``, ``[`` and
``]`` are single-character tokens of that vocab (and of the bundled model's),
and none of them occurs in the CLUEWSC texts. So the encoder sees where the
spans are without new embeddings, and the two spans get different marks so
their roles differ. Example: ``<小明>对小红说[他]明天来`` (label: does "他"
mean "小明"?).
"""
import sys

from gau_keras.training.finetune.classification import SPAN1_MARKS, SPAN2_MARKS, classification_task, mark_spans  # noqa: F401  (re-exported)
from gau_keras.training.finetune.runner import run

WscTask = classification_task("wsc", __name__)

if __name__ == "__main__":
    sys.exit(run(WscTask))
