"""tui-acc: find the first operator where a port of an LLM loses accuracy.

The headless engine is usable from a notebook or a CI job::

    from tui_acc import CompareOptions, open_comparison
    cmp = open_comparison("golden_dump", "test_dump")
    cmp.engine.first_failing_token()
    no_cache = open_comparison("golden_dump", "test_dump", CompareOptions(cache=False))
"""

from __future__ import annotations

__version__ = "0.2.0"

from tui_acc.session import CompareOptions, Comparison, open_comparison

__all__ = ["CompareOptions", "Comparison", "__version__", "open_comparison"]
