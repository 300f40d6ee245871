"""What a dump holds, as plain data: tokens -> nodes -> tensor file references.

Nothing here reads tensor data; an index is built from names and directory listings only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tui_acc.dumps.policy import LoadPolicy
from tui_acc.errors import TuiAccError

# "param" is a module parameter (a weight) recorded with the call, as msprobe does.
Role = Literal["input", "output", "param"]

# What kind of dump an index holds (DumpIndex.format): pairing, re-dump, replay and the reports choose
# by it. msprobe's graph mode is "msprobe" (the same records), its ATB probe "msprobe-atb" (the same
# operations as its statistic.csv); an msit torch dump of statistics only is "msit-stats".
Format = Literal[
    "tensor",
    "msit-torch",
    "msit-stats",
    "msit-atb",
    "msprobe",
    "msprobe-debug",
    "msprobe-atb",
    "sglang",
    "torchair-fx",
    "torchair-ge",
]
# TorchAir's graph mode: an FX dump (the FX graph run eagerly, the golden) and a GE dump (the graph run
# by the GE graph engine), each token one run of one compiled graph (DumpIndex.runs)
TORCHAIR_FORMATS: frozenset[Format] = frozenset({"torchair-fx", "torchair-ge"})
# ATB operation graphs: paired structurally against a torch dump, re-dumped by execution count
ATB_FORMATS: frozenset[Format] = frozenset({"msit-atb", "msprobe-atb"})
# msprobe's dumps: their records are named by API call (Functional.linear.3.forward), their
# scalars kept in dump.json
MSPROBE_FORMATS: frozenset[Format] = frozenset({"msprobe", "msprobe-debug", "msprobe-atb"})


_CALL_SUFFIX = re.compile(r"\.(forward|backward)\.\d+$")


def logical_name(name: str) -> str:
    """A node's name without a per-call index: msprobe's ``...Linear.forward.3`` -> ``...Linear.forward``.

    Names of other formats are returned unchanged. Used to find "the same module" at every token.
    """
    return _CALL_SUFFIX.sub(".forward", name) if name.endswith(tuple("0123456789")) else name


class DumpError(TuiAccError):
    """A dump root that cannot be used at all (the message names the path and the problem)."""


@dataclass(frozen=True)
class Problem:
    """A damaged or unexpected file: reported to the user, never silently dropped."""

    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        """The problem as ``--json`` gives it: ``{"file": path, "message": message}``."""
        return {"file": self.path, "message": self.message}


@dataclass(frozen=True)
class Stats:
    """What a statistics-only dump records of a tensor (values as written; None when absent)."""

    max: float | None
    min: float | None
    mean: float | None
    norm: float | None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    # msprobe summary_mode md5 (a CRC32, with the statistics) or xor (a checksum instead of them)
    checksum: str | None = None
    # msprobe task nan_check: whether the call produced a NaN (a record's flag, not a tensor's)
    is_nan: bool | None = None

    def comparable(self) -> bool:
        """Whether it records anything to compare (an NPU's NZ-format tensor has null statistics)."""
        numbers = (self.max, self.min, self.mean, self.norm)
        return any(v is not None for v in numbers) or self.checksum is not None or self.is_nan is not None


# How a gathered tensor's ranks are merged (TensorRef.merge; gather.py merges them): summed, concatenated
# along the dimension where the ranks together have the golden's size, or along the dimension the dump
# names (CONCAT + the dimension).
SUM, AUTO = "sum", "auto"
CONCAT = "cat:"


@dataclass(frozen=True, order=True)
class TensorRef:
    """One tensor of one node at one token.

    ``slot`` names it within the node and pairs golden with test (``input_0``, ``output``,
    ``output_1``, ``outtensor0``, ``input.0``). ``location`` is its file; for a statistics-only
    entry, ``stats`` holds the numbers and ``location`` the file they were read from. Locations are
    kept as strings: an index of 100,000 files would spend most of its time building Path objects.
    """

    slot: str
    role: Role
    location: str = field(compare=False)
    stats: Stats | None = field(default=None, compare=False)
    # gathered from several ranks: every rank's file, and how to merge them (SUM, AUTO, CONCAT + a dim)
    parts: tuple[Path, ...] = field(default=(), compare=False)
    merge: str = field(default="", compare=False)
    # a file holding several tensors (a GE dump file): which of them (``input.0``, ``output.1``)
    member: str = field(default="", compare=False)
    # the dtype the dumper's own record gives the file (msprobe's dump.json), as torch names it: a
    # file that holds another is named, not judged at the wrong precision (dumps/loading.py)
    declared: str = field(default="", compare=False)
    # the Max and Min the same record gives the file's values (msprobe's dump.json, where both are
    # finite numbers): a file holding other values (another tensor's file) is named, not compared
    recorded: tuple[float, float] | None = field(default=None, compare=False)
    # a gathered tensor's parts' own ``recorded``, in ``parts``' order: each rank's file is checked
    # against its rank's record (a rank whose dump.json is another rank's is named)
    part_records: tuple[tuple[float, float] | None, ...] = field(default=(), compare=False)

    @property
    def path(self) -> Path:
        """``location`` as a Path (built on each call; nothing is read or checked)."""
        return Path(self.location)

    @property
    def has_data(self) -> bool:
        """Whether ``location`` holds the tensor itself (False for a statistics-only entry)."""
        return self.stats is None


@dataclass(frozen=True)
class Order:
    """Where a dump's node order comes from, and whether it is the order the nodes ran in.

    Attributes:
        source: what the user is told ("file times", "model_tree.json", "data flow (...)").
        execution: whether it is execution order rather than a fallback: msit's model_tree.json
            (declaration order, where the file times were lost) and graph mode's file names (name
            order) are not, nor data flow that left some siblings in either.
    """

    source: str
    execution: bool


@dataclass
class Node:
    """A module (or operation) in the model tree."""

    name: str
    type: str
    parent: str | None
    depth: int
    children: list[str] = field(default_factory=list)

    def copy(self, children: list[str] | None = None) -> Node:
        """This node with a children list of its own (``children``, else a copy of this one's): the
        constructor, not ``dataclasses.replace`` (which reads the fields anew each call: 5 us, and a
        tree of 30,000 modules copies each)."""
        return Node(
            self.name,
            self.type,
            self.parent,
            self.depth,
            list(self.children if children is None else children),
        )


@dataclass
class NodeTree:
    """The module tree, children kept in execution order."""

    root: str
    nodes: dict[str, Node]

    def children(self, name: str) -> list[str]:
        """The names of ``name``'s children in execution order (the tree's own list: do not mutate it).

        Raises:
            KeyError: ``name`` is not in the tree.
        """
        return self.nodes[name].children

    def preorder(self, start: str | None = None) -> Iterator[Node]:
        """Nodes in execution order (a parent before its children)."""
        stack = [start or self.root]
        while stack:
            node = self.nodes[stack.pop()]
            yield node
            stack.extend(reversed(node.children))

    def is_ancestor(self, ancestor: str, name: str) -> bool:
        """Whether ``ancestor`` is above ``name`` in the tree (a node is not its own ancestor).

        Raises:
            KeyError: ``name`` is not in the tree.
        """
        parent = self.nodes[name].parent
        while parent is not None:
            if parent == ancestor:
                return True
            parent = self.nodes[parent].parent
        return False

    def copy(self) -> NodeTree:
        """A copy whose nodes (and their children lists) can grow without touching this tree."""
        return NodeTree(
            self.root,
            {name: node.copy() for name, node in self.nodes.items()},
        )

    def adopt(self, grown: NodeTree) -> None:
        """The nodes ``grown`` (a ``copy`` a later token grew) has and this tree has not, added
        copy-on-write: the UI may be walking this tree on another thread, so the node table is
        replaced whole, and a parent that gains a child is a new Node: a walk in progress sees the
        old tree or the new one."""
        new = [name for name in grown.nodes if name not in self.nodes]
        if not new:
            return
        nodes = dict(self.nodes)
        for name in new:
            nodes[name] = grown.nodes[name].copy()
        # each parent that gains children copied once, however many it gains (once per child is
        # quadratic in a module of thousands)
        gaining = {p for name in new if (p := grown.nodes[name].parent) is not None and p in self.nodes}
        for parent in gaining:
            nodes[parent] = nodes[parent].copy(grown.nodes[parent].children)
        self.nodes = nodes

    def leaf_chain_end(self) -> str:
        """The model's last module: follow the last child from the root down."""
        name = self.root
        while self.nodes[name].children:
            name = self.nodes[name].children[-1]
        return name


@dataclass
class DumpIndex:
    """Everything known about one dump root without loading tensor data."""

    root: Path
    data_dir: Path
    format: Format
    tree: NodeTree
    tokens: Mapping[int, dict[str, list[TensorRef]]]
    order_source: str  # what the user is told of the order (Order.source)
    order_is_execution: bool  # whether it is the order the nodes ran in (Order.execution)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    statistics_only: bool = False
    ranks: list[str] = field(default_factory=list)  # every rank folder found beside the one read
    rank: int | None = None  # which of them this index holds (None: single rank, or gathered)
    # parallel axes besides tensor parallelism the reader saw above 1 (SGLang's meta: "dp", "pp"): its
    # ranks are then not one model's shards, and are gathered only where asked
    other_parallel: list[str] = field(default_factory=list)
    # ATB: the execution count (token folder) each token was read from, for re-dump ranges (-er)
    exec_counts: Mapping[int, int] = field(default_factory=dict)
    # msprobe L1/mix: API records' names that stay the same from token to token (``stable_name``)
    stable: Mapping[str, str] = field(default_factory=dict)
    # records made between forward passes (``generate()``'s own calls): part of no token
    between_tokens: list[str] = field(default_factory=list)
    # the float dtypes its statistics name (msprobe lists them without loading a tensor)
    float_dtypes: frozenset[str] = frozenset()
    # the node holding the logits, where the reader can tell (else the last module with an output)
    logits_hint: str | None = None
    # where its files may lead (None: inside ``root``); every read of its data goes through it
    policy: LoadPolicy | None = None
    # gathered ranks that ran calls of their own (expert parallelism): each such call's rank, and its
    # name in that rank's records where the gathered index renamed it (dumps/rank_alignment.py)
    origins: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    # TorchAir: each token's graph and that graph's own step (dumps/torchair/runs.py)
    runs: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    # msprobe: its call tree is not construct.json as written (missing, unreadable, or cut where it
    # disagreed with dump.json), so its order is not the other side's (pairing/by_name.py)
    call_tree_doubted: bool = False
    # msprobe: its construct.json lost whole (missing, unreadable, or distrusted for a cycle): its
    # calls are flat, where the other side's tree may nest them (pairing/__init__.py)
    call_tree_lost: bool = False

    @property
    def load_policy(self) -> LoadPolicy:
        """Where this dump's files may lead: ``policy``, or inside ``root`` where the reader set none."""
        return self.policy or LoadPolicy.inside(self.root)

    def stable_name(self, name: str) -> str:
        """``name`` without what changes from token to token: the key for "the same operator"."""
        return self.stable.get(name) or logical_name(name)

    def tensors(self, token: int, node: str) -> list[TensorRef]:
        """The tensors ``node`` recorded at ``token``; empty where the token or the node has none.

        Where the reader lists tokens lazily (msit's torch and ATB dumps, msprobe's ATB probe), the
        first ask for a token lists its folder's files, once: not on the UI thread.
        """
        return self.tokens.get(token, {}).get(node, [])


def float_dtypes_of(refs: Iterable[TensorRef]) -> frozenset[str]:
    """The float dtypes statistics entries name (a statistics dump's run precision, read without
    loading a tensor)."""
    return frozenset(
        ref.stats.dtype
        for ref in refs
        if ref.stats is not None and ref.stats.dtype and "float" in ref.stats.dtype
    )


def rank_sort_key(name: str) -> tuple[int, ...]:
    """``npu2_1234`` before ``npu10_99``; ``rank3`` before ``rank12``."""
    return tuple(int(n) for n in re.findall(r"\d+", name)) or (0,)


def pick_rank(where: Path, found: list[Path], rank: int | None) -> tuple[Path, int | None, list[str]]:
    """The rank folder to read: the one asked for, or the first.

    Returns:
        The folder, its rank (None where ``where`` holds one), and the notes for the user (which rank
        was taken when none was asked for).
    """
    found = sorted(found, key=lambda p: rank_sort_key(p.name))
    if len(found) == 1:  # --rank is for the side that has ranks; a single-device golden stays whole
        return found[0], None, []
    names = ", ".join(p.name for p in found)
    if rank is None:
        said = (
            f"{where} holds {len(found)} ranks ({names}); comparing rank 0 (--rank R picks, --gather merges)"
        )
        return found[0], 0, [said]
    if not 0 <= rank < len(found):
        raise DumpError(f"{where}: --rank {rank} is out of range; it holds {len(found)} ranks ({names})")
    return found[rank], rank, []
