"""Word segmenters for whole-word masking: jieba (default) and Baidu's LAC.

    segmenter = get_segmenter("jieba")
    segmenter.segment(["我爱北京天安门"])      # [["我", "爱", "北京", "天安门"]]

Every segmenter returns, per text, its words in order; whitespace-only words
are dropped (they produce no tokens). This module never imports TensorFlow.

LAC runs its bundled "seg" model (``LAC/seg_model``) through
``paddle.inference``: the ``lac`` package's own wrapper imports
``paddle.fluid``, which recent paddle releases no longer have. paddle
segfaults when it is imported after TensorFlow, so by default the model runs in
``spawn``-ed worker processes that never import TensorFlow, and this process
never imports paddle. ``in_process=True`` is for processes that are already
TF-free (e.g. the corpus-preparation workers).
"""
import abc
import importlib.util
import logging
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from gau_keras import tf_free_children

LAC_INSTALL_HELP = (
    "LAC is not installed. Install it (optional extra) with:\n"
    "    pip install 'setuptools<81'\n"
    "    pip install --no-build-isolation lac\n"
    "    pip install 'paddlepaddle>=2.6'\n"
    "(the lac package pulls in a paddlepaddle release; paddlepaddle 3.x works)"
)


class Segmenter(abc.ABC):
    """``segment(texts) -> list of word lists``; also a context manager."""

    name = None

    @abc.abstractmethod
    def segment(self, texts):
        """Words of each text: ``list[str] -> list[list[str]]``."""

    def close(self):
        """Release resources (worker processes)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _drop_blank(words):
    return [word for word in words if word.strip()]


class JiebaSegmenter(Segmenter):
    """jieba's precise mode, with its own ``jieba.Tokenizer`` (no global state).

    Args:
        hmm: let jieba's HMM discover words missing from its dictionary.
        user_dict: optional path of a jieba user dictionary.
    """

    name = "jieba"

    def __init__(self, hmm=True, user_dict=None):
        import jieba

        jieba.setLogLevel(logging.WARNING)
        self.hmm = hmm
        self._tokenizer = jieba.Tokenizer()
        if user_dict is not None:
            self._tokenizer.load_userdict(user_dict)

    def segment(self, texts):
        return [_drop_blank(self._tokenizer.lcut(text, HMM=self.hmm)) for text in texts]


def lac_model_dir():
    """Folder of the installed LAC package's ``seg_model`` (without importing
    ``LAC``, whose ``__init__`` needs ``paddle.fluid``)."""
    lac_spec = importlib.util.find_spec("LAC")
    if lac_spec is None or importlib.util.find_spec("paddle") is None:
        raise ImportError(LAC_INSTALL_HELP)
    model_dir = os.path.join(lac_spec.submodule_search_locations[0], "seg_model")
    if not os.path.isdir(os.path.join(model_dir, "model")):
        raise ImportError(f"the LAC package has no model folder {model_dir}/model\n" + LAC_INSTALL_HELP)
    return model_dir


def _read_tsv_dict(path):
    """LAC's two-column ``a<TAB>b`` dictionaries as ``{a: b}``; other lines ignored."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 2:
                table[fields[0]] = fields[1]
    return table


