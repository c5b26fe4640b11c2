"""Benchmark harness for kmodsyms: ``python -m bench`` (see bench/README.md).

Every row is measured against its baseline in the same run; the table of
medians and ratios is printed and written as JSON (default
``bench/results/latest.json``).
"""
