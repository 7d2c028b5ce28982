"""The Keras callbacks of a fine-tuning run: a tqdm bar per epoch (`TqdmProgress`) and the dev
evaluation after each epoch that keeps the best weights (`DevEvaluation`)."""

import sys

import keras
from tqdm import tqdm

from gau_keras.training.run_dir import save_atomically


class TqdmProgress(keras.callbacks.Callback):
    """One tqdm bar per epoch with the running loss.

    Args:
        steps: batches per epoch.
        epochs: epochs of the run (the bar's title says which one runs).
    """

    def __init__(self, steps, epochs):
        super().__init__()
        self.steps, self.epochs, self.bar = steps, epochs, None

    def on_epoch_begin(self, epoch, logs=None):
        self.bar = tqdm(total=self.steps, desc=f"epoch {epoch + 1}/{self.epochs}", file=sys.stderr)

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(1)
        if logs and "loss" in logs:
            self.bar.set_postfix(loss=f"{float(logs['loss']):.4f}")

    def on_epoch_end(self, epoch, logs=None):
        self.bar.close()


class DevEvaluation(keras.callbacks.Callback):
    """Scores the dev set after each epoch; keeps the best weights; records the history.

    Args:
        evaluate: ``evaluate(model)`` -> ``{metric: score}`` on the dev set.
        metric: the key of ``evaluate``'s scores that picks the best epoch (higher is better).
        weights_path: where the best epoch's weights are written (atomically).
        on_record: ``on_record(callback)`` after each epoch (``history`` and ``best`` updated).
    """

    def __init__(self, evaluate, metric, weights_path, on_record):
        super().__init__()
        self.evaluate, self.metric = evaluate, metric
        self.weights_path, self.on_record = weights_path, on_record
        self.best, self.history = None, []

    def on_epoch_end(self, epoch, logs=None):
        scores = self.evaluate(self.model)
        loss = (logs or {}).get("loss")  # none with --epochs 0 (the starting point)
        record = {"epoch": epoch + 1, "train_loss": None if loss is None else float(loss), **scores}
        improved = self.best is None or scores[self.metric] > self.best[self.metric]
        if improved:
            self.best = record
            save_atomically(self.model.save_weights, self.weights_path)
        self.history.append(record)
        shown = ", ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, float))
        print(
            f"epoch {epoch + 1}: dev {shown}; best {self.metric}={self.best[self.metric]:.4f} "
            f"(epoch {self.best['epoch']}){' *' if improved else ''}",
            flush=True,
        )
        self.on_record(self)
