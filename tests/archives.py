"""The test data's ``.tar.xz`` archives, unpacked: by the system's tar where it has one (the
sensitivity sweep's 74,000 files take 1.5 s there, 13 s through tarfile, which sets each file's
times and modes in Python), else by tarfile with its data filter. The archives are our own, written by
``scripts/``: either way they unpack to the same files, with their times kept."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path


def unpack(archive: Path, into: Path) -> None:
    """``archive``'s members written under ``into`` (made if missing)."""
    into.mkdir(parents=True, exist_ok=True)
    tar = shutil.which("tar")
    if tar is not None:
        done = subprocess.run(
            [tar, "-xJf", str(archive), "-C", str(into), "--no-same-owner"], capture_output=True, check=False
        )
        if done.returncode == 0:
            return  # a tar without xz support fails at once: tarfile below then does it all
    with tarfile.open(archive) as members:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
            members.extractall(into, filter="data")
        else:  # pragma: no cover - our own archives, on an older patch release
            members.extractall(into)
