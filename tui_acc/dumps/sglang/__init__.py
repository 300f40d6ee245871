"""SGLang's own dumper (``dump``) and the alignment of two runs' steps by their tokens (``align``)."""

from tui_acc.dumps.sglang import dump  # noqa: F401  (importing a reader registers it)
