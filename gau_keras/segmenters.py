"""Word segmenters for whole-word masking: jieba (default) and Baidu's LAC;
and ``LAC``, a drop-in for ``from LAC import LAC`` in processes that import
TensorFlow (the real lac package, run in a TensorFlow-free worker).

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
import json
import logging
import os
import signal
import subprocess
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
            raise RuntimeError(
                "LACModel: TensorFlow is imported in this process and paddle segfaults when "
                "imported after it; use LACSegmenter(in_process=False), or run this process "
                "with GAU_KERAS_TF_FREE=1 (then `import gau_keras` does not import TensorFlow)"
            )
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
        words = iter(
            self._decode(text, tags[start:end]) for text, start, end in zip(non_empty, offsets[:-1], offsets[1:])
        )
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
            self._pool = ProcessPoolExecutor(
                max_workers=processes,
                mp_context=get_context("spawn"),
                initializer=_lac_worker_init,
                initargs=(model_dir, threads),
            )

    def segment(self, texts):
        texts = list(texts)
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
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


# -- the real LAC, drop-in ------------------------------------------------------------------------
class _LoDTensor:
    """The part of paddle.fluid's ``PaddleTensor`` the lac package uses:
    ``.lod``, ``.shape`` and ``.data.int64_data()``."""

    def __init__(self, array, lod=None):
        self.array, self.lod, self.shape = array, lod or [], list(array.shape)
        self.data = self

    def int64_data(self):
        return self.array.ravel().tolist()


class _Predictor:
    """``create_paddle_predictor(config).run([tensors]) -> [tensors]`` on ``paddle.inference``."""

    def __init__(self, config):
        import paddle.inference as paddle_inference

        self._predictor = paddle_inference.create_predictor(config)

    def run(self, tensors):
        for name, tensor in zip(self._predictor.get_input_names(), tensors):
            handle = self._predictor.get_input_handle(name)
            handle.reshape(list(tensor.array.reshape(-1, 1).shape))
            handle.copy_from_cpu(tensor.array.reshape(-1, 1))
            handle.set_lod(tensor.lod)
        self._predictor.run()
        outputs = []
        for name in self._predictor.get_output_names():
            handle = self._predictor.get_output_handle(name)
            outputs.append(_LoDTensor(handle.copy_to_cpu(), [list(level) for level in handle.lod()]))
        return outputs


def install_fluid_shim():
    """Makes ``import paddle.fluid`` work on paddle >= 2.6 (which dropped it)
    with what the lac package needs for inference: ``PaddleTensor``,
    ``AnalysisConfig``, ``create_paddle_predictor``, places and an executor.
    Imports paddle: only in a TensorFlow-free process. Training through
    ``LAC.train`` needs the real fluid and is not covered."""
    import types

    import numpy as np
    import paddle
    import paddle.inference as paddle_inference

    try:
        import paddle.fluid  # noqa: F401

        return
    except ImportError:
        pass
    fluid = types.ModuleType("paddle.fluid")
    core = types.ModuleType("paddle.fluid.core")
    core.PaddleTensor = lambda data: _LoDTensor(np.asarray(data))
    core.AnalysisConfig = paddle_inference.Config
    core.create_paddle_predictor = _Predictor
    fluid.core = core
    fluid.CPUPlace, fluid.CUDAPlace = paddle.CPUPlace, paddle.CUDAPlace
    fluid.Executor = paddle.static.Executor
    fluid.is_compiled_with_cuda = paddle.is_compiled_with_cuda
    sys.modules["paddle.fluid"], sys.modules["paddle.fluid.core"] = fluid, core
    paddle.fluid = fluid


def serve_lac():
    """The worker process of ``LAC``: the real lac package, one JSON request
    per line on stdin (first ``[model_path, mode, use_cuda]``, then ``[method,
    args]``), one JSON reply per line on the original stdout (whatever paddle
    or lac print goes to stderr)."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(**message):
        replies.write(json.dumps(message, ensure_ascii=False) + "\n")
        replies.flush()

    try:
        if "tensorflow" in sys.modules:
            raise RuntimeError("TensorFlow is imported in the LAC worker; paddle would segfault")
        model_path, mode, use_cuda = json.loads(sys.stdin.readline())
        install_fluid_shim()
        from LAC import LAC as RealLAC

        lac = RealLAC(model_path=model_path, mode=mode, use_cuda=use_cuda)
        restore_default_sigterm()
    except Exception as e:  # the parent raises it, with this text
        reply(error=f"{type(e).__name__}: {e}")
        return
    reply(ok=None)
    for line in sys.stdin:
        method, args = json.loads(line)
        try:
            reply(ok=getattr(lac, method)(*args))
        except Exception as e:
            reply(error=f"{type(e).__name__}: {e}")


