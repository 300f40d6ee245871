"""What a key draws again: a cursor move on the operator screen draws two rows of the table, not every
cell on screen, nor the layer tree; ``?`` shows the help made once; neither ``?`` nor Esc rebuilds
the footer under it; the heap is frozen once the token list is complete, so that Python's full
collections do not walk it between frames. Counted, not timed (scripts/bench_keys.py times them on a
real terminal)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from textual.widgets import DataTable, Tree
from textual.widgets._footer import FooterKey

from tests.tui.conftest import cursor_key, settle
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens import help as help_module
from tui_acc.tui.screens.help import HelpScreen
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.tensor_detail import TensorDetail


@pytest.fixture
def count(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any, str], list[object]]]:
    """``count(owner, name)``: the calls of ``owner.name`` from now on, one entry (its self) each."""

    def counted(owner: Any, name: str) -> list[object]:
        calls: list[object] = []
        original = getattr(owner, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            calls.append(args[0] if args else None)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
        return calls

    yield counted


async def test_a_cursor_move_draws_two_rows_of_the_table_and_not_the_tree(demo_app: AccApp, count) -> None:
    """The detail under the table is as high as the operator's tensors: each move changed the table's
    and the tree's height, and both drew everything they show again (every cell through rich)."""
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")  # ◆, whose detail is shorter than the next row's (a layer)
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen)
        table = screen.ops_table()
        heights = {table.size.height}
        cells = count(DataTable, "_get_row_renderables")  # what a cell not drawn before asks for
        tree_lines = count(Tree, "_build")
        for key in "jkjk":
            await pilot.press(key)
            await settle(pilot)
            heights.add(table.size.height)
        assert len(heights) > 1  # the detail changed the table's height
        drawn = [row for row in cells if row is table]
        assert len(drawn) <= 4 * 2 * len(table.columns)  # the rows the cursor left and reached
        assert tree_lines == []
        assert screen.query_one(TensorDetail)._shown is not None


