"""Run the tiny model twice, golden (float32) and test (bfloat16 + fault), capturing both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tui_acc.demo.capture import MsitTorchCapture
from tui_acc.demo.faults import StaleTailTile
from tui_acc.demo.model import TinyConfig, build_model, generate


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
    fault_module: str,
    fault_token: int,
    say: Callable[[str], None],
    config: TinyConfig | None = None,
) -> PairResult:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order: the same seed gives the same bits on every run
    try:
        return _run_pair(out, seed, prompt, new_tokens, fault_module, fault_token, say, config)
    finally:
        torch.set_num_threads(threads)


def _run_pair(
    out: Path,
    seed: int,
    prompt: list[int],
    new_tokens: int,
    fault_module: str,
    fault_token: int,
    say: Callable[[str], None],
    config: TinyConfig | None,
) -> PairResult:
    say("golden run: float32 ...")
    golden_model = build_model(seed, config)
    with MsitTorchCapture(golden_model, out / "golden"):
        golden_ids = generate(golden_model, prompt, new_tokens)

    say(f"test run: bfloat16, fault injected at token {fault_token} ...")
    test_model = build_model(seed, config).to(torch.bfloat16)
    fault = StaleTailTile(fault_module, fault_token)
    with MsitTorchCapture(test_model, out / "test") as capture:
        handle = fault.install(test_model, lambda: capture.token)
        try:
            test_ids = generate(test_model, prompt, new_tokens)
        finally:
            handle.remove()
    return PairResult(golden_ids, test_ids, fault.describe())
