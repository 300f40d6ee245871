"""``p`` on the operator screen: the replay runs in a worker and its dialog says, per side, whether
the operator agrees with its own inputs (the demo pair, with msit's weights/ as it dumps them, and a
copy without them)."""

from __future__ import annotations

import html
import io
import re
import shutil
import threading
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import DataTable, Static

from tests.conftest import copy_without_weights
from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.replay import ReplayScreen, replay_renderable


@pytest.fixture(scope="module")
def weights_copy(demo_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy for the module: what the process keeps of a listing is keyed by the path as given,
    so a relative name must name one folder (and not "golden": other tests open the demo by it)."""
    root = tmp_path_factory.mktemp("replay-tui")
    for side in ("golden", "test"):  # the demo dumps its weights (msit's dump_weight=True)
        shutil.copytree(getattr(demo_pair, side), root / "with-weights" / side)
    return root


@pytest.fixture
def no_weights_app(demo_pair, tmp_path: Path) -> AccApp:
    golden, test = copy_without_weights(demo_pair, tmp_path / "no-weights")
    return AccApp(open_comparison(golden, test), export_dir=tmp_path)


@pytest.fixture
def weights_app(weights_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AccApp:
    monkeypatch.chdir(weights_copy)  # relative paths: the title line is the same on every machine
    return AccApp(open_comparison("with-weights/golden", "with-weights/test"), export_dir=tmp_path)


async def _at_the_culprit(pilot, module: str) -> None:
    """f from the token list, then f again once the token is judged: the cursor on ◆, the tree and
    the table scrolled to it (as test_snapshots does)."""
    await settle(pilot)
    await pilot.press("f")
    await settle(pilot)
    await pilot.press("f")
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    screen = pilot.app.screen
    assert isinstance(screen, OperatorScreen) and screen.cursor_key() == module


def _body(app: AccApp) -> str:
    """What the terminal shows, as text (from the screenshot)."""
    svg = app.export_screenshot()
    texts = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return "".join(html.unescape(t) for t in texts).replace("\xa0", " ")


async def test_p_replays_the_culprit_and_finds_the_operator_itself_wrong(
    weights_app: AccApp, demo_pair
) -> None:
    async with weights_app.run_test(size=(100, 30)) as pilot:
        await _at_the_culprit(pilot, demo_pair.fault_module)
        operators = weights_app.screen
        assert isinstance(operators, OperatorScreen)
        await pilot.press("p")
        await settle(pilot)
        screen = weights_app.screen
        assert isinstance(screen, ReplayScreen)
        assert screen.replay.golden.node == demo_pair.fault_module
        assert (screen.replay.golden.verdict, screen.replay.test.verdict) == ("consistent", "disagrees")
        body = _body(weights_app)
        assert "the operator itself disagrees with its inputs" in body and "bfloat16" in body
        await pilot.press("escape")
        await pilot.pause()
        assert weights_app.screen is operators
        assert "the operator itself disagrees" in str(operators.query_one("#status", Static).render())


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_p_on_an_operator_without_weights_says_why_once_and_how_to_make_it_possible(
    no_weights_app: AccApp, demo_pair, size: tuple[int, int]
) -> None:
    """The reason both sides share is said once (not in the reading and again in each side's column),
    and so is what to dump to make the replay possible."""
    async with no_weights_app.run_test(size=size) as pilot:
        await _at_the_culprit(pilot, demo_pair.fault_module)
        await pilot.press("p")
        await settle(pilot)
        assert isinstance(no_weights_app.screen, ReplayScreen)
        dialog = no_weights_app.screen
        assert isinstance(dialog, ReplayScreen)
        body = dialog.query_one("#replay-body", Static)
        console = Console(width=body.content_region.width, file=io.StringIO(), record=True)
        console.print(replay_renderable(dialog.replay))
        said = " ".join(console.export_text().split())  # lines the dialog wraps read as one text
        assert "impossible" in said and said.count("weights not dumped") == 1
        remedy = "msit: DumpConfig(..., dump_weight=True) also writes weights/{module}.{parameter}.pth"
        assert said.count(f"To replay it: {remedy}") == 1


async def test_the_replay_runs_off_the_event_loop(
    weights_app: AccApp, demo_pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the replay reads and computes (held here until the test lets it go), keys still move the
    cursor: nothing of it runs on the event loop."""
    from tui_acc.verdicts import replay_check as run

    gate, original = threading.Event(), run.replay_node

    def held(*args, **kwargs):
        gate.wait(timeout=60)
        return original(*args, **kwargs)

    monkeypatch.setattr(run, "replay_node", held)
    async with weights_app.run_test(size=(100, 30)) as pilot:
        await _at_the_culprit(pilot, demo_pair.fault_module)
        screen = weights_app.screen
        assert isinstance(screen, OperatorScreen)
        table = screen.query_one("#ops", DataTable)
        before = table.cursor_row
        await pilot.press("p")
        await pilot.press("j")  # the replay is still held
        await pilot.pause()
        assert table.cursor_row == before + 1 and weights_app.screen is screen
        assert "replaying" in str(screen.query_one("#status", Static).render())
        gate.set()
        await settle(pilot)
        assert isinstance(weights_app.screen, ReplayScreen)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_replay_dialog_snapshot(snap_compare, weights_app: AccApp, demo_pair, size: tuple[int, int]) -> None:
    async def replayed(pilot) -> None:
        await _at_the_culprit(pilot, demo_pair.fault_module)
        await pilot.press("p")
        await settle(pilot)

    assert snap_compare(weights_app, terminal_size=size, run_before=replayed)


async def test_a_malformed_replay_table_is_said_in_the_status_line(
    weights_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_pair
) -> None:
    config = tmp_path / "tui-acc.toml"
    config.write_text('[replay]\n"Linear" = "no_colon"\n', encoding="utf-8")
    monkeypatch.chdir(weights_copy)
    comparison = open_comparison("with-weights/golden", "with-weights/test")
    app = AccApp(comparison, export_dir=tmp_path, config_file=config)
    async with app.run_test(size=(100, 30)) as pilot:
        await _at_the_culprit(pilot, demo_pair.fault_module)
        screen = app.screen
        await pilot.press("p")
        await settle(pilot)
        assert app.screen is screen  # no dialog: nothing was replayed
        status = str(screen.query_one("#status", Static).render())
        assert str(config) in status and "module:function" in status


async def test_p_on_a_ports_module_lists_the_tests_own_operators_inside_it(npu_case) -> None:
    # the W8A8 port's faulty attention (tests/data/npu): the module has no reference of its own, the
    # records only the test has inside it are replayed, and the faulty fused attention disagrees
    port = npu_case("w8a8-llama-msprobe-mix")
    app = AccApp(open_comparison(port / "golden", port / "attention"), start_at=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        assert app.screen.cursor_key() == "Module.model.layers.0.self_attn.LlamaAttention.forward.2"
        await pilot.press("p")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        inner = {side.node: side.verdict for side in screen.replay.inner}
        assert inner["NPU.npu_fused_infer_attention_score.4.forward"] == "disagrees"
        assert inner["NPU.npu_rotary_mul.8.forward"] == inner["NPU.npu_rotary_mul.9.forward"] == "consistent"
        body = _body(app)
        assert "records only the test has" in body and "npu_fused_infer_attention_score.4" in body
        # the headline reads the test's own operators, not the module's missing reference
        assert (
            "npu_fused_infer_attention_score.4.forward disagrees with its own inputs" in screen.replay.reading
        )
