"""ATB's execution folders as tokens: the numbered folders ATB's dump writes, one per execution of the
model, mapped to tokens from their numbers and the model topologies (docs/formats.md §2).

msit's ATB dumps (``tensors/{device}_{pid}/{folder}/``) and msprobe's ATB probe
(``atb_dump_data/data/{device}_{pid}/{folder}/``) number them alike. MindIE (two model topologies,
prefill "encode" and "decode"): folder 0 is the warm-up, folder 1 holds token 0 (the encode model's
nodes) and token 1 (the decode model's nodes), folder k >= 2 is token k. With one topology, folder k
is token k. ``token_offset`` overrides: token = folder - offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tui_acc.dumps.model import NodeTree, TensorRef
from tui_acc.lazy import LazyMapping


@dataclass(frozen=True)
class Topology:
    """What the model/{pid}/*.json files say about top-level node ids."""

    models: list[tuple[str, int, int]]  # (model name, first top-level id, node count), in id order

    @property
    def mindie(self) -> bool:
        """Whether the dump has MindIE's two topologies (prefill "encode", then "decode")."""
        return len(self.models) > 1

    @property
    def decode_start(self) -> int | None:
        """The decode model's first top-level node id (MindIE); None with one topology."""
        return self.models[1][1] if self.mindie else None


FolderTokens = dict[int, dict[str, list[TensorRef]]]  # token -> node -> tensors, of one folder


def tokens_walked_lazily(
    folder_of: dict[int, int], tree: NodeTree, walk: Callable[[int, NodeTree], FolderTokens]
) -> tuple[LazyMapping[int, dict[str, list[TensorRef]]], FolderTokens]:
    """Tokens whose folders are walked when first asked for, and the first token's folder's.

    The first token's folder is walked now, into ``tree`` (it gives the tree); every other one when
    its token is first compared or opened, into a copy whose new nodes ``tree`` then adopts, so the
    first screen of 100,000 files needs only folder names. ``walk(folder, into)`` reads a folder.
    """
    walked: dict[int, FolderTokens] = {}
    first = folder_of[min(folder_of)]
    walked[first] = walk(first, tree)

    def load(token: int) -> dict[str, list[TensorRef]]:
        folder_id = folder_of[token]
        if folder_id not in walked:
            scratch = tree.copy()
            walked[folder_id] = walk(folder_id, scratch)
            tree.adopt(scratch)
        return walked[folder_id].get(token, {})

    return LazyMapping(sorted(folder_of), load), walked[first]


def token_folders(
    folder_ids: Iterable[int], topology: Topology, token_offset: int | None
) -> tuple[dict[int, int], list[str]]:
    """Which folder holds each token, from the folders' numbers alone, and the notes for the user
    (MindIE's warm-up folder is not compared)."""
    folder_of: dict[int, int] = {}
    notes: list[str] = []
    for folder_id in sorted(folder_ids):
        for token in folder_tokens(folder_id, topology, token_offset):
            folder_of[token] = folder_id
        if folder_id == 0 and topology.mindie and token_offset is None:
            notes.append("folder 0 (MindIE warm-up) is not compared")
    return folder_of, notes


def folder_tokens(folder_id: int, topology: Topology, token_offset: int | None) -> list[int]:
    """The tokens folder ``folder_id`` holds (see ``tokens_of_folder``), from its number alone."""
    if token_offset is not None:
        return [folder_id - token_offset] if folder_id >= token_offset else []
    if not topology.mindie:
        return [folder_id]
    if folder_id == 0:  # the warm-up
        return []
    return [0, 1] if folder_id == 1 else [folder_id]


def tokens_of_folder(
    folder_id: int,
    nodes: dict[str, list[TensorRef]],
    topology: Topology,
    token_offset: int | None,
) -> list[tuple[int, dict[str, list[TensorRef]]]]:
    """The tokens a walked folder holds, each with its nodes: none for MindIE's warm-up (folder 0)
    or a folder below ``token_offset``; folder 1 of MindIE split in two by node id (token 0 the
    encode model's top-level nodes, token 1 the decode model's)."""
    if token_offset is not None:
        token = folder_id - token_offset
        return [(token, nodes)] if token >= 0 else []
    if not topology.mindie:
        return [(folder_id, nodes)]
    if folder_id == 0:
        return []
    if folder_id > 1:
        return [(folder_id, nodes)]
    decode_start = topology.decode_start or 0

    def top_id(name: str) -> int:
        return int(name.split("/", 1)[0].split("_", 1)[0])

    encode = {n: refs for n, refs in nodes.items() if top_id(n) < decode_start}
    decode = {n: refs for n, refs in nodes.items() if top_id(n) >= decode_start}
    return [(0, encode), (1, decode)]
