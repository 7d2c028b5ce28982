"""What a task module defines for the shared runner (`finetune.runner`).

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
from gau_keras.data.clue import get_task
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
    """Base class of a task module; subclasses fill in the methods below.

    Class attributes:
        task_names: the `gau_keras.data.clue` task names this module can run;
            the first is the default of ``--task-name``.
        metric: the key of `score`'s dict that selects the best epoch.
        defaults: default ``epochs, batch_size, maxlen, lr`` of the command line.
        budget: the small CPU protocol of ``finetune.compare``: overrides of
            ``defaults`` and other options (``max_train_examples``, ...).
        with_mlm: build the encoder with its MLM head (``with_mlm='linear'``).
    """
    task_names: Tuple[str, ...] = ()
    metric = "accuracy"
    defaults = dict(epochs=3, batch_size=16, maxlen=128, lr=5e-5)
    budget = {}
    with_mlm = False
    dropout_rate = 0.1

    def __init__(self, task_name, tokenizer, maxlen):
        if task_name not in self.task_names:
            raise ValueError(f"--task-name {task_name!r} is not one of {list(self.task_names)}")
        if maxlen < 8:
            raise ValueError(f"--maxlen must be at least 8, got {maxlen}")
        self.task_name = task_name
        #: {reason: count} of training examples that gave no feature (counted by `features`)
        self.left_out = collections.Counter()
        self.spec = get_task(task_name)
        self.tokenizer = tokenizer
        self.maxlen = maxlen

    @classmethod
    def add_arguments(cls, parser):
        """Task-specific command-line options (none by default)."""

    @classmethod
    def options(cls, args):
        """Constructor keywords taken from the parsed task-specific options."""
        return {}

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
    """[CLS] classification of one text or a text pair into the task's labels."""

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
