"""Regenerate screenshots/*.svg from the demo pair: `python scripts/screenshots.py` (`... ranks`: only
the check across ranks' screenshot, from `tui-acc demo --ranks 2`'s run)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tui_acc import CompareOptions, open_comparison  # noqa: E402
from tui_acc.demo import make_baseline, make_demo  # noqa: E402
from tui_acc.redump import RedumpSettings, SideSettings  # noqa: E402
from tui_acc.session import Comparison  # noqa: E402
from tui_acc.tui.app import AccApp  # noqa: E402

SIZE = (110, 32)
RANKS_SIZE = (132, 32)  # every metric beside the pinned token, rank, verdict and operator
SHOT_TIME = datetime(2026, 11, 21, 12, 0, 0)


async def shoot(out: Path) -> None:
    # Exports go to the (temporary) demo folder, at a fixed time, so the dialog reads the same each run.
    # Re-dumps run the demo's own inference script, as a user in the demo folder would configure it.
    run = "python -m tui_acc.demo.infer --demo ."
    settings = RedumpSettings(
        golden=SideSettings("torch", f"{run} --side golden"), test=SideSettings("torch", f"{run} --side test")
    )
    app = AccApp(
        open_comparison("golden", "test"),
        export_dir=Path.cwd(),
        clock=lambda: SHOT_TIME,
        redump=settings,
        opener=open_comparison,
    )
    async with app.run_test(size=SIZE) as pilot:

        async def settle() -> None:
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()

        async def snap(name: str, *keys: str) -> None:
            await pilot.press(*keys)
            await pilot.pause()
            app.save_screenshot(str(out / name))

        await settle()
        await snap("tokens.svg")  # the cursor starts on the first failing token
        await pilot.press("f")  # its operators, at the first failing one
        await settle()
        await snap("operators.svg", "f")

        await snap("sort.svg", "s", "down", "down", "down", "down", "down")  # onto Cosine
        await snap("export.svg", "escape", "e")
        await snap("help.svg", "escape", "question_mark")
        await snap("redump.svg", "escape", "r")
        await pilot.press("enter")
        assert app.redump_run is not None
        await asyncio.get_running_loop().run_in_executor(None, app.redump_run.wait, 300)
        await snap("redump-log.svg", "L")
        await pilot.press("o")
        await settle()
        app.save_screenshot(str(out / "redump-reopened.svg"))


async def shoot_atb(out: Path) -> None:
    app = AccApp(open_comparison("golden", "test"), export_dir=Path(tempfile.mkdtemp()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("f", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        app.save_screenshot(str(out / "operators-atb.svg"))


async def shoot_noise(out: Path) -> None:
    """The fault token's operators judged against the demo's baseline (``--baseline``)."""
    cmp = open_comparison("golden", "test", CompareOptions(baseline="baseline"))
    await _shoot_after(out / "operators-noise.svg", cmp, ("f",), ("enter",), ("f",))


async def _shoot_after(path: Path, cmp: Comparison, *steps: tuple[str, ...]) -> None:
    """Each step's keys pressed once the workers before it are done, then the screen saved."""
    app = AccApp(cmp, export_dir=Path(tempfile.mkdtemp()))
    async with app.run_test(size=SIZE) as pilot:
        for keys in steps:
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press(*keys)
        await pilot.pause()
        app.save_screenshot(str(path))


async def shoot_error_map(out: Path) -> None:
    """``m`` at the demo's first failing op: where its output's error sits."""
    # f again: ◆ centred in the table the picture left
    await _shoot_after(out / "error-map.svg", open_comparison("golden", "test"), ("f",), ("m",), ("f",))


