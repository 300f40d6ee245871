"""The culprit on screen: `f` reaches the one operator where the error starts, `n` from it walks the
failures without meeting a second "error starts here", and no module above a failure shows ✓.

On real-tool dumps with one injected fault (tests/data/models), keyboard only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.ranks import RanksFromComparison
from tui_acc.tui.widgets.layer_tree import LayerTree
from tui_acc.tui.widgets.tensor_detail import TensorDetail


async def _at_the_culprit(app: AccApp, pilot: Pilot[None]) -> object:
    """``f`` twice: the first failing token, then its culprit; the screen it ends on."""
    await settle(pilot)
    await pilot.press("f")  # the first failing token
    await settle(pilot)
    await pilot.press("f")  # its culprit
    await settle(pilot)
    return app.screen


def _cursor(table: DataTable[object]) -> str:
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


@pytest.mark.parametrize("name", ["llama-msprobe-mix", "qwen2-msprobe-L0", "qwen2moe-msit"])
async def test_n_from_the_culprit_meets_no_second_error_start(model_case, tmp_path: Path, name: str) -> None:
    folder = model_case(name)
    case = json.loads((folder / "case.json").read_text())
    app = AccApp(
        open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False)), export_dir=tmp_path
    )
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _at_the_culprit(app, pilot)
        assert isinstance(screen, OperatorScreen) and screen.token == case["fault_token"]
        table = screen.query_one("#ops", DataTable)
        culprit = _cursor(table)
        rows = screen._rows
        assert rows[culprit]["label"] == "local"
        visited = []
        for _ in range(len(rows)):
            before = table.cursor_row
            await pilot.press("n")
            await pilot.pause()
            if table.cursor_row == before:
                break  # no further failure that way
            visited.append(_cursor(table))
        assert visited, "the fault's inherited failures follow it"
        assert all(rows[key]["label"] == "inherited" for key in visited), [
            (key, rows[key]["label"]) for key in visited
        ]
        # every module above the culprit shows a failure, ✗c, none ✓
        tree = app.comparison.golden.tree
        layer_tree = screen.query_one(LayerTree)
        parent = tree.nodes[culprit].parent
        while parent is not None:
            if parent in layer_tree._by_name:
                assert str(layer_tree._by_name[parent].label).startswith("✗"), parent
            parent = tree.nodes[parent].parent


async def test_f_reaches_a_tensor_parallel_runs_faulty_all_reduce(ranks_demo, tmp_path: Path) -> None:
    """The demo's two-rank run against its one-device golden: gathered unasked, the culprit is the
    layer holding rank 1's wrong all-reduce, and the operator screen says which operation and rank."""
    sides = (ranks_demo.out / "golden", ranks_demo.out / "test")
    app = AccApp(open_comparison(*sides, CompareOptions(cache=False)), export_dir=tmp_path)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await _at_the_culprit(app, pilot)
        assert isinstance(screen, OperatorScreen) and screen.token == ranks_demo.fault.token
        culprit = screen._rows[_cursor(screen.query_one("#ops", DataTable))]
        assert culprit["golden_node"] == f"root.model.layers.{ranks_demo.fault.layer}"
        assert (culprit["label"], culprit["operator"]) == ("local", ranks_demo.fault_op)
        assert f"on rank {ranks_demo.fault.rank}," in culprit["reason"]
        assert "(tensor-parallel, 2 ranks, gathered)" in app.sub_title
        # the detail says which rank's copy of the layer's output is off
        console = Console(width=240, record=True)
        console.print(screen.query_one(TensorDetail).content)
        lines = [line for line in console.export_text().splitlines() if " by rank: " in line]
        assert lines and all(f"rank {ranks_demo.fault.rank}: cosine" in line for line in lines)
        # R: the same run's check across its ranks, no golden needed; f finds the same all-reduce
        await pilot.press("R")
        await settle(pilot)
        ranks = app.screen
        assert isinstance(ranks, RanksFromComparison)
        await pilot.press("f")
        await settle(pilot)
        fault = ranks_demo.fault
        assert ranks.cursor_key() == f"{fault.token}|{fault.rank}|{ranks_demo.fault_op}"
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is screen  # back where R was pressed


async def test_f_reaches_the_faulty_expert_on_its_rank(tp_case, tmp_path: Path) -> None:
    """The expert-parallel msprobe run against its one-device golden (tests/data/tp): `f` reaches the
    faulty expert's linear at the fault's token, and its Test op cell names the rank that ran it and
    the record its dump.json gives it (msprobe's construct.json puts that record under the module)."""
    ep = tp_case("moe-ep2-msprobe")
    fault = json.loads((ep / "case.json").read_text(encoding="utf-8"))["fault"]
    app = AccApp(
        open_comparison(ep / "golden", ep / fault["case"], CompareOptions(cache=False)), export_dir=tmp_path
    )
    async with app.run_test(size=(200, 45)) as pilot:
        screen = await _at_the_culprit(app, pilot)
        assert isinstance(screen, OperatorScreen) and screen.token == fault["token"]
        table = screen.query_one("#ops", DataTable)
        culprit = screen._rows[_cursor(table)]
        assert culprit["label"] == "local"
        rank, record = app.comparison.test.origins[culprit["test_node"]]
        construct = ep / fault["case"] / "step0" / f"rank{rank}" / "construct.json"
        parent = json.loads(construct.read_text(encoding="utf-8"))[record]
        assert (rank, parent) == (
            fault["rank"],
            f"Module.{fault['linear_module']}.Linear.forward.{fault['call']}",
        )
        # elided in the middle where the column is narrow: the rank comes first
        assert str(table.get_cell(culprit["golden_node"], "test_name")).startswith(f"rank {rank}")
        assert "(expert-parallel, 2 ranks, gathered)" in app.sub_title


async def test_f_names_the_faulty_ge_op_and_its_fx_node(torchair_case, tmp_path: Path) -> None:
    """TorchAir: `f` twice from the token list lands on the faulty GE MatMul at token 2, its row the
    FX node it computes, labelled where the error starts (tests/data/torchair, case.json)."""
    folder = torchair_case("llama")
    case = json.loads((folder / "case.json").read_text())
    comparison = open_comparison(folder / "fx", folder / "ge-fault", CompareOptions(cache=False))
    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _at_the_culprit(app, pilot)
        assert isinstance(screen, OperatorScreen) and screen.token == case["token"]
        row = screen._rows[_cursor(screen.query_one("#ops", DataTable))]
        named = (row["golden_node"], row["test_node"], row["label"])
        assert named == (case["fx_node"], case["ge_op"], "local")


async def test_the_token_list_pairs_no_token_on_the_event_loop(
    torchair_case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pairing a GE token reads every op's file header (a thousand in a real graph): the token list
    leaves it to its worker, and names the test's logits op in its own column once a row says the
    two sides name the logits differently (the FX node against the GE op)."""
    import threading

    from tui_acc.pairing import torchair

    folder = torchair_case("llama")
    paired_on: list[bool] = []
    pair_token = torchair._pair_token

    def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
        paired_on.append(threading.current_thread() is threading.main_thread())
        return pair_token(*args, **kwargs)

    monkeypatch.setattr(torchair, "_pair_token", recorded)
    comparison = open_comparison(folder / "fx", folder / "ge-fault", CompareOptions(cache=False))
    app = AccApp(comparison)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        tokens = app.screen.query_one("#tokens", DataTable)
        logits = comparison.pairing.logits_pair(0)
        assert logits is not None and logits.golden.path != logits.test.path
        assert str(tokens.get_cell("0", "test_node")) == logits.test_node
    assert paired_on and not any(paired_on), paired_on
