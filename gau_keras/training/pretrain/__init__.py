"""Masked-LM pretraining: corpus preparation (`prepare_corpus`, `build_vocab`), run configs
(`config`), the training loop (`trainer`, with `tf_backend` / `jax_backend`), its command
(`pretrain`), sweeps (`sweep`) and bundling a run as a model directory (`bundle_model`).
The scripts ``pretrain/*.py`` of the repository run these modules. Design notes: docs/pretraining.md.
"""
