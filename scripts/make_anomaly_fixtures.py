"""Normal arithmetic that looks like an anomaly: ``tests/data/anomalies/normal-arithmetic.tar.xz``.

A small module runs, in float32, the operators whose outputs are far larger than their inputs by
design (docs/single-dump.md, "What counts as normal"), each on values chosen so that a rule judging
an output by its largest input alone would call it a 1000x jump, an Inf or an all-zero output: the
rsqrt and the power -0.5 of a norm's variance of 1e-6, a reciprocal and divisions by it, exp of a
score of 10, a softmax over one tiny score, a log of probabilities of 1e-5, a cube of an outlier of
100, ``10000 ** (arange / d)``, layer and RMS norms of inputs of 1e-6, a rotary embedding of them, a
cumsum and a sum of 4096 ones, a histogram, masks filled with float32's minimum and with -inf,
``1.0 - mask`` of a mask of ones, ``where`` choosing its zero, a fill with 0 (and ``full(-inf)``,
``zeros``, ``zero_``, which msprobe does not record). Nothing here is
wrong: the single-dump scan must raise nothing on it.

mindstudio-probe 26.2.0's ``PrecisionDebugger`` dumps it at level mix (modules and API calls), twice,
each in a process of its own: task ``tensor`` (``tensor/``) and task ``statistics`` (``statistics/``).
Two forward passes (tokens 0 and 1), seeded.

Run in the tools venv (docs/formats.md §0; the route is in make_model_fixtures.py's docstring)::

    python scripts/make_anomaly_fixtures.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_model_fixtures import _pack, _relativise, _versions

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "anomalies" / "normal-arithmetic.tar.xz"
SEED = 4321
TASKS = ("tensor", "statistics")


def build() -> Any:
    """The module (built in the dumping process: torch is imported there only)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class RMSNorm(nn.Module):
        """Llama's: x * rsqrt(mean(x^2) + eps) * w; a variance of 1e-6 makes rsqrt 1000."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(width))

        def forward(self, x: Any) -> Any:
            variance = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(variance + 1e-6))

    class RotaryEmbedding(nn.Module):
        """cos and sin of positions times 1 / 10000^(2i/d): at most 1, whatever x's scale."""

        def forward(self, x: Any, positions: Any) -> Any:
            exponents = torch.arange(0, 16, 2, dtype=torch.int64).float() / 16
            inv_freq = 1.0 / (10000**exponents)
            freqs = positions.float()[..., None] * inv_freq
            return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)

    class Body(nn.Module):
        """Every operator, inside one module: msprobe's readers make a token of each call of a
        top-level module (as a model's ``model`` submodule is)."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = RMSNorm(64)
            self.rotary_emb = RotaryEmbedding()
            self.embed_tokens = nn.Embedding(32, 64)
            with torch.no_grad():
                self.embed_tokens.weight.mul_(1e-3)

        def forward(self, ids: Any, outliers: Any, scores: Any, probabilities: Any) -> Any:
            x = self.embed_tokens(ids)  # an embedding lookup: int ids in, rows of a tiny table out
            tiny = x * 1e-3  # values near 1e-6
            normed = self.norm(x)
            self.rotary_emb(tiny, torch.arange(ids.shape[-1])[None, :])
            variance = tiny.pow(2).mean(-1, keepdim=True)
            torch.reciprocal(variance)
            variance.pow(-0.5)
            x / variance
            1.0 / variance
            x / 1e-4
            F.layer_norm(tiny, (64,))
            torch.exp(scores)
            F.softmax(tiny[..., :1], dim=-1)
            F.log_softmax(tiny[..., :8], dim=-1)
            torch.log(probabilities)
            torch.pow(outliers, 3.0)
            10000 ** torch.linspace(0.0, 1.0, 8)
            ones = torch.ones(1, 4096)
            ones.cumsum(-1)
            ones.sum(-1)
            torch.histc(tiny, bins=4, min=-1.0, max=1.0)
            causal = torch.ones(8, 8, dtype=torch.bool).triu(1)
            scores.masked_fill(causal, torch.finfo(torch.float32).min)
            scores.masked_fill(causal, float("-inf"))
            torch.full((8, 8), float("-inf")).triu(1)
            (1.0 - ones[:, :8]) * torch.finfo(torch.float32).min
            everywhere = torch.ones(1, 8, dtype=torch.bool)
            torch.where(everywhere, torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min))
            torch.zeros(4)
            torch.ones(4).zero_()
            scores.masked_fill(torch.ones_like(causal), 0.0)
            return normed

    class NormalArithmetic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Body()

        def forward(self, *args: Any) -> Any:
            return self.model(*args)

    return NormalArithmetic().eval()


def inputs(token: int) -> tuple[Any, ...]:
    """Token ``token``'s arguments, seeded."""
    import torch

    generator = torch.Generator().manual_seed(SEED + token)
    ids = torch.randint(0, 32, (1, 8), generator=generator)
    outliers = torch.randn(1, 8, 64, generator=generator)
    outliers[0, 0, 0] = 100.0  # an LLM's massive activation: its cube is 1e6
    scores = torch.randn(8, 8, generator=generator)
    scores[0, 0] = 10.0  # exp(10) = 22026
    probabilities = torch.rand(16, generator=generator) * 1e-5 + 1e-6
    return ids, outliers, scores, probabilities


def dump_side(task: str, out: Path) -> None:
    """Dump the module's two forward passes with ``task`` into ``out`` (its own process)."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    model = build()
    out.mkdir(parents=True)
    config = out.parent / f"{task}_config.json"
    section: dict[str, Any] = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = "statistics"
    settings = {"task": task, "dump_path": str(out), "rank": [], "step": [], "level": "mix"}
    config.write_text(json.dumps({**settings, task: section}), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model)
    with torch.no_grad():
        for token in range(2):
            model(*inputs(token))
    debugger.stop()
    debugger.step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", nargs=2, metavar=("TASK", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        dump_side(args.side[0], Path(args.side[1]))
        return 0
    with tempfile.TemporaryDirectory() as work:
        case = Path(work) / "normal-arithmetic"
        for task in TASKS:
            subprocess.run([sys.executable, __file__, "--side", task, str(case / task)], check=True)
        _relativise(case)
        info = {"case": "normal-arithmetic", "level": "mix", "dtype": "float32", "tokens": 2, "seed": SEED}
        info["tools"] = _versions()
        (case / "case.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        _pack(case, OUT)
    print(f"{OUT} ({OUT.stat().st_size} bytes)")
    shutil.rmtree(case, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
