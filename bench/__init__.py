"""Benchmarks and long campaigns, run as scripts (python bench/NAME.py) from the repository root."""
