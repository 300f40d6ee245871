"""``tui-acc ranks DUMP --ray``: a real msprobe run's rank folders spread over the nodes of a Ray
cluster on this machine (``ray.cluster_utils.Cluster``: a head holding nothing and three nodes, each
reading only its own folder), checked with the same rows as a local run; the bytes that cross between
nodes bounded by the partial sums; a node lost mid-run (removed once its worker reaches a gate the test
holds: no sleep, no timing) naming its ranks as not compared while the others' rows stand."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.ranks_dumps import write_atb_run
from tui_acc.cli.main import main
from tui_acc.cluster.ray_check import open_on_ray
from tui_acc.collectives.check import RanksCheck, decide
from tui_acc.collectives.partial_sums import foldable
from tui_acc.collectives.rank_reading import RankReader
from tui_acc.collectives.rank_set import Collective, open_ranks
from tui_acc.reports.collectives import RanksReport, build_report

pytest.importorskip("ray")
from tests.unit.ray_cluster import cluster_of, hold_here, node_places, ours, removed_at_gate

LAYOUT = {"a": ("rank0", "rank1"), "b": ("rank2",), "c": ("rank3",)}  # three nodes' own folders


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, dict[str, Any]]]:
    """A head that holds no rank folder (the driver's node) and three nodes a, b, c."""
    with cluster_of(LAYOUT) as made:
        yield made


def _spread(case: Path, root: Path, layout: dict[str, tuple[str, ...]]) -> dict[str, Path]:
    """Each node's own copy of its rank folders (``root/<node>/step0/rank*``)."""
    roots = {}
    for name, ranks in layout.items():
        for rank in ranks:
            shutil.copytree(case / "step0" / rank, root / name / "step0" / rank)
        roots[name] = root / name
    return roots


def _spread_atb(tensors: Path, root: Path) -> dict[str, Path]:
    """The same for an msit ATB run's ``tensors/{device}_{pid}`` folders, device r as rank r."""
    roots = {}
    for name, ranks in LAYOUT.items():
        for rank in ranks:
            (folder,) = tensors.glob(f"{rank[4:]}_*")
            shutil.copytree(folder, root / name / "tensors" / folder.name)
        roots[name] = root / name / "tensors"
    return roots


def _local(case: Path) -> RanksReport:
    return build_report(RanksCheck(open_ranks(str(case / "step0"))))


@pytest.mark.parametrize("name", ["msprobe-tp4", "msprobe-tp2x2", "atb-wide"])
def test_the_rows_are_the_local_runs_row_for_row(cluster, ranks_case, tmp_path: Path, name: str) -> None:
    """atb-wide: tensors long enough for BLAS to split a dot product over its threads (one on each
    node, more on the head): the metrics are numpy's sums, the same bits everywhere."""
    _made, nodes = cluster
    if name == "atb-wide":
        tensors = write_atb_run(tmp_path / "run", 4, tokens=2, layers=2, fault=(0, 1, 3), shape=(64, 4096))
        roots, local = (
            _spread_atb(tensors, tmp_path / "nodes"),
            build_report(RanksCheck(open_ranks(str(tensors)))),
        )
    else:
        case = ranks_case(name)
        roots, local = _spread(case, tmp_path, LAYOUT), _local(case)
    lines: list[str] = []
    check = open_on_ray(node_places(nodes, roots), None, 2.0, progress=lines.append)
    try:
        report = build_report(check)
    finally:
        check.close()
    assert report.collectives == local.collectives  # every number, every verdict, in the same order
    assert (report.first_bad, report.failed, report.unjudged) == (
        local.first_bad,
        local.failed,
        local.unjudged,
    )
    assert report.ranks == local.ranks and report.exit_code == local.exit_code == 1
    assert report.ray is not None and report.ray["not_compared"] == []
    held = {node["node_id"]: (len(node["ranks"]), node["state"]) for node in report.ray["nodes"]}
    assert held == {nodes[n].node_id: (len(r), "done") for n, r in LAYOUT.items()}
    assert sum(" done: " in line for line in lines) == 3 and "crossed between nodes" in lines[-1]


def test_the_bytes_that_cross_are_no_more_than_the_partial_sums(cluster, ranks_case, tmp_path: Path) -> None:
    """Each transfer of a summed collective is at most one float64 partial sum and its magnitude (16
    bytes an element): node to node along the ranks, then the golden to each other node of the group;
    an all-gather's inputs go as read to every node that lacks them. Nothing else is a tensor."""
    _made, nodes = cluster
    case = ranks_case("msprobe-tp4")
    check = open_on_ray(node_places(nodes, _spread(case, tmp_path, LAYOUT)), None, 2.0)
    try:
        build_report(check)
        counted = check.workers.traffic
    finally:
        check.close()
    node_of = {int(rank[4:]): node for node, ranks in LAYOUT.items() for rank in ranks}
    local = RanksCheck(open_ranks(str(case / "step0")))
    reader = RankReader(local.ranks)
    bound = read = 0
    for token in local.tokens():
        for collective in local.collectives(token):
            readings = [reader.read(rank, collective) for rank in range(4)]
            read += sum(r.nbytes for r in readings)
            reduction, groups = decide(collective, readings, 4)
            for group in groups:
                bound += _bound(collective, reduction, group, readings, node_of)
    assert 0 < counted.partial_sums + counted.goldens + counted.inputs <= bound
    assert counted.read == read  # the tensors each node read, which stayed there
    assert (
        counted.results > 0
        and counted.crossed == counted.partial_sums + counted.goldens + counted.inputs + counted.results
    )


def _bound(
    collective: Collective, reduction: str, group: tuple[int, ...], readings: list, node_of: dict
) -> int:
    runs = [node_of[r] for i, r in enumerate(group) if i == 0 or node_of[group[i - 1]] != node_of[r]]
    nodes = set(runs)
    shapes = [readings[r].shape for r in group]
    if foldable(collective, reduction, shapes):  # type: ignore[arg-type]
        numel = 1
        for dim in shapes[0]:
            numel *= dim
        return (len(runs) - 1 + len(nodes) - 1) * 16 * numel
    return sum(int(readings[r].input.nbytes) for n in nodes for r in group if node_of[r] != n)


def test_a_node_lost_mid_run_names_its_ranks_and_the_rest_stand(cluster, ranks_case, tmp_path: Path) -> None:
    """tp2x2: groups {0, 1} and {2, 3}. The node reading rank 3 is removed while its worker waits, at
    token 1's first collective, on a FIFO the test never opens: token 0 is as the local run's, group
    {0, 1} at every token too; from token 1 on, rank 3 is not compared and rank 2 has no golden."""
    made, nodes = cluster
    case = ranks_case("msprobe-tp2x2")
    victim = made.add_node(num_cpus=1)
    made.wait_for_nodes()
    layout = {"a": LAYOUT["a"], "b": LAYOUT["b"], "victim": LAYOUT["c"]}
    roots = _spread(case, tmp_path / "nodes", layout)
    lines: list[str] = []
    with removed_at_gate(made, victim, tmp_path) as (reached, release):
        check = open_on_ray(
            node_places({**nodes, "victim": victim}, roots),
            None,
            2.0,
            progress=lines.append,
            before_read=_gate(victim.node_id, reached, release),
        )
        try:
            report = build_report(check)
        finally:
            check.close()
    local = {(r["token"], r["op"], r["rank"]): r for r in _local(case).collectives}
    rows = {(r["token"], r["op"], r["rank"]): r for r in report.collectives}
    assert rows.keys() == local.keys()
    for key, row in rows.items():
        token, _op, rank = key
        if token == 0 or rank in (0, 1):
            assert row == local[key]
        elif rank == 3:
            assert row["passed"] is None and "rank 3 (rank3) not compared: node " in row["error"]
            assert victim.node_id[:8] in row["error"]
        else:
            assert row["passed"] is None and row["error"].startswith(
                "no golden: the input of rank 3 is missing"
            )
    assert report.exit_code == 1
    assert report.ray is not None
    assert [(n["rank"], n["rank_folder"]) for n in report.ray["not_compared"]] == [(3, "rank3")]
    states = {n["node_id"]: n["state"] for n in report.ray["nodes"]}
    assert states == {nodes["a"].node_id: "done", nodes["b"].node_id: "done", victim.node_id: "lost"}
    assert any(line.startswith("node ") and " lost after 5 collectives " in line for line in lines)


def _gate(victim: str, reached: str, release: str) -> Any:
    """Run on every node before it reads a collective: the victim, at token 1, says so and waits."""

    def before_read(node_id: str, collective: Collective) -> None:
        if node_id == victim and collective.token == 1:
            hold_here(reached, release)

    return before_read


def test_a_rank_folder_no_node_holds_is_named_not_compared(cluster, ranks_case, tmp_path: Path) -> None:
    _made, nodes = cluster
    case = ranks_case("msprobe-tp4")
    roots = _spread(case, tmp_path, {"a": LAYOUT["a"], "c": LAYOUT["c"]})  # rank2 is nowhere
    check = open_on_ray(node_places(nodes, roots), None, 2.0)
    try:
        report = build_report(check)
    finally:
        check.close()
    assert report.ranks == ["rank0", "rank1", "rank2", "rank3"] and report.exit_code == 1
    assert all(r["passed"] is None for r in report.collectives)  # one group of four: no golden anywhere
    assert {r["error"] for r in report.collectives if r["rank"] == 2} == {
        "rank 2 (rank2) not compared: no node holds this rank folder (found: "
        f"{check.workers.states[0].label}, {check.workers.states[1].label})"
    }
    assert report.ray is not None and [n["rank"] for n in report.ray["not_compared"]] == [2]


def test_the_command_line_prints_the_bytes_and_a_line_per_node(
    cluster, ranks_case, tmp_path: Path, capsys
) -> None:
    _made, nodes = cluster
    case = ranks_case("msprobe-tp4")
    places = node_places(nodes, _spread(case, tmp_path, LAYOUT))
    code = main(["report", "--ranks", "--ray", "auto", *places, "--json"])
    out, err = capsys.readouterr()
    said = json.loads("\n".join(ours(out)))
    assert code == 1 and said["first_bad"] == _local(case).first_bad
    assert said["ray"]["bytes"]["crossed"] > 0 and said["ray"]["address"] == "auto"
    lines = ours(err)
    assert sum(line.startswith("node ") and " done: " in line for line in lines) == 3
    assert any(line.startswith("ray: ") and "crossed between nodes" in line for line in lines)


def test_a_path_no_node_holds_is_refused_naming_each_node(cluster, tmp_path: Path, capsys) -> None:
    _made, nodes = cluster
    missing = tmp_path / "nowhere"
    assert (
        main(["ranks", "--ray", "auto", *(f"{n.node_id}:{missing}" for n in nodes.values()), "--json"]) == 2
    )
    out, err = capsys.readouterr()
    *lines, said = ours(err)  # a line a node as its listing comes back, then the error
    assert ours(out) == [] and len(lines) == 3 and all("no rank folder here" in line for line in lines)
    assert said.startswith("tui-acc: error: ") and "hold 0 rank folder(s) between them" in said
    assert all(n.node_id[:8] in said for n in nodes.values())
