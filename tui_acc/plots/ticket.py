"""``report --plot DIR``: the error maps a bug ticket needs, as SVG files.

Which tensors: the first failing operator's failing outputs and its inputs (the contrast: inputs
that only round beside an output whose error sits in a few channels), then the analysed token's
logits; for two tensor files, that one pair. Each file is written whole or not at all and never
over a file that is there (``--force`` replaces), as the CSV export is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tui_acc import __version__, numbers
from tui_acc.dumps.model import DumpError
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.metrics.error_map import ErrorMap, error_map
from tui_acc.metrics.kernels import ShapeMismatch
from tui_acc.pairing import TensorPair
from tui_acc.plots.svg import error_map_svg
from tui_acc.reports.export import ExportError, write_atomically
from tui_acc.reports.pair import PairReport
from tui_acc.session import Comparison

MOST = 12  # pictures at most: an operator with many inputs (weights, caches) does not flood the folder


@dataclass
class Plots:
    """What ``--plot`` wrote, and what it could not (each a sentence naming the file)."""

    directory: Path
    written: list[tuple[Path, str]] = field(default_factory=list)  # the file, what it shows
    problems: list[str] = field(default_factory=list)
    left_out: int = 0  # tensors past MOST

    def as_dict(self) -> dict[str, Any]:
        """The report's ``plots`` object in ``--json``: the folder, each file written with what it
        shows (``where``), the problems, and how many tensors were left out."""
        return {
            "dir": str(self.directory),
            "written": [{"file": str(path), "where": where} for path, where in self.written],
            "problems": self.problems,
            "left_out": self.left_out,
        }

    def lines(self) -> list[str]:
        """The report's text: where the files went, one line each."""
        lines = [
            f"plots: {self.directory}"
            + (f" ({self.left_out} more tensors not drawn)" if self.left_out else "")
        ]
        lines += [f"  {path.name}: {where}" for path, where in self.written]
        if not self.written and not self.problems:
            lines.append("  nothing to draw: no failing operator, no logits")
        lines += [f"  error: {problem}" for problem in self.problems]
        return lines


def targets(cmp: Comparison, report: PairReport) -> list[tuple[str, TensorPair]]:
    """(what it is, pair) of every tensor to draw, in the order the files are written."""
    chosen: list[tuple[str, TensorPair]] = []
    op = report.first_failing_op
    if op:
        node = next((n for n in cmp.pairing.node_pairs(op["token"]) if n.golden == op["golden"]), None)
        for pair in node.tensors if node is not None else ():
            row = cmp.engine.cached_row(pair)
            failing = row is not None and row.get("passed") is False
            if pair.role != "output" or failing:
                chosen.append((f"first failing op, {'failing output' if failing else pair.role}", pair))
    token = report.analysed_token
    logits = cmp.pairing.logits_pair(token) if isinstance(token, int) else None
    if logits is not None and all(logits != pair for _, pair in chosen):
        chosen.append(("logits", logits))
    if not chosen and cmp.golden.format == cmp.test.format == "tensor":  # two files: the pair itself
        chosen = [("tensor", pair) for node in cmp.pairing.node_pairs(0) for pair in node.tensors]
    return chosen


def write_plots(cmp: Comparison, report: PairReport, directory: Path, overwrite: bool = False) -> Plots:
    """One SVG per target in ``directory`` (made if missing); problems are collected, not raised."""
    directory = directory.expanduser()
    plots = Plots(directory.resolve())
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        plots.problems.append(f"{directory}: cannot make the folder ({exc.strerror or exc})")
        return plots
    chosen = targets(cmp, report)
    plots.left_out = max(0, len(chosen) - MOST)
    for what, pair in chosen[:MOST]:
        path = directory / _file_name(pair)
        if path.exists() and not overwrite:  # said before the tensors are read
            plots.problems.append(f"{path}: already exists; not overwritten (--force replaces it)")
            continue
        try:
            with cmp.engine.held_pair(pair) as (golden, test):
                emap = error_map(golden, test)
        except (TensorLoadError, DumpError, ShapeMismatch) as exc:
            plots.problems.append(f"{pair.test.path}: {exc}")
            continue
        picture = error_map_svg(emap, _heading(cmp, what, pair, emap), _footer(cmp))
        try:
            written = write_atomically(path, overwrite, _writing(picture.encode()))
        except ExportError as exc:
            plots.problems.append(str(exc))
            continue
        plots.written.append((written, f"{what}, {emap.where()}"))
    return plots


def _writing(data: bytes) -> Callable[[IO[bytes]], int]:
    return lambda handle: handle.write(data)


def _file_name(pair: TensorPair) -> str:
    """``token3-model.layers.2.mlp.down_proj-output.svg``: what a reader of the folder looks for."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{pair.golden_node}-{pair.slot}").strip("_")
    return f"token{pair.token}-{safe}.svg"


def _heading(cmp: Comparison, what: str, pair: TensorPair, emap: ErrorMap) -> list[str]:
    partner = f" <-> {pair.test_node}" if pair.test_node != pair.golden_node else ""
    lines = [f"{pair.golden_node}{partner}  {pair.slot}  (token {pair.token}, {what})"]
    leading = list(emap.shape[:-1])
    rows = f"rows: {leading} flattened" if len(leading) > 1 else "rows: the first dimension"
    dtypes = f"golden {emap.golden_dtype}  test {emap.test_dtype}"
    lines.append(f"shape {list(emap.shape)}  {dtypes}  {rows}, channels: the last")
    row = cmp.engine.cached_row(pair)
    if row is not None and row.get("cosine") is not None:
        lines.append(
            f"cosine {numbers.cosine(row['cosine'])}  max abs err {numbers.number(row.get('max_abs_err'))}"
            f"  rel eucl {numbers.number(row.get('rel_euclidean'))}"
        )
    return lines


def _footer(cmp: Comparison) -> list[str]:
    return [
        f"tui-acc {__version__}",
        f"golden {cmp.golden.root.resolve()}",
        f"test   {cmp.test.root.resolve()}",
    ]