async def test_the_help_is_made_once_and_again_when_what_it_says_changes(
    demo_app: AccApp, count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``?`` shows the same help screen again (composed, styled and drawn once); its text is made
    again once the logits' dtypes are known, which it then states."""
    engine = demo_app.comparison.engine
    original, gate = engine.token_rows, threading.Event()

    def gated(*args: Any, **kwargs: Any) -> object:
        gate.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(engine, "token_rows", gated)
    made = count(help_module, "help_renderable")
    async with demo_app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.pause()
            await pilot.press("question_mark")
            await pilot.pause()
            first = demo_app.screen
            assert isinstance(first, HelpScreen)
            assert len(made) == 1 and first._made_for is not None and first._made_for[1] is None
            await pilot.press("escape")
        finally:
            gate.set()
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert demo_app.screen is first
        assert len(made) == 2 and first._made_for is not None and first._made_for[1] is not None
        await pilot.press("escape", "question_mark")
        await pilot.pause()
        assert demo_app.screen is first and len(made) == 2  # nothing changed: shown as it was


async def test_the_footer_shows_its_keys_on_a_screen_whose_bindings_never_change() -> None:
    """textual's footer builds no key until its first bindings change says they are ready; where
    the keys then are the ones it saw before (nothing focused changes them), they are built all the
    same."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    from tui_acc.tui.widgets.key_footer import KeyFooter

    class Plain(App[None]):
        BINDINGS = [("q", "quit", "Quit"), ("x", "bell", "Ring")]

        def compose(self) -> ComposeResult:
            yield Static("nothing to focus")
            yield KeyFooter()

    app = Plain()
    async with app.run_test(size=(80, 10)) as pilot:
        await pilot.pause()
        await pilot.pause()
        assert {key.key for key in app.screen.query(FooterKey)} >= {"q", "x"}


async def test_the_help_and_esc_leave_the_footer_under_it_as_it_is(demo_app: AccApp, count) -> None:
    """textual's footer built its keys again when the help opened over its screen and when it closed:
    the screen under the help was laid out again, and the help drawn over it again."""
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        keys = len(demo_app.screen.query(FooterKey))
        assert keys > 0
        built = count(FooterKey, "__init__")
        await pilot.press("question_mark")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(demo_app.screen, OperatorScreen)
        assert built == [] and len(demo_app.screen.query(FooterKey)) == keys


async def test_the_heap_is_frozen_once_the_token_list_is_complete(
    demo_app: AccApp, demo_pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a terminal the heap is frozen once every token is listed (Python's full collections then
    walk only what came after), and thawed when a re-dump replaces the comparison; never under a
    test's headless driver."""
    import gc

    from tui_acc import open_comparison

    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze"))
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert calls == []  # headless
        demo_app.freeze_heap = True  # as in a terminal
        demo_app.switch_comparison(open_comparison(demo_pair.golden, demo_pair.test), None, None)
        await settle(pilot)  # the new token list is drawn: its worker starts
        await settle(pilot)
        assert calls == ["unfreeze", "freeze"]


async def test_an_operator_screen_open_when_the_list_completes_is_not_frozen(
    demo_app: AccApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token list completes while the user is on a token's operators (Enter or f while it was
    being compared, common on a big dump): frozen then, that screen would never be collected once
    closed. The heap is frozen once the list is shown again, after a collection."""
    import gc

    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "collect", lambda *_: calls.append("collect") or 0)
    demo_app.freeze_heap = True  # as in a terminal
    demo_app.freeze_delay = 0.001  # textual's timers take no 0
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        calls.clear()  # the list completed on screen and was frozen; now it completes again, under
        await pilot.press("f")  # an operator screen
        await settle(pilot)
        demo_app.on_token_screen_tokens_finished()  # the list completing under it
        assert calls == []
        await pilot.press("escape")
        for _ in range(100):  # the freeze waits for a timer: until it has run
            if calls:
                break
            await pilot.pause()
        assert calls == ["collect", "freeze"]


async def test_leaving_the_operators_leaves_nothing_of_them_alive(demo_app: AccApp) -> None:
    """What a closed operator screen leaves alive, Python's full collections walk every few seconds:
    textual's header stayed (watching the app's title) and so did its widgets' drawn lines (textual's
    StylesCache.get_inner_outer cache), and those pauses grew with every token visited."""
    import gc

    from textual._styles_cache import StylesCache
    from textual.widgets import Header

    kinds = (Header, OperatorScreen, StylesCache)

    def alive() -> dict[type, int]:
        """How many of each kind live, in one walk of every object (each walk takes seconds)."""
        gc.collect()
        counts = dict.fromkeys(kinds, 0)
        for thing in gc.get_objects():
            # by type(), not isinstance(): isinstance reads __class__, which some of torch's
            # deprecated module attributes answer with a warning
            mro = type(thing).__mro__
            for kind in kinds:
                counts[kind] += kind in mro
        return counts

    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)

        async def visit_and_leave() -> None:
            await pilot.press("f")
            await settle(pilot)
            left = demo_app.screen
            await pilot.press("escape")
            await settle(pilot)
            for _ in range(100):  # the screen is removed in a task of its own: until it has gone
                if not left.is_attached:
                    break
                await pilot.pause()
            assert not left.is_attached

        await visit_and_leave()  # once, so that what is made once is made before counting
        before = alive()
        for _ in range(3):
            await visit_and_leave()
        after = alive()
        # none more (fewer where an earlier test's leftovers went meanwhile)
        assert all(after[kind] <= before[kind] for kind in kinds), (before, after)


async def test_a_held_key_moves_the_cursor_and_the_detail_follows_where_it_rests(
    demo_app: AccApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moves closer together than FOLLOW_REST (a key held down, keys typed ahead) move the cursor
    only; the detail under the table (whose height lays the screen out again) shows the operator the
    cursor rests on. A move after a rest is followed at once."""
    from tui_acc.tui.screens.operators import detail
    from tui_acc.tui.widgets.tensor_detail import TensorDetail

    clock = [0.0]  # the moves' times: the test says how far apart they are
    monkeypatch.setattr(detail, "monotonic", lambda: clock[0])
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen)
        # a rest as long as the test (its timer never fires by itself): the test's clock says which
        # moves are close together
        monkeypatch.setattr(detail.DetailPanel, "FOLLOW_REST", 600.0)
        rows = [str(key.value) for key in screen.ops_table().rows]
        start = rows.index(cursor_key(demo_app, "#ops"))

        def shown() -> str:
            node = screen.query_one(TensorDetail)._shown
            return node[0].golden if node and node[0] else ""

        clock[0] = 1000.0  # the cursor has rested since the jump to ◆
        await pilot.press("j")
        await pilot.pause()
        await pilot.pause()  # the detail follows once the cursor is drawn
        assert shown() == rows[start + 1]
        for _ in range(2):  # held: a key every 30 ms
            clock[0] += 0.03
            await pilot.press("j")
        await settle(pilot)
        assert cursor_key(demo_app, "#ops") == rows[start + 3]
        assert shown() == rows[start + 1]  # the operators passed over are not drawn
        rested = screen._follow_timer
        assert rested is not None  # ... the cursor's is, once it has rested FOLLOW_REST:
        rested.stop()
        screen._cursor_rested()  # what the timer calls then
        assert shown() == rows[start + 3]
