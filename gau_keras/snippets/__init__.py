"""bert4keras's ``snippets`` with its names, signatures and behaviour:
``from bert4keras.snippets import X`` becomes ``from gau_keras.snippets import X``.

Modules, one concept each: ``text`` (string helpers, truncation, longest
common parts), ``arrays`` (to_array, sequence_padding, softmax), ``io``
(``open`` with a line index), ``functions`` (argument decorators),
``parallel`` (parallel_apply), ``data_generator`` (DataGenerator, Keras 3
notes in its docstring), ``decoders`` (ViterbiDecoder, AutoRegressiveDecoder),
``serving`` (WebServing). ``uniout`` is a no-op module, as on Python 3.

Importing this package does not import TensorFlow or Keras; the few parts that
need them (``to_dataset``, ``last_token``, ``forfit`` under ``fit``) import them
when used.
"""

from gau_keras import uniout
from gau_keras.snippets.arrays import orthogonally_resize, sequence_padding, softmax, to_array
from gau_keras.snippets.data_generator import DataGenerator
from gau_keras.snippets.decoders import AutoRegressiveDecoder, ViterbiDecoder
from gau_keras.snippets.functions import delete_arguments, insert_arguments
from gau_keras.snippets.io import open
from gau_keras.snippets.parallel import parallel_apply, parallel_apply_generator
from gau_keras.snippets.serving import WebServing
from gau_keras.snippets.text import (
    basestring,
    convert_to_str,
    convert_to_unicode,
    is_one_of,
    is_py2,
    is_string,
    longest_common_subsequence,
    longest_common_substring,
    lowercase_and_normalize,
    string_matching,
    strQ2B,
    text_segmentate,
    truncate_sequences,
)

__all__ = [
    "AutoRegressiveDecoder",
    "DataGenerator",
    "ViterbiDecoder",
    "WebServing",
    "basestring",
    "convert_to_str",
    "convert_to_unicode",
    "delete_arguments",
    "insert_arguments",
    "is_one_of",
    "is_py2",
    "is_string",
    "longest_common_subsequence",
    "longest_common_substring",
    "lowercase_and_normalize",
    "open",
    "orthogonally_resize",
    "parallel_apply",
    "parallel_apply_generator",
    "sequence_padding",
    "softmax",
    "strQ2B",
    "string_matching",
    "text_segmentate",
    "to_array",
    "truncate_sequences",
    "uniout",
]
