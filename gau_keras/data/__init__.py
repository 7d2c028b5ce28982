"""Data pipelines: whole-word MLM, TFRecords, CLUE loaders."""
