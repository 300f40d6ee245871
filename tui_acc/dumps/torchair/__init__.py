"""TorchAir's graph-mode dumps: GE dump files (ge_file.py)."""
