"""Headless outputs: the reports ``tui-acc report`` prints (pair.py: two dumps; single.py: one dump
checked on its own; collectives.py: one run's collectives across its ranks; compat.py: a comparison in
msit's or msprobe's columns) and export.py, which writes any view's frame to a file.

Nothing here imports textual or rich. This file imports nothing: the TUI imports export.py before
its first frame, which comes before polars.
"""
