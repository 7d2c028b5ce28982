"""What a head kind defines for the shared runner (`gau_keras.training.finetune.runner`).

A task turns typed CLUE examples (`gau_keras.data.clue`) into model inputs,
builds its head on the pretrained encoder, turns model outputs back into one
prediction per example, scores them and renders them for the submission file.
"""

import abc
import collections
from typing import Any, NamedTuple, Tuple

import keras
import numpy as np

from gau_keras import losses, metrics
from gau_keras.data.clue import TASKS, get_task
from gau_keras.layers import heads


class Feature(NamedTuple):
    """One model input row.

    inputs: arrays for the model's inputs, unpadded (e.g. token_ids [L], segment_ids [L]).
    label: the training target (an int or an array); 0 where there is none (test data).
    example: index of the example it came from (an example may give several features).
    meta: what `Task.predict` needs to map outputs back (windows, offsets, ...).
    """

    inputs: Tuple[np.ndarray, ...]
    label: Any
    example: int = 0
    meta: Any = None


class Task(abc.ABC):
    """Base class of a head kind's task; subclasses fill in the methods below.

    Which tasks a class runs, and their command-line defaults, are the rows of
    `gau_keras.data.clue.TASKS` with its ``head`` (and ``form``, when set).

    Class attributes:
        head: the head kind (`gau_keras.data.clue.HEADS`).
        form: the input form it reads, None for any form of its head.
        metric: the key of `score`'s dict that selects the best epoch.
        with_mlm: build the encoder with its MLM head (``with_mlm='linear'``).
        dropout_rate: the head's dropout (the default of the runner's ``dropout``).
    """

    head = None
    form = None
    metric = "accuracy"
    with_mlm = False
    dropout_rate = 0.1

    def __init__(self, task_name, tokenizer, maxlen):
        self.spec = get_task(task_name)
        if not self.runs(self.spec):
            raise ValueError(f"task_name {task_name!r} is not one of {list(self.task_names())}")
        self.task_name = self.spec.name
        #: {reason: count} of training examples that gave no feature (counted by `features`)
        self.left_out = collections.Counter()
        self.tokenizer = tokenizer
        self.maxlen = maxlen

    @classmethod
    def runs(cls, spec):
        """Whether this class runs the task of `spec` (a `TaskSpec`)."""
        return spec.head == cls.head and cls.form in (None, spec.form)

    @classmethod
    def task_names(cls):
        """The names of the tasks this class runs, in `TASKS` order."""
        return tuple(name for name, spec in TASKS.items() if cls.runs(spec))

    @classmethod
    def add_arguments(cls, parser):
        """Options of the head's own (none by default): each flag's dest is a keyword of ``__init__``."""

    @abc.abstractmethod
    def features(self, example, training):
        """The `Feature`s of one example (``training``: the targets are needed)."""
        raise NotImplementedError

    @abc.abstractmethod
    def build_model(self, transformer):
        """The keras.Model to train, from the builder object of the pretrained model."""
        raise NotImplementedError

    def loss(self):
        return losses.sparse_logits_crossentropy()

    @abc.abstractmethod
    def predict(self, example, features, outputs):
        """The prediction for ``example`` from its features and their model outputs."""
        raise NotImplementedError

    def score(self, examples, predictions):
        """Dev metrics {name: value} of the predictions (one per example)."""
        return {"accuracy": metrics.accuracy([e.label for e in examples], predictions)}

    def submission(self, example, prediction):
        """The value `write_predictions` takes for this example."""
        return prediction


class ClassificationTask(Task):
    """[CLS] classification of one text or a text pair into the task's labels
    (`gau_keras.training.finetune.classification` has one subclass per input form)."""

    head = "classification"

    @abc.abstractmethod
    def texts(self, example):
        """(first text, second text or None) of an example."""
        raise NotImplementedError

    def features(self, example, training):
        first, second = self.texts(example)
        token_ids, segment_ids = self.tokenizer.encode(first, second, maxlen=self.maxlen)
        label = example.label if example.label is not None else 0
        return [Feature((np.array(token_ids, "int32"), np.array(segment_ids, "int32")), label)]

    def build_model(self, transformer):
        encoder = transformer.model
        logits = heads.classification_head(encoder.output, self.spec.num_labels, self.dropout_rate)
        return keras.Model(encoder.inputs, logits, name=f"{self.task_name}_classifier")

    def predict(self, example, features, outputs):
        return int(np.argmax(outputs[0]))
