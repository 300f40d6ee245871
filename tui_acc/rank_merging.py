"""A test dump's ranks merged into one for a golden of one device (``--gather``, or unasked where the
ranks are one model's shards): which ranks, opened where, and how ranks that ran different calls are
matched first (``session.open_comparison`` asks; ``--ray`` merges ranks opened on their nodes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tui_acc.dumps import DumpError, DumpIndex, open_dump


def sharded(golden: DumpIndex, test: DumpIndex, rank: int | None) -> bool:
    """Whether the test's ranks are one model's shards to gather for this golden, unasked: several
    ranks against a golden of one, none picked, its operators those of a split model (a collective,
    a parallel linear: ``gather.parallel_kinds``), and no other parallel axis in them (data- or
    pipeline-parallel ranks ran other requests or other layers)."""
    from tui_acc.dumps.sharding import parallel_kinds

    if rank is not None or len(test.ranks) < 2 or len(golden.ranks) > 1 or test.other_parallel:
        return False
    return bool(parallel_kinds(test))


def gathered(
    path: str | Path, first: DumpIndex, token_offset: int | None, follow_links: bool, unasked: bool
) -> DumpIndex:
    """Every rank of the dump at ``path`` (``first``: its rank 0, as read) merged into one. Ranks that did
    not all run the same calls (an expert-parallel run: each rank its own experts) are put into one
    namespace first where their records tell which calls are the same (msprobe's:
    ``rank_alignment.py``); any other dump's such ranks are merged only where asked: gathered
    ``unasked``, ``first`` is returned, said in a note."""
    if len(first.ranks) < 2:
        raise DumpError(f"{path}: --gather needs a dump with several ranks; this one has one")
    others = [
        open_dump(path, token_offset=token_offset, rank=r, follow_links=follow_links)
        for r in range(1, len(first.ranks))
    ]
    return merge_ranks(path, first, others, unasked)


def merge_ranks(path: str | Path, first: DumpIndex, others: list[DumpIndex], unasked: bool) -> DumpIndex:
    """Rank 0 (``first``) and the other ranks (``others``, in rank order, opened here or on the nodes
    that hold them) merged into one, as ``gathered`` says."""
    from tui_acc.dumps.gather import gather
    from tui_acc.dumps.rank_alignment import NotAlignable, align_ranks, alignable

    if any(set(other.tree.nodes) != set(first.tree.nodes) for other in others):
        # msprobe numbers API calls per rank: where the ranks ran different calls, one name is another
        # call on each, so the calls are matched by what they are; ATB's names are places in the graph
        if alignable(first):
            held = with_data(first, others)
            try:
                if isinstance(held, str):
                    raise NotAlignable(held)
                aligned = align_ranks(held)
            except NotAlignable as exc:
                said = (
                    f"{path}: its ranks did not all run the same calls and are not merged ({exc}): "
                    "rank 0 is compared alone"
                )
                return replace(first, notes=[*first.notes, said])
            gathered = gather(aligned.ranks, aligned.origins, aligned.orders)
            return replace(gathered, notes=[*gathered.notes, *aligned.notes])
        if first.format in ("msprobe", "msprobe-debug"):  # nothing tells which calls are one call
            said = (
                f"{path}: its {len(first.ranks)} ranks did not all run the same calls and hold no "
                "module records to match them by (level L1, debug saves, experts numbered per rank): "
                "rank 0 is compared alone; dump at level mix to merge them"
            )
            return replace(first, notes=[*first.notes, said])
        if unasked:
            said = (
                f"{path}: its {len(first.ranks)} ranks did not all run the same operations: rank 0 is "
                "compared alone (--gather merges them, each rank's own operations taken whole)"
            )
            return replace(first, notes=[*first.notes, said])
    return gather([first, *others])


def with_data(first: DumpIndex, others: list[DumpIndex]) -> list[DumpIndex] | str:
    """Every rank kept at the tokens where every rank recorded tensors (a rank that recorded nothing
    at a token cannot be merged there: its own calls would be missing, not absent), each dropped token
    said in a note; or why nothing is left (a rank that recorded no tensor at all)."""
    ranks = [first, *others]
    held = [
        {t for t, records in index.tokens.items() if any(refs for refs in records.values())}
        for index in ranks
    ]
    common = set.intersection(*held)
    if not common:
        empty = next((r for r, tokens in enumerate(held) if not tokens), None)
        if empty is not None:
            return f"rank {empty} recorded no tensor"
        return "no token at which every rank recorded tensors"
    dropped = sorted(set.union(*held) - common)
    if not dropped:
        return ranks
    said = f"tokens {dropped} are not compared: some rank recorded no tensor there"
    return [
        replace(
            index, tokens={t: r for t, r in index.tokens.items() if t in common}, notes=[*index.notes, said]
        )
        for index in ranks
    ]
