"""Reader for msprobe's ATB dumps: ``statistic.csv`` (docs/formats.md §2.7), statistics or tensors.

Columns (msprobe 26.2)::

    Device and PID,Execution Count,Op Name,Op Type,Op Id,Input/Output,Index,Dtype,Format,Shape,
    Max,Min,Mean,Norm,Tensor Path

A node is named as msprobe's compare names it: ``{id}_{name}`` per scope level, joined by ``/``.
The token is the execution count. ``Tensor Path`` is ``N/A`` in statistics mode; otherwise it
points to a ``.bin`` below ``atb_dump_data/``, found as msprobe finds it (the part after the four
folders that follow ``atb_dump_data``, below the csv's folder) when the absolute path is gone.

No real msprobe ATB dump can be made here (it needs an NPU); this reader follows msprobe's
source and is tested on generated files.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from tui_acc.dumps.model import DumpError, DumpIndex, Format, Node, NodeTree, Problem, Stats, TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT: Format = "msprobe-atb"
FILE = "statistic.csv"
COLUMNS = [
    "Device and PID",
    "Execution Count",
    "Op Name",
    "Op Type",
    "Op Id",
    "Input/Output",
    "Index",
    "Dtype",
    "Format",
    "Shape",
    "Max",
    "Min",
    "Mean",
    "Norm",
    "Tensor Path",
]
ROOT = "model"
# the probe writes Mki's dtype names (atb_probe.h:175-203); the verdicts know torch's
_DTYPES = {"bf16": "bfloat16", "float": "float32", "double": "float64"}


def claims(path: Path) -> bool:
    """Whether ``path`` is or holds a statistic.csv (cheap: names only, the file is not opened)."""
    return (path / FILE).is_file() or (path.name == FILE and path.is_file())


def read(path: Path, follow_links: bool = False) -> DumpIndex:
    """Index the statistic.csv at ``path`` (or in its folder), read whole now: each execution
    count a token, each operation a node; a bad row is a problem.

    Raises:
        DumpError: the file is unreadable or lacks msprobe's columns, holds several devices, or has
            no usable row.
    """
    csv_path = path if path.name == FILE else path / FILE
    policy = LoadPolicy.for_dump(path, follow_links)
    rows, problems = read_rows(csv_path, policy)
    devices = sorted({device for device, *_ in rows})
    if len(devices) > 1:
        raise DumpError(
            f"{csv_path}: holds several devices ({', '.join(devices)}); split them to compare one"
        )
    tree = NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "model", None, 0)})
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    statistics_only = True
    for _device, token, chain, op_type, ref in rows:
        statistics_only &= not ref.has_data
        add_chain(tree, chain, op_type)
        tokens.setdefault(token, {}).setdefault(chain[-1], []).append(ref)
    if not tokens:
        raise DumpError(f"{csv_path}: no usable rows")
    notes = ["msprobe ATB dump: statistics only (Max/Min/Mean/Norm)"] if statistics_only else []
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=csv_path.parent,
        format=FORMAT,
        tree=tree,
        tokens=dict(sorted(tokens.items())),
        order_source="op ids",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        statistics_only=statistics_only,
    )


Row = tuple[str, int, list[str], str, TensorRef]  # device, execution count, node chain, op type, tensor


def read_rows(csv_path: Path, policy: LoadPolicy) -> tuple[list[Row], list[Problem]]:
    """Every usable row of one ``statistic.csv``, and a Problem for each bad row; a bad file is a
    DumpError."""
    try:
        with policy.open(csv_path, "r", newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            raw_rows = list(reader)
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise DumpError(f"{csv_path}: unreadable ({exc})") from exc
    if header[: len(COLUMNS)] != COLUMNS:
        raise DumpError(
            f"{csv_path}: not msprobe's ATB statistic.csv (expected the columns {', '.join(COLUMNS)})"
        )
    rows: list[Row] = []
    problems: list[Problem] = []
    for number, row in enumerate(raw_rows, start=2):
        if len(row) != len(COLUMNS):
            problems.append(
                Problem(str(csv_path), f"line {number}: {len(row)} columns, expected {len(COLUMNS)}")
            )
            continue
        try:
            ref, token, chain, op_type = _row(row, csv_path)
        except ValueError as exc:
            problems.append(Problem(str(csv_path), f"line {number}: {exc}"))
            continue
        tensor_path = row[-1]
        if tensor_path not in ("N/A", "") and not ref.has_data:
            problems.append(Problem(tensor_path, "tensor file not found; compared by its statistics"))
        rows.append((row[0], token, chain, op_type, ref))
    return rows, problems


def _row(row: list[str], csv_path: Path) -> tuple[TensorRef, int, list[str], str]:
    """A row's tensor (its file where it is found, else its statistics), execution count, node chain
    and operation type; ValueError where the row cannot be read."""
    _, count, op_name, op_type, op_id, io, index, dtype, _fmt, shape, mx, mn, mean, norm, tensor_path = row
    names = op_name.split("/")
    ids = op_id.split("/") if len(op_id.split("/")) == len(names) else op_id.split("_")
    if len(ids) != len(names):
        raise ValueError(f"Op Id {op_id!r} does not match the scopes of Op Name {op_name!r}")
    scopes = [f"{i}_{n}" for i, n in zip(ids, names, strict=True)]
    chain = ["/".join(scopes[: k + 1]) for k in range(len(scopes))]
    # the probe writes "input"/"output" (atb_probe.cpp:858,863); earlier files were capitalised
    if io.lower() not in ("input", "output"):
        raise ValueError(f"Input/Output is {io!r}")
    role = "input" if io.lower() == "input" else "output"
    # Index is the file name between the prefix and the first "." (atb_probe.cpp:854-864): "0", or
    # "0_x" where the CANN version names the parameter (intensor0_x.bin); the slot is the number.
    number = re.match(r"\d+", index)
    if number is None:
        raise ValueError(f"Index {index!r} is not a tensor number")
    slot = f"{'intensor' if role == 'input' else 'outtensor'}{int(number.group())}"
    stats = Stats(
        _number(mx),
        _number(mn),
        _number(mean),
        _number(norm),
        _DTYPES.get(dtype, dtype) or None,
        tuple(int(d) for d in re.findall(r"\d+", shape)),
    )
    data = _tensor_file(tensor_path, csv_path)
    if data is not None:
        return TensorRef(slot, role, str(data)), int(count), chain, op_type  # type: ignore[arg-type]
    return TensorRef(slot, role, str(csv_path), stats=stats), int(count), chain, op_type  # type: ignore[arg-type]


def _tensor_file(tensor_path: str, csv_path: Path) -> Path | None:
    if tensor_path in ("N/A", ""):
        return None
    direct = Path(tensor_path)
    if direct.is_file():
        return direct
    marker = tensor_path.find("atb_dump_data")
    if marker >= 0:
        parts = tensor_path[marker:].split("/")
        if len(parts) > 4:
            moved = csv_path.parent.joinpath(*parts[4:])
            if moved.is_file():
                return moved
    return None


def add_chain(
    tree: NodeTree, chain: list[str], op_type: str, types: dict[str, str] | None = None, root: str = ROOT
) -> None:
    """Add a node and its scopes below ``root``; ``types`` gives types where known (else the names)."""
    parent = root
    for depth, name in enumerate(chain, start=1):
        if name not in tree.nodes:
            kind = (types or {}).get(name) or (
                op_type if name == chain[-1] else name.rsplit("/", 1)[-1].split("_", 1)[-1]
            )
            tree.nodes[name] = Node(name, kind, parent, depth)
            siblings = tree.nodes[parent].children
            siblings.append(name)
            siblings.sort(key=_id_of)
        parent = name


def _id_of(name: str) -> tuple[int, str]:
    head = name.rsplit("/", 1)[-1].split("_", 1)[0]
    return (int(head), name) if head.isdigit() else (1 << 30, name)


def _number(value: str) -> float | None:
    # "nan", "-nan", "inf" are a tensor's own NaN/Inf, printed by std::to_string (msprobe
    # ccsrc/atb_probe/utils/Statistics.h:85): kept, not taken for a missing statistic
    if value in ("N/A", "", "None"):
        return None
    if value in ("True", "False"):
        return float(value == "True")
    return float(value)


register(
    DumpReader(
        name="an msprobe ATB dump",
        marks=FILE,
        claims=claims,
        read=lambda root, options: read(root, follow_links=options.follow_links),
        precedence=10,  # first: statistic.csv names it, and the probe's execution folders hold one
    )
)
