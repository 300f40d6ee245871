"""``report GOLDEN TEST --ray``: the real msprobe tensor-parallel run of tests/data/tp (a tiny Llama on 2
ranks in bfloat16, one-device float32 golden) with each rank folder on its own node of a Ray cluster on
this machine (``ray.cluster_utils.Cluster``: a head holding nothing, nodes a and b), against the local
``--gather`` of the same folders: the same token rows, operator rows, first failing token and culprit;
the bytes that crossed between nodes counted; a node lost mid-run (removed once its worker reaches a
gate the test holds: no sleep, no timing) naming the tensors it held as not compared, the rest
standing."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.cluster.pair_on_ray import open_pair_on_ray
from tui_acc.dumps.loading import load_side
from tui_acc.pairing import TensorPair
from tui_acc.reports.output import strict_json
from tui_acc.reports.pair import PairReport, build_report
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen

pytest.importorskip("ray")
from tests.unit.ray_cluster import cluster_of, hold_here, node_places, ours, removed_at_gate

NAME = "llama-tp2-msprobe"
LAYOUT = {"a": "rank0", "b": "rank1"}
# what differs by construction: the test's path (the nodes' folders) and the notes naming it
PLACES_SAID = ("test", "notes", "ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, dict[str, Any]]]:
    """A head that holds no rank folder (the driver's node) and two nodes a, b."""
    with cluster_of(LAYOUT) as made:
        yield made


@pytest.fixture(scope="module")
def tp(tp_case) -> Path:
    return tp_case(NAME)


def _spread(tp: Path, case: str, root: Path) -> dict[str, Path]:
    """Each node's own copy of its rank folder (``root/<node>/step0/rank*``)."""
    for node, rank in LAYOUT.items():
        shutil.copytree(tp / case / "step0" / rank, root / node / "step0" / rank)
    return {node: root / node for node in LAYOUT}


@functools.cache
def _local(tp: Path, case: str) -> PairReport:
    """The local ``--gather`` report of ``case``, made once for the file."""
    cmp = open_comparison(tp / "golden", tp / case, CompareOptions(cache=False, gather=True))
    report = build_report(cmp, all_tokens=True)
    _rows[id(report)] = [dict(row) for row in cmp.engine.tensors.rows()]
    return report


_rows: dict[int, list[dict[str, Any]]] = {}  # each local report's tensor rows


def _same(ray_body: dict[str, Any], local: PairReport, local_body: dict[str, Any] | None = None) -> None:
    """Every field of the two reports equal but those naming the test's folders, and each float within
    the reassociation of its float64 sums: a concatenated tensor's sums are its parts' sums added
    (``metrics/region_sums.py``), not one sweep over the whole. A sum of n terms reassociated moves by
    at most (n - 1) * 2**-53 * the sum of their magnitudes, which for every metric here is at most its
    largest tensor's element count N, times the largest value compared (the scale) or, for a ratio
    of sums (cosine, relative errors), times the ratio itself; a few roundings more for the
    quotients and square roots after: 8 N 2**-53."""
    rows = [r for r in _rows[id(local)] if not r.get("error")]
    numel = max(int(r["numel"]) for r in rows)
    scale = max(
        abs(float(r[k]))
        for r in rows
        for k in ("golden_max", "golden_min", "test_max", "test_min")
        if r[k] is not None
    )
    tolerance = 8 * numel * 2**-53
    local_body = local_body or local.body()
    for key in local_body.keys() - set(PLACES_SAID):
        _close(ray_body[key], local_body[key], tolerance, scale, key)


def _close(a: Any, b: Any, tolerance: float, scale: float, where: str) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _close(a[key], b[key], tolerance, scale, f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, tolerance, scale, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and a != b:
        assert math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance * scale), (where, a, b)
    else:
        assert a == b, (where, a, b)


@contextlib.contextmanager
def _opened_here() -> Iterator[list[str]]:
    """Every path this process (the head's driver) opens meanwhile (an audit hook: os.open, open,
    numpy's maps), whichever reader opens it."""
    global _opening
    if _opening is None:
        sys.addaudithook(_audit)  # once: a hook cannot be removed; it records only while a test asks
    _opening = []
    try:
        yield _opening
    finally:
        _opening = None


_opening: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _opening is not None and isinstance(args[0], str | bytes | os.PathLike):
        _opening.append(os.fsdecode(args[0]))


def test_the_report_is_the_local_gathers_row_for_row(cluster, tp, tmp_path: Path) -> None:
    """allreduce: rank 1's all-reduce left its peer out, the culprit found by a replay of the two
    ranks' call; each rank folder on its own node (HOST:PATH), the head holding none. The head opens
    no file of a node's folder: what it replays was brought from the nodes, counted."""
    case = "allreduce"
    _made, nodes = cluster
    local = _local(tp, case)
    lines: list[str] = []
    roots = _spread(tp, case, tmp_path)
    pair = open_pair_on_ray(tp / "golden", node_places(nodes, roots), None, progress=lines.append)
    try:
        with _opened_here() as opened:
            report = build_report(pair.comparison, all_tokens=True)
        culprit_rule = report.body()["first_failing_op"]["rule"]
        # the error map's and a plot's tensors: the gathered test fetched whole from its home, counted
        cmp = pair.comparison
        gathered = next(t for n in cmp.pairing.node_pairs(0) for t in n.tensors if len(t.test.parts) > 1)
        golden, fetched = cmp.engine.load_pair(gathered)
        read_here = load_side(gathered.test, golden, cmp.test.load_policy)  # the test's disk is shared
        pair.finish()
        said = pair.said()
    finally:
        pair.close()
    assert fetched.dtype == read_here.dtype and fetched.tobytes() == read_here.tobytes()
    assert said["fetched_tensors"] == 1 and said["bytes"]["fetched_to_head"] == fetched.nbytes
    assert [path for path in opened if any(Path(path).is_relative_to(r) for r in roots.values())] == []
    assert culprit_rule == "replay" and said["fetched_files"] > 0 and said["bytes"]["files_to_head"] > 0
    assert all(node["read"] > 0 for node in said["nodes"])
    assert said["bytes"]["read_on_nodes"] == sum(node["read"] for node in said["nodes"])
    _same(report.body(), local)
    tables = {"tokens": report.token_table.to_dicts(), "operators": report.node_table.to_dicts()}
    _same(tables, local, {"tokens": local.token_table.to_dicts(), "operators": local.node_table.to_dicts()})
    culprit = report.body()["first_failing_op"]
    assert culprit is not None and culprit["label"] == "local"
    assert report.exit_code == local.exit_code == 1
    assert [n["state"] for n in said["nodes"]] == ["done", "done"] and said["not_compared"] == []
    moved = said["bytes"]
    # the all-reduces' inputs (partial sums) summed node to node; what else differs sent as read
    assert said["rows_made"]["summed"] > 0 and moved["partial_sums"] > 0
    assert (
        moved["inputs"] > 0
        and moved["goldens"] > 0
        and moved["crossed"] == sum(moved[k] for k in ("partial_sums", "goldens", "inputs", "results"))
    )
    assert sum(line.startswith("node ") and ": done: " in line for line in lines) == 2
    assert "crossed between nodes" in lines[-1]


def test_report_ray_on_the_command_line(cluster, tp, capsys) -> None:
    """``report GOLDEN TEST --ray auto --json`` on ``column`` (rank 1's column-parallel shard wrong,
    found once the ranks' columns are concatenated: those rows made from the slices' sums), the
    same folder on every node (the test's nodes share this machine's disk): stdout one JSON object,
    the local report's row for row, with ``ray``; a line per node on stderr."""
    code = main(["report", str(tp / "golden"), str(tp / "column"), "--ray", "auto", "--json", "--all-tokens"])
    out, err = capsys.readouterr()
    body = json.loads("\n".join(ours(out)))
    local = _local(tp, "column")
    _same(body, local, json.loads(json.dumps(strict_json(local.body()))))
    assert code == 1 and body["ray"]["bytes"]["crossed"] > 0 and body["ray"]["rows_made"]["split"] > 0
    assert body["first_failing_op"]["label"] == "local"
    assert "Traceback" not in err and "crossed between nodes" in ours(err)[-1]


def test_a_node_lost_mid_run_names_what_it_held_and_the_rest_stand(cluster, tp, tmp_path: Path) -> None:
    """Node b (rank 1) is removed while its worker waits, at its first operator tensor of token 2 (the
    report computes every token's logits first), on a FIFO the test never opens: every token's row,
    made before, is the local run's; every row that needs rank 1's files from then on says it was not
    compared, naming the lost node; the report ends (exit 1), no traceback."""
    made, nodes = cluster
    pairing = open_comparison(tp / "golden", tp / "column", CompareOptions(cache=False)).pairing
    logits = {p.golden_node for t in pairing.tokens if (p := pairing.logits_pair(t)) is not None}
    victim = made.add_node(num_cpus=1)
    made.wait_for_nodes()
    roots = _spread(tp, "column", tmp_path / "nodes")
    lines: list[str] = []
    with removed_at_gate(made, victim, tmp_path) as (reached, release):
        pair = open_pair_on_ray(
            tp / "golden",
            node_places({"a": nodes["a"], "b": victim}, roots),
            None,
            progress=lines.append,
            before_compare=_gate(victim.node_id, logits, reached, release),
        )
        try:
            report = build_report(pair.comparison, all_tokens=True)
            pair.finish()
            said = pair.said()
        finally:
            pair.close()
    local = _local(tp, "column")
    # each token's logits row (its verdict and counts are its operators')
    logits_said = {
        *("token", "passed", "cosine", "kl", "max_abs_err", "rel_euclidean", "top1_logprob_gap"),
        *("golden_top1", "test_top1", "topk_overlap", "shape", "error"),
    }
    _same(
        {"tokens": [{k: v for k, v in r.items() if k in logits_said} for r in report.token_table.to_dicts()]},
        local,
        {"tokens": [{k: v for k, v in r.items() if k in logits_said} for r in local.token_table.to_dicts()]},
    )
    errors = report.body()["errors"]
    assert errors and all(
        victim.node_id[:8] in e["message"] and "not compared" in e["message"] for e in errors
    )
    assert report.exit_code == 1
    states = {n["node_id"]: n["state"] for n in said["nodes"]}
    assert states == {nodes["a"].node_id: "done", victim.node_id: "lost"}
    assert said["not_compared"] and any(" lost after " in line for line in lines)


def _gate(victim: str, logits: set[str], reached: str, release: str) -> Any:
    """Run on every node before it reads or computes a tensor: the victim, at its first tensor of token
    2 or later that is no token's logits, says so and waits."""

    def before_compare(node_id: str, pair: TensorPair) -> None:
        if node_id == victim and pair.token >= 2 and pair.golden_node not in logits:
            hold_here(reached, release)

    return before_compare


async def test_the_view_on_ray_reaches_the_same_culprit(cluster, tp, tmp_path: Path) -> None:
    """``tui-acc GOLDEN TEST --ray``: the view gets the Ray rows through the engine's reader, so ``f``
    twice (the first failing token, then its culprit) lands where the local report's culprit is; each
    screen has a line of the nodes, with the rows each has computed (refreshed every second)."""
    _made, nodes = cluster
    expected = _local(tp, "allreduce").body()["first_failing_op"]
    pair = open_pair_on_ray(tp / "golden", node_places(nodes, _spread(tp, "allreduce", tmp_path)), None)
    try:
        app = AccApp(pair.comparison, export_dir=tmp_path, nodes_said=pair.run.status)
        async with app.run_test(size=(200, 45)) as pilot:
            await settle(pilot)
            assert str(app.screen.query_one("#nodes-bar", Static).render()).startswith("nodes: ")
            await pilot.press("f")
            await settle(pilot)
            await pilot.press("f")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, OperatorScreen) and screen.token == expected["token"]
            table = screen.query_one("#ops", DataTable)
            row = screen._rows[str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)]
            assert (row["golden_node"], row["label"]) == (expected["golden"], "local")
            app.show_nodes()
            line = str(screen.query_one("#nodes-bar", Static).render())
            assert line == pair.run.status() and line.count(" working, ") == 2
            assert [int(n) for n in re.findall(r"(\d+) rows", line)] == pair.run.computed
            assert min(pair.run.computed) > 0
    finally:
        pair.close()
