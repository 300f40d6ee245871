"""``tui-acc ranks``: f finds the faulty all-reduce, n/N, sort, export, help, the palette, a snapshot."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from tests.tui.conftest import settle
from tests.unit.ranks_dumps import op_name, write_atb_run
from tui_acc.collectives.check import RanksCheck
from tui_acc.collectives.rank_set import open_ranks
from tui_acc.tui.palette import TITLES, declared_bindings
from tui_acc.tui.ranks_app import RanksApp
from tui_acc.tui.screens.ranks import RanksScreen
from tui_acc.tui.screens.ranks_help import RanksHelp


@pytest.fixture
def ranks_app(ranks_demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RanksApp:
    # a relative path keeps the title line the same from run to run (the snapshot compares it)
    monkeypatch.chdir(ranks_demo.out)
    exports = tmp_path / "exports"
    exports.mkdir()
    dump = ranks_demo.dump.relative_to(ranks_demo.out)
    return RanksApp(
        RanksCheck(open_ranks(str(dump))), export_dir=exports, clock=lambda: datetime(2026, 11, 21)
    )


def _cursor(app: RanksApp) -> str | None:
    screen = app.screen
    assert isinstance(screen, RanksScreen)
    return screen.cursor_key()


def _text(app: RanksApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def test_f_jumps_to_the_faulty_all_reduce(ranks_app: RanksApp, ranks_demo) -> None:
    fault = ranks_demo.fault
    async with ranks_app.run_test(size=(120, 30)) as pilot:
        await pilot.press("f")  # at once: it waits for the worker, then jumps
        await settle(pilot)
        assert _cursor(ranks_app) == f"{fault.token}|{fault.rank}|{ranks_demo.fault_op}"
        assert "first disagreement: token 3" in _text(ranks_app, "#status")
        detail = _text(ranks_app, "#detail")
        assert "rank 1 (1_5101)" in detail and "bfloat16" in detail and "beyond 2 x" in detail
        assert "1 disagree" in _text(ranks_app, "#summary")
        await pilot.press("g", "n")  # from the top, the next disagreement is the same row
        await pilot.pause()
        assert _cursor(ranks_app) == f"{fault.token}|{fault.rank}|{ranks_demo.fault_op}"
        await pilot.press("n")
        await pilot.pause()
        assert _cursor(ranks_app) == f"{fault.token}|{fault.rank}|{ranks_demo.fault_op}"  # no further one
        tokens = ranks_app.screen.query_one("#rank-tokens", DataTable)
        assert str(tokens.get_cell(str(fault.token), "bad")) == "1"


async def test_e_exports_the_view_in_screen_order(ranks_app: RanksApp, ranks_demo) -> None:
    async with ranks_app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("s")  # sort: the dialog lists the columns; Verdict puts failures first
        await pilot.pause()
        await pilot.press("down", "down", "down", "enter")  # past execution order, Token, Rank
        await pilot.pause()
        assert "sorted: Verdict" in _text(ranks_app, "#summary")
        assert ranks_app.screen.query_one("#collectives", DataTable).get_row_at(0)[2].plain == "FAIL"
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert "exported 96 rows to" in _text(ranks_app, "#status")
    (written,) = ranks_app.export_dir.glob("tui-acc-ranks-*.csv")
    with written.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 96 and rows[0]["passed"] == "false" and rows[0]["op"] == ranks_demo.fault_op
    assert rows[0]["source_dump"].endswith("tensors")


async def test_a_click_on_a_header_sorts_by_its_column(ranks_app: RanksApp) -> None:
    """As on the comparison screens (the keyboard way is s); the token list's headers sort nothing."""
    async with ranks_app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        table = ranks_app.screen.query_one("#collectives", DataTable)
        tokens = ranks_app.screen.query_one("#rank-tokens", DataTable)
        await pilot.click(tokens, offset=(2, 0))  # the token list's Token header
        await pilot.pause()
        assert "sorted" not in _text(ranks_app, "#summary")
        verdict = sum(column.get_render_width(table) for column in table.ordered_columns[:2]) + 2
        await pilot.click(table, offset=(verdict, 0))
        await pilot.pause()
        assert "sorted: Verdict" in _text(ranks_app, "#summary")
        assert table.get_row_at(0)[2].plain == "FAIL"