class LAC:
    """Drop-in for ``from LAC import LAC`` in a process that imported TensorFlow.

        lac = LAC(mode="seg")
        lac.run("百度是一家高科技公司")          # ['百度', '是', '一家', '高科技', '公司']
        lac.run(["我爱北京", "天安门"])          # [['我', '爱', '北京'], ['天安门']]
        LAC(mode="lac").run("我爱北京")          # [['我', '爱', '北京'], ['r', 'v', 'LOC']]

    The real lac package runs in a worker process (a fresh interpreter, so it
    never imports TensorFlow, whatever this process's script imports: paddle
    segfaults when imported after it); on paddle releases without
    ``paddle.fluid`` the worker first installs an inference-only stand-in
    (``install_fluid_shim``). Same arguments, ``run``, ``add_word`` and
    ``load_customization`` as the real class; results come back as lists
    (JSON); ``train`` is not available. ``close()`` (or ``with``) ends the worker.
    """

    def __init__(self, model_path=None, mode="lac", use_cuda=False):
        if mode not in ("lac", "seg", "rank"):
            raise ValueError(f"LAC: mode must be 'lac', 'seg' or 'rank', got {mode!r}")
        lac_model_dir()  # fails early, in this process, when LAC is missing
        self.mode = mode
        env = dict(os.environ, GAU_KERAS_TF_FREE="1", PYTHONIOENCODING="utf-8")
        self._worker = subprocess.Popen(
            [sys.executable, "-c", "from gau_keras.segmenters import serve_lac; serve_lac()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            encoding="utf-8",
        )
        self._request([model_path, mode, use_cuda])

    def _request(self, message):
        if self._worker is None:
            raise RuntimeError("LAC: the worker process was closed")
        try:
            self._worker.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
            self._worker.stdin.flush()
            line = self._worker.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self._worker.wait()
            self._worker = None
            raise RuntimeError(f"LAC: the worker process ended (exit {code}); its stderr says why")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"LAC worker: {answer['error']}")
        return answer["ok"]

    def run(self, texts):
        """Words of a text (``mode='seg'``), ``[words, tags]`` (``'lac'``), ``[words,
        tags, weights]`` (``'rank'``); a list of texts gives a list of those."""
        return self._request(["run", [texts]])

    def add_word(self, word, sep=None):
        return self._request(["add_word", [word, sep]])

    def load_customization(self, customization_file, sep=None):
        return self._request(["load_customization", [os.fspath(customization_file), sep]])

    def train(self, *args, **kwargs):
        raise NotImplementedError("LAC.train needs paddle.fluid's training API, which paddle >= 2.6 lacks")

    def close(self):
        worker, self._worker = getattr(self, "_worker", None), None
        if worker is not None:
            worker.stdin.close()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            worker.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        worker = getattr(self, "_worker", None)
        if worker is not None and worker.stdin is not None:
            try:
                worker.stdin.close()  # the worker's loop ends on end of input
            except (OSError, ValueError):
                pass


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
