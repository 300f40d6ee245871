"""Whether an array's memory is a file range mapped by tui_acc (``mapped.map_bytes``), for the tests
of what is mapped and what is read. Where the guard is not built, nothing is mapped."""

from __future__ import annotations

import numpy as np

from tui_acc.dumps.mapped import _guard

GUARD = _guard()
GUARDED = GUARD is not None  # the C extension is built: settled files are mapped


def is_mapped(values: np.ndarray) -> bool:
    base: object = values
    while base is not None:
        if GUARD is not None and isinstance(base, GUARD.Mapping):
            return True
        base = getattr(base, "base", None)
    return False
