"""Typed CLUE examples: one frozen dataclass per input form.

Every example keeps the id of its record (as found in the file: int or str).
`label` is an index: into the task's label list for classification, into
`choices` for c3, into `candidates` for chid; it is None for unlabelled (test)
data. Character offsets are 0-based; entity `end` is inclusive, as in CLUENER.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple, Union

ExampleId = Union[int, str]

# The one blank a ClozeExample's content keeps, and what other blanks of the
# same passage (original CLUE chid) are replaced with: four characters wide,
# like the idiom that fills them.
BLANK = "#idiom#"
OTHER_BLANK = "____"


@dataclass(frozen=True)
class TextExample:
    """Single-text classification: tnews, iflytek, eprstmt."""

    id: ExampleId
    text: str
    label: Optional[int] = None


@dataclass(frozen=True)
class PairExample:
    """Sentence-pair classification: afqmc/bustm, cmnli/ocnli."""

    id: ExampleId
    text_a: str
    text_b: str
    label: Optional[int] = None


@dataclass(frozen=True)
class KeywordsExample:
    """csl: does the keyword list fit the abstract?"""

    id: ExampleId
    abstract: str
    keywords: Tuple[str, ...]
    label: Optional[int] = None


class Span(NamedTuple):
    """`text` found at `text_of_example[index:index + len(text)]`."""

    index: int
    text: str


@dataclass(frozen=True)
class WSCExample:
    """wsc/cluewsc: does the pronoun span2 refer to span1?"""

    id: ExampleId
    text: str
    span1: Span
    span2: Span
    label: Optional[int] = None


class Answer(NamedTuple):
    """A reference answer; `start` is None when the text is not a span of the context."""

    text: str
    start: Optional[int]


@dataclass(frozen=True)
class SpanQAExample:
    """cmrc2018: an answer span of `context`; `answers` is None for unlabelled data."""

    id: ExampleId
    context: str
    question: str
    answers: Optional[Tuple[Answer, ...]] = None


@dataclass(frozen=True)
class ChoiceExample:
    """c3: pick one of `choices` for `question` about the dialogue/passage `context`."""

    id: ExampleId
    context: Tuple[str, ...]
    question: str
    choices: Tuple[str, ...]
    label: Optional[int] = None


@dataclass(frozen=True)
class ClozeExample:
    """chid: which candidate idiom fills the one `BLANK` in `content`."""

    id: ExampleId
    content: str
    candidates: Tuple[str, ...]
    label: Optional[int] = None


class Entity(NamedTuple):
    """A CLUENER entity: text[start:end + 1] == text."""

    type: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class NERExample:
    """cluener: `entities` sorted by (start, end, type); None for unlabelled data."""

    id: ExampleId
    text: str
    entities: Optional[Tuple[Entity, ...]] = None