async def test_help_lists_the_keys_and_the_rule(ranks_app: RanksApp) -> None:
    async with ranks_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(ranks_app.screen, RanksHelp)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(ranks_app.screen, RanksScreen)


def test_every_key_has_a_palette_title() -> None:
    for node in (RanksApp, RanksScreen):
        for binding in declared_bindings(node):
            assert binding.id in TITLES, f"{node.__name__}: {binding.key} has no palette title"


async def test_the_palette_offers_every_key(ranks_app: RanksApp) -> None:
    async with ranks_app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        offered = {c.title for c in ranks_app.get_system_commands(ranks_app.screen)}
        for node in (ranks_app.screen, ranks_app):
            for binding in declared_bindings(type(node)):
                assert TITLES[binding.id or ""][0] in offered


async def test_missing_data_is_a_row_that_says_why(tmp_path: Path) -> None:
    tensors = write_atb_run(tmp_path, 2, skip=frozenset({(1, 1, 0)}))
    app = RanksApp(RanksCheck(open_ranks(str(tensors))), export_dir=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("n")  # the first row that cannot be judged
        await pilot.pause()
        assert _cursor(app) == f"1|0|{op_name(0)}"
        assert "no golden" in _text(app, "#detail")
        await pilot.press("f")
        await pilot.pause()
        assert _cursor(app) == f"1|0|{op_name(0)}"  # nothing disagrees: f stays where it was


@pytest.mark.parametrize("size", [(80, 24), (132, 32)])
def test_ranks_screen_snapshot(snap_compare, ranks_app: RanksApp, size: tuple[int, int]) -> None:
    async def at_the_fault(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()

    assert snap_compare(ranks_app, terminal_size=size, run_before=at_the_fault)


async def test_every_collective_is_checked_off_the_event_loop(
    ranks_app: RanksApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from tui_acc.collectives import check as check_module

    threads: set[int] = set()
    compute = check_module.RanksCheck._compute

    def recorded(self: RanksCheck, collective: object) -> object:
        threads.add(threading.get_ident())
        return compute(self, collective)  # type: ignore[arg-type]

    monkeypatch.setattr(check_module.RanksCheck, "_compute", recorded)
    async with ranks_app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f", "n", "N", "g", "G")
        await pilot.pause()
    assert threads and threading.get_ident() not in threads


async def test_at_80_columns_each_row_names_its_operator_and_right_keeps_it(
    ranks_app: RanksApp, ranks_demo
) -> None:
    """Token, rank, verdict and operator are pinned on the left; → brings the metrics that do not
    fit, a whole column at a time; the operator's name and verdict never scroll away."""
    async with ranks_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        table = ranks_app.screen.query_one("#collectives", DataTable)
        assert [str(c.key.value) for c in table.ordered_columns[: table.fixed_columns]] == [
            "token",
            "rank",
            "passed",
            "op",
        ]
        row = table.get_row_at(table.cursor_row)
        assert row[2].plain == "FAIL" and row[3].plain.endswith("AllReduceOperation")
        pinned = sum(c.get_render_width(table) for c in table.ordered_columns[:4])
        room = table.scrollable_content_region.width
        assert pinned + table.ordered_columns[4].get_render_width(table) <= room  # the cosine in view
        starts, x = [], 0
        for column in table.ordered_columns:
            starts.append(x)
            x += column.get_render_width(table)
        for _ in range(3):
            await pilot.press("right")
            await pilot.pause()
            assert table.scroll_x > 0 and table.scroll_x + pinned in starts  # on a column's edge
        assert pinned < room  # the key columns are still drawn, at the left


class _OnNodes(RanksCheck):
    """A check whose rows come from a cluster's nodes, as far as the screen can tell."""

    def status(self) -> str:
        return "nodes: host-a [a1b2c3d4] 0_5100 done · host-b [ffee0011] 1_5101 lost (its worker died)"


async def test_a_run_on_ray_shows_a_line_of_nodes(ranks_demo, tmp_path: Path) -> None:
    app = RanksApp(_OnNodes(open_ranks(str(ranks_demo.dump))), export_dir=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert _text(app, "#nodes") == _OnNodes.status(app.check)
    local = RanksApp(RanksCheck(open_ranks(str(ranks_demo.dump))), export_dir=tmp_path)
    async with local.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert not local.screen.query("#nodes")  # a local run has no such line