class LACModel:
    """LAC's character-level segmentation model, run with ``paddle.inference``.

    Input convention (from the ``lac`` package): each character is replaced
    through ``conf/q2b.dic`` (full-width -> half-width etc.), mapped to its id
    in ``conf/word.dic`` (``OOV`` otherwise), and the texts of a batch are
    concatenated into one int64 ``[N, 1]`` tensor with a level-1 LoD of text
    offsets. The output is one tag id per character (``conf/tag.dic``: -B, -I,
    -E, -S); a word starts at each B or S tag.

    Imports paddle: only use it in a process that has not imported TensorFlow.
    """

    def __init__(self, model_dir=None, threads=1):
        if "tensorflow" in sys.modules:
            raise RuntimeError("LACModel: TensorFlow is imported in this process and paddle segfaults when "
                               "imported after it; use LACSegmenter(in_process=False), or run this process "
                               "with GAU_KERAS_TF_FREE=1 (then `import gau_keras` does not import TensorFlow)")
        import paddle.inference as paddle_inference

        model_dir = model_dir or lac_model_dir()
        conf = os.path.join(model_dir, "conf")
        self._char_ids = {char: int(i) for i, char in _read_tsv_dict(os.path.join(conf, "word.dic")).items()}
        self._oov_id = self._char_ids["OOV"]
        self._q2b = _read_tsv_dict(os.path.join(conf, "q2b.dic"))
        self._tags = {int(i): tag for i, tag in _read_tsv_dict(os.path.join(conf, "tag.dic")).items()}
        config = paddle_inference.Config(os.path.join(model_dir, "model"))
        config.disable_glog_info()
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        self._predictor = paddle_inference.create_predictor(config)

    def _char_id(self, char):
        return self._char_ids.get(self._q2b.get(char, char), self._oov_id)

    def segment(self, texts):
        import numpy as np

        non_empty = [text for text in texts if text]
        if not non_empty:
            return [[] for _ in texts]
        ids = np.array([self._char_id(c) for text in non_empty for c in text], dtype="int64").reshape(-1, 1)
        offsets = np.cumsum([0] + [len(text) for text in non_empty]).tolist()
        handle = self._predictor.get_input_handle(self._predictor.get_input_names()[0])
        handle.reshape(list(ids.shape))
        handle.copy_from_cpu(ids)
        handle.set_lod([offsets])
        self._predictor.run()
        tags = self._predictor.get_output_handle(self._predictor.get_output_names()[0]).copy_to_cpu().ravel()
        words = iter(self._decode(text, tags[start:end])
                     for text, start, end in zip(non_empty, offsets[:-1], offsets[1:]))
        return [next(words) if text else [] for text in texts]

    def _decode(self, text, tag_ids):
        words = []
        for char, tag_id in zip(text, tag_ids):
            if not words or self._tags[int(tag_id)] in ("-B", "-S"):
                words.append(char)
            else:
                words[-1] += char
        return _drop_blank(words)


_WORKER_MODEL = None


def restore_default_sigterm():
    """For worker processes: paddle installs a SIGTERM handler that prints a
    C++ "FatalError" report and can leave a terminated pool worker running."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _lac_worker_init(model_dir, threads):
    global _WORKER_MODEL
    _WORKER_MODEL = LACModel(model_dir, threads)
    restore_default_sigterm()


def _lac_worker_segment(texts):
    return _WORKER_MODEL.segment(texts)


class LACSegmenter(Segmenter):
    """Baidu LAC segmentation (the segmenter GAU-α was pretrained with).

    Args:
        processes: number of ``spawn``-ed worker processes running the model.
        in_process: run paddle in this process instead (only if this process
            never imports TensorFlow).
        batch_size: texts per model call.
        threads: paddle CPU threads per process.
    """

    name = "lac"

    def __init__(self, processes=1, in_process=False, batch_size=128, threads=1):
        model_dir = lac_model_dir()  # fails early, in the parent, when LAC is missing
        self.batch_size = batch_size
        self._model = self._pool = None
        if in_process:
            self._model = LACModel(model_dir, threads)
        else:
            # workers are started on demand: they must see the TensorFlow-free mark
            # for as long as the pool lives
            self._tf_free = tf_free_children()
            self._tf_free.__enter__()
            self._pool = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"),
                                             initializer=_lac_worker_init, initargs=(model_dir, threads))

    def segment(self, texts):
        texts = list(texts)
        batches = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if self._model is not None:
            results = map(self._model.segment, batches)
        elif self._pool is not None:
            results = self._pool.map(_lac_worker_segment, batches)
        else:
            raise RuntimeError("LACSegmenter: segment() called after close()")
        return [words for batch in results for words in batch]

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            self._tf_free.__exit__(None, None, None)


SEGMENTERS = {"jieba": JiebaSegmenter, "lac": LACSegmenter}


def get_segmenter(name="jieba", **kwargs):
    """A segmenter by name (``'jieba'`` or ``'lac'``); kwargs go to its class."""
    if isinstance(name, Segmenter):
        return name
    try:
        cls = SEGMENTERS[name]
    except KeyError:
        raise ValueError(f"get_segmenter: unknown segmenter {name!r}; choose one of {sorted(SEGMENTERS)}") from None
    return cls(**kwargs)
