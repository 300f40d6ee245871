"""``tui-acc demo``: a golden/test dump pair with one known fault, built locally in seconds."""

from __future__ import annotations

import json
import random
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tui_acc import __version__
from tui_acc.errors import TuiAccError


class DemoError(TuiAccError):
    """The demo cannot be written where asked."""


@dataclass(frozen=True)
class Demo:
    out: Path
    golden: Path
    test: Path
    fault_token: int
    fault_module: str
    fault_description: str
    golden_ids: list[int]
    test_ids: list[int]

    def describe(self) -> str:
        """What was written, the fault injected, the ids each run generated and the command that compares
        the pair, one per line."""
        return "\n".join(
            [
                f"golden dump (float32):        {self.golden}",
                f"test dump (bfloat16 + fault): {self.test}",
                f"injected fault: {self.fault_description}",
                f"generated ids, golden: {self.golden_ids}",
                f"generated ids, test:   {self.test_ids}",
                f"compare them:  {shlex.join(self.open_argv())}",
            ]
        )

    def open_argv(self) -> list[str]:
        """The command that opens the pair, ``r`` included: the demo's tui-acc.toml is not in the
        working directory, where tui-acc looks for one, so it is named."""
        return ["tui-acc", "--config", str(self.out / CONFIG), str(self.golden), str(self.test)]


MANIFEST = "demo.json"
CONFIG = "tui-acc.toml"
NEW_TOKENS = 8
FAULT_TOKEN = 3
FAULT_MODULE = "root.model.layers.2.mlp.down_proj"
LAYERS = 4  # the demo model's default depth (--layers: 12 for msit's layer detection, say)


LAYOUTS = ("torch", "atb", "mindie")


def make_demo(
    out: Path,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    layout: str = "torch",
    layers: int = LAYERS,
) -> Demo:
    """Write ``out/golden`` and ``out/test``; reuse them if ``out`` already holds this demo.

    ``layout`` is the test dump's: ``torch`` (msit torch, like the golden), ``atb`` (msit ATB
    ``.bin`` files and topology) or ``mindie`` (ATB in MindIE's layout).
    """
    if layout not in LAYOUTS:
        raise DemoError(f"unknown demo layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    if layers < 3:  # the fault is in layer 2
        raise DemoError(f"--layers {layers}: the demo needs at least 3 layers (its fault is in layer 2)")
    say = progress or (lambda _msg: None)
    out = out.expanduser()
    existing = _load_existing(out, seed, layout, layers)
    if existing is not None:
        say(f"reusing the demo already in {out}")
        write_redump_config(out, layout)
        return existing
    if (out / MANIFEST).is_file():
        raise DemoError(
            f"{out}: holds a demo made with other settings (seed, --layers, layout) or by another "
            "tui-acc (an earlier one dumped no weights, so p could not replay it); remove it or "
            "choose another --out"
        )
    if out.exists() and any(out.iterdir()):
        raise DemoError(f"{out}: exists and is not an empty folder or an earlier demo; choose another --out")
    from tui_acc.demo.model import TinyConfig
    from tui_acc.demo.run import run_pair  # the model's modules load only when a demo is really built

    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    prompt = random.Random(seed).sample(range(1, 500), 8)
    try:
        config = TinyConfig(num_layers=layers)
        result = run_pair(
            staging,
            seed,
            prompt,
            NEW_TOKENS,
            fault_module=FAULT_MODULE,
            fault_token=FAULT_TOKEN,
            say=say,
            config=config,
        )
        if layout != "torch":
            from tui_acc.demo.atb_export import export_atb

            say(f"re-encoding the test run as an {'MindIE ' if layout == 'mindie' else ''}ATB dump ...")
            staging_atb = staging / "test_atb"
            export_atb(staging / "test", staging_atb, mindie=layout == "mindie")
            shutil.rmtree(staging / "test")
            staging_atb.rename(staging / "test")
        for side in ("golden", "test"):
            (staging / side).rename(out / side)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    demo = Demo(
        out=out,
        golden=out / "golden",
        test=out / "test",
        fault_token=FAULT_TOKEN,
        fault_module=FAULT_MODULE,
        fault_description=result.fault_description,
        golden_ids=result.golden_ids,
        test_ids=result.test_ids,
    )
    manifest = {
        "version": __version__,
        "seed": seed,
        "layers": layers,
        "layout": layout,
        "weights": True,  # msit's weights/: p replays the culprit (an earlier demo had none)
        "prompt": prompt,
        "fault": {"token": FAULT_TOKEN, "module": FAULT_MODULE, "description": result.fault_description},
        "golden_ids": result.golden_ids,
        "test_ids": result.test_ids,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    write_redump_config(out, layout)
    return demo


BASELINE = "baseline"


def make_baseline(demo: Demo, progress: Callable[[str], None] | None = None) -> Path:
    """``demo.out/baseline``: the demo's model run clean in bfloat16, rounding toward zero (the test
    rounds to nearest), for ``--baseline``; reused when it is there already."""
    say = progress or (lambda _msg: None)
    target = demo.out / BASELINE
    if target.is_dir():
        say(f"reusing the baseline already in {target}")
        return target
    from tui_acc.demo.run import run_baseline

    manifest = json.loads((demo.out / MANIFEST).read_text(encoding="utf-8"))
    staging = demo.out / ".partial-baseline"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        from tui_acc.demo.model import TinyConfig

        config = TinyConfig(num_layers=manifest.get("layers", LAYERS))
        run_baseline(staging, manifest["seed"], manifest["prompt"], NEW_TOKENS, say=say, config=config)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def write_redump_config(out: Path, layout: str) -> None:
    """A tui-acc.toml that points ``r`` at the demo's own inference script (never replaces one)."""
    import sys

    from tui_acc.redump.settings import toml_string

    config = out / CONFIG
    if config.exists():
        return
    run = [sys.executable, "-m", "tui_acc.demo.infer", "--demo", str(out.resolve())]
    lines = ["# Written by `tui-acc demo`: how `r` re-dumps this pair (docs/redump.md).", ""]
    for side in ("golden", "test"):
        lines.append(f"[redump.{side}]")
        if side == "test" and layout != "torch":
            # the demo's ATB run is an msit torch dump re-encoded, and so is its re-dump: the script writes
            # the ATB layout itself (no msit here), so it is a custom dumper, not msit-atb
            argv = [*run, "--side", side, "--layout", layout]
            lines += ['dumper = "custom"', f"command = [{', '.join(toml_string(a) for a in argv)}]", ""]
        else:
            exec_ = shlex.join([*run, "--side", side])
            lines += ['dumper = "torch"', f"exec = {toml_string(exec_)}", ""]
    config.write_text("\n".join(lines), encoding="utf-8")


def _load_existing(out: Path, seed: int, layout: str, layers: int) -> Demo | None:
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("seed") != seed or manifest.get("version") != __version__:
        return None
    if manifest.get("layers", LAYERS) != layers:
        return None
    if manifest.get("layout", "torch") != layout or not manifest.get("weights"):
        return None
    if not ((out / "golden").is_dir() and (out / "test").is_dir()):
        return None
    fault = manifest["fault"]
    return Demo(
        out=out,
        golden=out / "golden",
        test=out / "test",
        fault_token=fault["token"],
        fault_module=fault["module"],
        fault_description=fault["description"],
        golden_ids=manifest["golden_ids"],
        test_ids=manifest["test_ids"],
    )
