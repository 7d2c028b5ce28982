"""Tiny pretraining runs for the tests: a corpus, its shards and run configs."""

import json

from gau_keras.training.pretrain import prepare_corpus

TEXTS = [
    "今天天气很好，我们去公园散步吧！",
    "机器学习是人工智能的一个分支。",
    "他说：这本书真好看。",
    "我爱北京天安门，天安门上太阳升。",
    "小明和小红一起去学校上课。",
    "这家餐厅的菜很好吃，服务也不错。",
]


def make_shards(root):
    """(vocab path, shard pattern, vocab size) of a tiny corpus prepared in ``root``."""
    chars = sorted(set("".join(TEXTS)))
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars) + "\n", encoding="utf-8")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(TEXTS * 8) + "\n", encoding="utf-8")
    summary = prepare_corpus.main(
        [
            str(corpus),
            "--vocab",
            str(vocab),
            "--output-dir",
            str(root / "mlm"),
            "--maxlen",
            "24",
            "--shards",
            "2",
            "--workers",
            "1",
            "--seed",
            "3",
        ]
    )
    assert summary["examples"] == 48
    return vocab, str(root / "mlm" / "shard-*.tfrecord"), len(chars) + 5


def write_config(tmp_path, shards, name="run", **train):
    """A run config of a 2-layer GAU-alpha on ``shards``; ``train`` overrides train.*; returns its path."""
    vocab, pattern, vocab_size = shards
    config = {
        "model": "gau_alpha",
        "vocab": str(vocab),
        "model_config": {
            "vocab_size": vocab_size,
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "intermediate_size": 24,
            "attention_key_size": 8,
            "hidden_act": "swish",
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
        },
        "data": {"train": pattern, "eval": pattern, "maxlen": 24, "batch_size": 4, "shuffle_buffer": 50},
        "optimizer": {"learning_rate": 5e-3, "gradient_accumulation_steps": 2, "schedule": {"0": 1, "10": 0.1}},
        "train": {
            "steps": 2,
            "save_every": 1,
            "log_every": 1,
            "eval_every": 0,
            "output_dir": str(tmp_path / name),
            "xla": False,
            **train,
        },
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def losses(tmp_path, name):
    """The training losses logged by run ``name``."""
    lines = (tmp_path / name / "log.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if "loss" in json.loads(line)]
