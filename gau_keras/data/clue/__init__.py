"""CLUE data: task specs, tolerant loaders into typed examples, submission writers.

    from gau_keras.data.clue import load_task, write_predictions, TASKS
    examples, stats = load_task("tnews", "dev", "../shared/data/clue")
    TASKS["tnews"].labels[examples[0].label]      # "115"
    write_predictions("tnews", [(e.id, 3) for e in examples], "out/tnews_predict.json")

No TensorFlow here: tokenisation and batching belong to the finetuning code.
"""

from gau_keras.data.clue.examples import (
    BLANK,
    OTHER_BLANK,
    Answer,
    ChoiceExample,
    ClozeExample,
    Entity,
    KeywordsExample,
    NERExample,
    PairExample,
    Span,
    SpanQAExample,
    TextExample,
    WSCExample,
)
from gau_keras.data.clue.readers import (
    DataFileError,
    EmptyTextWarning,
    LoadStats,
    MalformedRecordWarning,
    find_split_files,
    load_file,
    load_task,
)
from gau_keras.data.clue.submission import write_predictions
from gau_keras.data.clue.tasks import CLUENER_TYPES, HEADS, TASKS, TaskSpec, get_task

__all__ = [
    "BLANK",
    "OTHER_BLANK",
    "Answer",
    "ChoiceExample",
    "ClozeExample",
    "Entity",
    "KeywordsExample",
    "NERExample",
    "PairExample",
    "Span",
    "SpanQAExample",
    "TextExample",
    "WSCExample",
    "DataFileError",
    "EmptyTextWarning",
    "LoadStats",
    "MalformedRecordWarning",
    "find_split_files",
    "load_file",
    "load_task",
    "write_predictions",
    "CLUENER_TYPES",
    "HEADS",
    "TASKS",
    "TaskSpec",
    "get_task",
]
