"""Benchmark suite for ``di``: every operator against the native engine call.

Run ``python -m bench`` (or ``python bench/run.py``); ``--quick`` finishes in
under two minutes. Results are printed and written to ``bench/results.md``.
"""
