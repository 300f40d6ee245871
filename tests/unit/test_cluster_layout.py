"""``--ray`` without a cluster: which node reads which rank (placement.py), where the dump is on each node
(HOST:PATH), the command line's Ray address, and Ray left alone by every run that does not ask for it
(an optional extra: without it ``--ray`` names the extra, exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tui_acc.cli.check_ranks import _where
from tui_acc.cli.main import main
from tui_acc.cli.parser import build_parser, command_first, parse
from tui_acc.cluster.connect import Node, Place, is_address, places_of
from tui_acc.cluster.placement import lay_out
from tui_acc.errors import UsageError

LABELS = ["a:/d", "b:/d", "c:/d"]


def test_a_shared_file_system_is_read_in_runs_of_consecutive_ranks_shared_out_evenly() -> None:
    every = [f"rank{r}" for r in range(6)]
    layout = lay_out([every, every, every], LABELS)
    assert [layout.reader[r] for r in range(6)] == [0, 0, 1, 1, 2, 2]
    assert layout.absent == {} and "on several nodes" in layout.notes[0]


def test_each_rank_is_read_where_it_is_and_numbered_as_a_local_run_numbers_it() -> None:
    layout = lay_out([["rank10", "rank2"], ["rank3"], []], LABELS)
    # rank_sort_key: rank2 before rank10; the folders no node holds (0, 1, 4..9) keep their numbers
    assert layout.names == [f"rank{r}" for r in range(11)]
    assert {layout.reader[r] for r in (2, 10)} == {0} and layout.reader[3] == 1
    assert sorted(layout.absent) == [0, 1, 4, 5, 6, 7, 8, 9]
    assert (
        layout.absent[0] == "rank 0 (rank0) not compared: no node holds this rank folder (found: a:/d, b:/d)"
    )
    assert layout.ranks_of(0) == [2, 10] and layout.ranks_of(2) == []


def test_devices_numbered_per_host_say_nothing_of_missing_ranks() -> None:
    layout = lay_out([["0_100", "1_101"], ["3_203"], []], LABELS)  # msit ATB: {device}_{pid}
    assert layout.names == ["0_100", "1_101", "3_203"] and layout.absent == {}


NODES = [
    Node("a1b2c3d4e5f6" + "0" * 44, "host-a", "10.0.0.1"),
    Node("ffee0011" + "1" * 48, "host-b", "10.0.0.2"),
]


def test_one_path_is_read_on_every_node() -> None:
    assert places_of(["/dumps/run"], NODES) == [Place(NODES[0], "/dumps/run"), Place(NODES[1], "/dumps/run")]


def test_host_path_pairs_name_nodes_by_hostname_address_or_id() -> None:
    found = places_of(["host-a:/x", "10.0.0.2:/y", "ffee0011:/z"], NODES)
    assert found == [Place(NODES[0], "/x"), Place(NODES[1], "/y"), Place(NODES[1], "/z")]
    with pytest.raises(UsageError, match=r"no alive Ray node is named host-c \(alive: host-a \[a1b2c3d4\]"):
        places_of(["host-a:/x", "host-c:/y"], NODES)
    with pytest.raises(UsageError, match="not both"):
        places_of(["host-a:/x", "/y"], NODES)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("auto", True),
        ("local", True),
        ("10.0.0.1:6379", True),
        ("head:6379", True),
        ("ray://head:10001", True),
        ("[::1]:6379", True),
        ("/dumps/run", False),
        ("run", False),
        ("node1:/dumps/run", False),
    ],
)
def test_a_ray_address_is_told_from_a_dump(text: str, address: bool) -> None:
    assert is_address(text) is address


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["ranks", "/d", "--ray"], (["/d"], "auto")),
        (["ranks", "--ray", "/d"], (["/d"], "auto")),  # --ray takes /d first: given back to DUMP
        (["ranks", "--ray", "10.0.0.1:6379", "/d"], (["/d"], "10.0.0.1:6379")),
        (["ranks", "--ray", "n1:/d", "n2:/d"], (["n1:/d", "n2:/d"], "auto")),
        (["ranks", "/d"], (["/d"], None)),
    ],
)
def test_the_dump_and_the_address_from_the_command_line(argv: list[str], where: tuple) -> None:
    parser = build_parser()
    assert _where(parse(parser, command_first(parser, argv))) == where


def test_without_ray_the_option_names_the_extra(ranks_case, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    dump = ranks_case("msprobe-tp2") / "step0"
    assert main(["report", "--ranks", str(dump), "--ray", "auto", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("tui-acc: error: --ray needs Ray, an optional extra: pip install 'tui-acc[ray]'")


def test_pairs_without_ray_are_refused(capsys) -> None:
    assert main(["ranks", "node1:/d", "node2:/d", "--json"]) == 2
    assert "one DUMP without --ray" in capsys.readouterr().err


def test_ray_address_alone_never_switches_a_run_to_ray(ranks_case, tmp_path: Path) -> None:
    """RAY_ADDRESS set, no --ray: the run is local, as before, and Ray is never imported."""
    dump = ranks_case("msprobe-tp2") / "step0"
    said, stderr = _with_ray_address(
        ["report", "--ranks", str(dump), "--json"], tmp_path, "tui_acc.tui.ranks_app"
    )
    assert said == "1 []", stderr  # the fault found (exit 1), locally, without Ray


def _with_ray_address(argv: list[str], home: Path, imported: str = "") -> tuple[str, str]:
    """``main(argv)`` in a process of its own with ``RAY_ADDRESS`` set (and ``imported`` imported
    first): its exit code and the Ray modules it imported, as one line; and its stderr."""
    code = (
        "import contextlib, io, sys\n"
        "from tui_acc.cli.main import main\n"
        + (f"import {imported}\n" if imported else "")
        + "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main({argv!r})\n"
        "print(code, sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "RAY_ADDRESS": "10.0.0.1:6379"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    return done.stdout.strip(), done.stderr


def test_an_address_nobody_answers_at_is_said_at_once(ranks_case, monkeypatch, capsys) -> None:
    """ray.init would retry for minutes; the head is probed first (the port just freed: refused)."""
    import socket

    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dump = ranks_case("msprobe-tp2") / "step0"
    assert main(["ranks", str(dump), "--ray", f"127.0.0.1:{port}", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"tui-acc: error: --ray 127.0.0.1:{port}: no Ray head answers at 127.0.0.1:{port} ("
    )


def test_a_pair_without_ray_names_the_extra(tp_case, monkeypatch, capsys) -> None:
    """``report GOLDEN TEST --ray`` where Ray is not installed: one line, exit 2, nothing on stdout."""
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    tp = tp_case("llama-tp2-msprobe")
    assert main(["report", str(tp / "golden"), str(tp / "column"), "--ray", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("tui-acc: error: --ray needs Ray, an optional extra: pip install 'tui-acc[ray]'")


def test_ray_address_alone_never_switches_a_pair_to_ray(tp_case, tmp_path: Path) -> None:
    """RAY_ADDRESS set, no --ray: ``report GOLDEN TEST`` gathers the ranks here, and never imports Ray."""
    tp = tp_case("llama-tp2-msprobe")
    argv = ["report", str(tp / "golden"), str(tp / "column"), "--json", "--no-cache"]
    said, stderr = _with_ray_address(argv, tmp_path)
    assert said == "1 []", stderr  # the fault found (exit 1), locally, without Ray


@pytest.mark.parametrize(
    ("argv", "test", "places"),
    [
        (["report", "/g", "/t", "--ray"], "/t", []),
        (["report", "/g", "n1:/t", "n2:/s", "--ray", "auto"], "n1:/t", ["n2:/s"]),
        (["report", "/g", "--ray", "auto", "n1:/t", "n2:/s"], "n1:/t", ["n2:/s"]),
        (["/g", "n1:/t", "n2:/s", "--ray"], "n1:/t", ["n2:/s"]),  # the view
    ],
)
def test_a_pair_s_test_folders_node_by_node(argv: list[str], test: str, places: list[str]) -> None:
    """``report GOLDEN HOST:PATH HOST:PATH --ray``: TEST and then each further node's folder."""
    parser = build_parser()
    args = parse(parser, command_first(parser, argv))
    assert (str(args.test), args.places) == (test, places)


def test_further_folders_without_ray_are_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["report", "/g", "n1:/t", "n2:/s", "--json"])
    assert exited.value.code == 2 and "unrecognized arguments: n2:/s" in capsys.readouterr().err
