"""CLUE fine-tuning: one runner (`runner`), one `Task` class per head kind, and
the tasks of `gau_keras.data.clue.TASKS` that have a head (`tasks`).

    gau-keras finetune tnews --data-dir ../shared/data/clue --out-dir runs
    python -m finetune tnews --data-dir ../shared/data/clue --out-dir runs    # from a checkout

Head kinds: classification (tnews, iflytek, eprstmt, afqmc, bustm, cmnli, ocnli,
ocnli_full, csl, wsc, cluewsc), span (cmrc2018), multiple_choice (c3),
candidates (chid), global_pointer (cluener). See finetune/README.md.
"""
