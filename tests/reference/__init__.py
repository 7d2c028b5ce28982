"""Original-bert4keras reference harness (runs in a subprocess, see README.md)."""