async def shoot_replay(out: Path) -> None:
    """``p`` on the demo's faulty operator, replayed from the demo's own inputs and weights."""
    app = AccApp(open_comparison("golden", "test"), export_dir=Path(tempfile.mkdtemp()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("f")  # the first failing token at its first failing operator (◆)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("f", "p")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.save_screenshot(str(out / "replay.svg"))


async def shoot_hunt(out: Path, demo_out: Path) -> None:
    """The view `tui-acc hunt` opens on the demo, at the culprit (the hunt's dumps in the working folder)."""
    from tui_acc.config import load_config
    from tui_acc.hunt.run import Hunt
    from tui_acc.redump import load_settings

    config = load_config(demo_out / "tui-acc.toml")
    settings = load_settings(config.sections.get("redump"))
    options = CompareOptions(thresholds=config.thresholds)
    result = Hunt(
        settings, options, Path.cwd(), lambda _line: None, lambda _s, _p: True, clock=lambda: SHOT_TIME
    ).run()
    assert result.comparison is not None and result.culprit is not None, result.error
    app = AccApp(
        result.comparison,
        export_dir=Path(tempfile.mkdtemp()),
        start_at=result.first_failing_token,
        greeting=result.greeting(Path.cwd()),
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.save_screenshot(str(out / "hunt.svg"))


async def shoot_ranks(out: Path, dump: Path) -> None:
    """``tui-acc ranks`` on the demo's two-rank run, at its first disagreement (``f``)."""
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.rank_set import open_ranks
    from tui_acc.tui.ranks_app import RanksApp

    app = RanksApp(RanksCheck(open_ranks(str(dump))), export_dir=Path.cwd(), clock=lambda: SHOT_TIME)
    async with app.run_test(size=RANKS_SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        app.save_screenshot(str(out / "ranks.svg"))


def ranks_screenshot(out: Path) -> None:
    from tui_acc.demo.tensor_parallel import make_ranks_demo

    with tempfile.TemporaryDirectory() as tmp:
        demo = make_ranks_demo(Path(tmp) / "tui-acc-demo-ranks", world=2, seed=0)
        os.chdir(demo.out)
        asyncio.run(shoot_ranks(out, demo.dump.relative_to(demo.out)))
        # the same run gathered against its one-device golden: f f at the faulty all-reduce's layer, d:
        # the detail panel saying which rank's copy of its output is off
        gathered = open_comparison("golden", "test", CompareOptions(cache=False))
        asyncio.run(_shoot_after(out / "operators-gathered.svg", gathered, ("f",), ("f",), ("d",)))


async def shoot_single(out: Path, test: Path) -> None:
    """``tui-acc DUMP``: the demo's test dump with a NaN injected at token 2, at its first anomaly."""
    import shutil

    import torch

    from tui_acc.anomalies.session import open_single

    shutil.copytree(test, "dump")
    (device,) = Path("dump").glob("msit_dump_*/torch_tensors/*_*")
    path = device / "2" / "root.model.layers.1.mlp.act_fn" / "output.pth"
    torch.save(torch.load(path).index_fill(-1, torch.tensor([5]), float("nan")), path)
    app = AccApp(open_single("dump"), export_dir=Path(tempfile.mkdtemp()))
    async with app.run_test(size=SIZE) as pilot:
        for keys in (("f",), ("f",)):
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press(*keys)
        await pilot.pause()
        app.save_screenshot(str(out / "single.svg"))


def main() -> None:
    out = REPO / "screenshots"
    out.mkdir(exist_ok=True)
    if sys.argv[1:] == ["ranks"]:  # only the check across ranks' screenshot
        ranks_screenshot(out)
        return
    ranks_screenshot(out)
    with tempfile.TemporaryDirectory() as tmp:
        demo = make_demo(Path(tmp) / "tui-acc-demo", seed=0)
        os.chdir(demo.out)  # relative paths in the title line
        asyncio.run(shoot(out))
        asyncio.run(shoot_error_map(out))
        make_baseline(demo)
        asyncio.run(shoot_noise(out))
        hunting = Path(tmp) / "hunt"
        hunting.mkdir()
        os.chdir(hunting)
        asyncio.run(shoot_hunt(out, demo.out))
        asyncio.run(shoot_single(out, demo.test))
        atb = make_demo(Path(tmp) / "tui-acc-demo-atb", seed=0, layout="atb")
        os.chdir(atb.out)
        asyncio.run(shoot_atb(out))
        os.chdir(demo.out)
        asyncio.run(shoot_replay(out))
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.svg')))} to {out}")


if __name__ == "__main__":
    main()
