"""The apps on top of the library: pretraining (`gau_keras.training.pretrain`) and CLUE
fine-tuning (`gau_keras.training.finetune`), with the run directory both use
(`gau_keras.training.run_dir`: one run at a time, outputs written whole). The
top-level ``pretrain/`` and ``finetune/`` folders of the repository hold only
their script entry points and configs. Design notes: docs/architecture.md.
"""
