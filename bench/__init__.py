"""Benchmark harness for generaldomo: ``python -m bench`` (see bench/README.md)."""
