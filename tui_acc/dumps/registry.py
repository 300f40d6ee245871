"""The dump readers, each registered by its own module with what it detects.

A reader says what it reads (``name``, ``marks``: both shown to the user), how to tell it from names
alone (``claims``) and how to index it (``read``). ``open_dump`` asks the readers in order of
``precedence`` and hands the root to the first that claims it; the message for a root none claims
lists what every reader reads. A tool's package imports its reader modules, so importing
``tui_acc.dumps`` registers every reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tui_acc.dumps.model import DumpError, DumpIndex


@dataclass(frozen=True)
class ReadOptions:
    """How the command line asks for a dump to be read; each reader takes what applies to it.

    Attributes:
        token_offset: ATB only: token = folder - offset, overriding MindIE's automatic alignment.
        rank: which rank folder to read when the dump holds several (default: the first, noted).
        follow_links: whether its files may lead out of it (symlinks, ATB ``data=``).
    """

    token_offset: int | None = None
    rank: int | None = None
    follow_links: bool = False


@dataclass(frozen=True)
class DumpReader:
    """One dump layout tui-acc reads.

    Attributes:
        name: what it is, as the user is told ("an msit torch dump").
        marks: what tells it, as the user is told ("model_tree.json, torch_tensors/ or ...").
        claims: whether a root carries its marks (cheap: names only, no file opened).
        read: the root indexed, or DumpError naming the path and the problem.
        precedence: readers are asked in increasing precedence, so that a layout whose marks another's
            contain is asked first. Readers of one precedence exclude each other: a root two of them
            claim is refused, naming both.
        pick: for a reader sharing its precedence, the folder to pass to read this layout alone.
        fallback: read a file that no reader claims (its ``read`` says which files it reads).
    """

    name: str
    marks: str
    claims: Callable[[Path], bool]
    read: Callable[[Path, ReadOptions], DumpIndex]
    precedence: int
    pick: str = ""
    fallback: bool = False

    @property
    def described(self) -> str:
        """Its name and marks, as the message for a root no reader claims lists them."""
        return f"{self.name} ({self.marks})"


_READERS: list[DumpReader] = []


def register(reader: DumpReader) -> DumpReader:
    """Make ``reader`` known to ``open_dump``; returns it."""
    _READERS.append(reader)
    return reader


def readers() -> list[DumpReader]:
    """Every registered reader, in the order they are asked (registration order within a precedence)."""
    return sorted(_READERS, key=lambda reader: reader.precedence)


def expected() -> str:
    """What tui-acc reads, for the message about a root no reader claims."""
    described = [reader.described for reader in readers()]
    return ", ".join(described[:-1]) + f", or {described[-1]}" if len(described) > 1 else "".join(described)


def reader_for(root: Path) -> DumpReader | None:
    """The reader that claims ``root``; None where none does (DumpError where two that exclude each
    other both do)."""
    asked = readers()
    for precedence in dict.fromkeys(reader.precedence for reader in asked):
        claiming = [r for r in asked if r.precedence == precedence and r.claims(root)]
        if len(claiming) > 1:
            names = " and ".join(reader.name for reader in claiming)
            picks = " or the ".join(reader.pick for reader in claiming)
            raise DumpError(f"{root}: holds both {names}; pass the {picks} folder of the one you mean")
        if claiming:
            return claiming[0]
    return None


def fallback_for(root: Path) -> DumpReader | None:
    """The reader that reads a file no reader claims (None for a folder, or where none is registered)."""
    if not root.is_file():
        return None
    return next((reader for reader in readers() if reader.fallback), None)
