"""Checks of one dump without a golden run: what is wrong with a tensor on its own.

The dump is paired with itself (every tensor its own partner) so that the engine, the judge and
the screens a pair has serve one dump too; ``AnomalyEngine`` replaces the metrics' verdict with
this package's rules (``rules.py``): NaN, Inf, float16 overflow, outputs all zero, magnitude jumps.
"""
