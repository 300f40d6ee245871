"""One run's ranks, opened side by side, and the collective operators each token holds.

Every rank is read by the reader of its layout (``open_dump(path, rank=R)``), so the check sees the
same tokens and node names a comparison does: msit ATB ``tensors/{device}_{pid}`` folders, msprobe
``step*/rank*`` folders. Only names are read here; tensors wait for ``check``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tui_acc.dumps import DumpError, DumpIndex, Format, Problem, TensorRef, open_dump
from tui_acc.dumps.sharding import Kind, kind_of

__all__ = ["Collective", "Kind", "RankSet", "kind_of", "merged_collectives", "open_ranks"]


@dataclass
class Collective:
    """One collective operator at one token: its node name, what it does, which ranks hold it."""

    token: int
    op: str
    kind: Kind
    ranks: list[int]  # the ranks whose dump holds it at this token


@dataclass
class RankSet:
    """Every rank of one run: index r is rank r, in device order (``None``: unreadable, see problems)."""

    path: str
    format: Format
    names: list[str]
    indexes: list[DumpIndex | None]
    unreadable: list[Problem] = field(default_factory=list)  # ranks that could not be opened
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """The number of ranks (unreadable ones included)."""
        return len(self.names)

    @property
    def problems(self) -> list[Problem]:
        """Every damaged or unexpected file found so far (ATB token folders are read when first
        checked, and say what they found then), and every rank that could not be opened."""
        found = list(self.unreadable)
        for index in self.indexes:
            if index is not None:
                found += index.problems
        return found

    def tokens(self) -> list[int]:
        """Every token any readable rank holds, in order."""
        return sorted({t for index in self.indexes if index is not None for t in index.tokens})

    def collectives(self, token: int) -> list[Collective]:
        """The collectives at ``token``, in the execution order of the first rank that holds each."""
        return merged_collectives(token, [self.rank_collectives(rank, token) for rank in range(self.size)])

    def rank_collectives(self, rank: int, token: int) -> list[tuple[str, Kind]] | None:
        """The collective operators rank ``rank`` recorded at ``token``, in its execution order, with
        their kinds; None where it has no such token (or could not be read)."""
        index = self.indexes[rank]
        if index is None or token not in index.tokens:
            return None
        found: list[tuple[str, Kind]] = []
        for name in index.tokens[token]:
            node = index.tree.nodes.get(name)
            kind = kind_of(node.type) if node is not None and not name.endswith(".backward") else None
            if kind is not None:
                found.append((name, kind))
        return found

    def refs(self, rank: int, token: int, op: str) -> list[TensorRef] | None:
        """The tensors rank ``rank`` recorded for ``op`` at ``token``; None where it has no such record."""
        index = self.indexes[rank]
        if index is None or token not in index.tokens:
            return None
        return index.tokens[token].get(op)

    def missing(self, rank: int, token: int) -> str:
        """Why rank ``rank`` has nothing at ``token`` (names its folder)."""
        index = self.indexes[rank]
        folder = self.names[rank]
        if index is None:
            return f"rank {rank} ({folder}) could not be read"
        if token not in index.tokens:
            return f"rank {rank} ({index.data_dir}) has no token {token}"
        return f"rank {rank} ({index.data_dir}) has no such operator at token {token}"


def merged_collectives(token: int, per_rank: Sequence[Sequence[tuple[str, Kind]] | None]) -> list[Collective]:
    """The collectives at ``token`` from each rank's own list (``RankSet.rank_collectives``, in rank
    order; None: the rank has no such token): each in the execution order of the first rank that
    holds it, with the ranks that hold it."""
    found: dict[str, Collective] = {}
    for rank, names in enumerate(per_rank):
        for name, kind in names or ():
            found.setdefault(name, Collective(token, name, kind, [])).ranks.append(rank)
    return list(found.values())


def open_ranks(
    path: str, follow_links: bool = False, opener: Callable[..., DumpIndex] = open_dump
) -> RankSet:
    """Open every rank of the run at ``path`` (the folder holding the rank folders, or the dump above).

    Raises DumpError when ``path`` is not a dump, or holds a single rank (nothing to check across).
    A rank that cannot be read is a problem naming its folder; the others are still checked.
    """
    first = opener(path, rank=0, follow_links=follow_links)
    names = list(first.ranks)
    if len(names) < 2:
        where = first.data_dir
        raise DumpError(
            f"{path}: holds one rank ({where}); the check across ranks needs the folder holding two or "
            "more rank folders (msit's tensors/, msprobe's step*)"
        )
    indexes: list[DumpIndex | None] = [first]
    unreadable: list[Problem] = []
    for rank in range(1, len(names)):
        try:
            index = opener(path, rank=rank, follow_links=follow_links)
        except DumpError as exc:
            unreadable.append(Problem(names[rank], f"rank {rank} not read: {exc}"))
            indexes.append(None)
            continue
        indexes.append(index)
    notes = [n for n in first.notes if "ranks" not in n or "holds" not in n]
    return RankSet(str(path), first.format, names, indexes, unreadable, notes)
