"""TorchAir's graph-mode dumps: the GE dump (ge_dump.py, its files ge_file.py, its graph text
graph_text.py) and the FX dump (fx_dump.py), each token one run of a compiled graph (runs.py)."""

from tui_acc.dumps.torchair import fx_dump, ge_dump  # noqa: F401  (importing a reader registers it)
