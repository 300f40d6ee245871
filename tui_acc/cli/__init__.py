"""Command line: ``tui-acc GOLDEN TEST``, ``tui-acc report``, ``tui-acc demo``, ``tui-acc hunt``,
``tui-acc ranks``.

main.py parses (parser.py) and runs one command's module: compare.py (``open``, the default: the
TUI), report.py, check_ranks.py (``ranks``), hunt.py, demo.py; toml_settings.py reads tui-acc.toml
once for them all.
"""
