"""Benchmark scripts; each prints a table of ratios against a reference timed in the same run."""
