"""Run the tiny model twice, golden (float32) and test (bfloat16 + fault), capturing both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tui_acc.demo.capture import MsitTorchCapture
from tui_acc.demo.faults import StaleTailTile
from tui_acc.demo.model import BFLOAT16, TinyConfig, build_model, generate, rounding_toward_zero


@dataclass(frozen=True)
class PairResult:
    golden_ids: list[int]
    test_ids: list[int]
    fault_description: str


def run_pair(
    out: Path,
    seed: int,
    prompt: list[int],
    new_tokens: int,
    *,
    fault_module: str,
    fault_token: int,
    say: Callable[[str], None],
    config: TinyConfig | None = None,
) -> PairResult:
    """The golden run (float32) and the test run (bfloat16, the fault injected), each captured in msit's torch
    layout under ``out``, weights included (msit's ``dump_weight=True``: ``p`` replays from them).

    Args:
        out: the folder; ``golden/`` and ``test/`` are written below it.
        seed: the weights' seed (the same model on both sides).
        prompt: the prompt's token ids.
        new_tokens: how many tokens each run generates.
        fault_module: the module whose output the fault corrupts (its dump name, ``root.…``).
        fault_token: the token at which it does.
        say: where progress lines go.
        config: the model's size (``TinyConfig()`` by default).

    Returns:
        The ids each run generated and the fault in words.
    """
    say("golden run: float32 ...")
    golden_model = build_model(seed, config)
    with MsitTorchCapture(golden_model, out / "golden", dump_weight=True):
        golden_ids = generate(golden_model, prompt, new_tokens)

    say(f"test run: bfloat16, fault injected at token {fault_token} ...")
    test_model = build_model(seed, config).to(BFLOAT16)
    fault = StaleTailTile(fault_module, fault_token)
    with MsitTorchCapture(test_model, out / "test", dump_weight=True) as capture:
        handle = fault.install(test_model, lambda: capture.token)
        try:
            test_ids = generate(test_model, prompt, new_tokens)
        finally:
            handle.remove()
    return PairResult(golden_ids, test_ids, fault.describe())


def run_baseline(
    out: Path,
    seed: int,
    prompt: list[int],
    new_tokens: int,
    *,
    say: Callable[[str], None],
    config: TinyConfig | None = None,
) -> list[int]:
    """A clean bfloat16 run that rounds toward zero: the test's dtype, another device's rounding."""
    say("baseline run: bfloat16 rounding toward zero, no fault ...")
    model = build_model(seed, config).to(BFLOAT16)
    with rounding_toward_zero(), MsitTorchCapture(model, out, dump_weight=True):
        return generate(model, prompt, new_tokens)
