"""Benchmarks: each prints name, measured value, target, and the ratio to a side-by-side reference."""
