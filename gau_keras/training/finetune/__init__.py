"""CLUE fine-tuning: one runner (`finetune.runner`) and one module per task.

    python -m finetune.tnews --data-dir ../shared/data/clue --out-dir runs

Modules: tnews, iflytek, afqmc (also bustm), cmnli, ocnli (also ocnli_full),
wsc (also cluewsc), csl, cmrc2018, c3, chid, cluener. See finetune/README.md.
"""
