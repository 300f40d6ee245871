"""Real msprobe dumps of a Qwen3 whose MLP is as wide as its vocabulary: ``tests/data/msprobe/*.tar.xz``.

A call stream where width alone cannot tell the logits: ``vocab_size == intermediate_size == 256``, so
layer 0's ``gate_proj`` is the first ``F.linear`` whose output is as wide as the embedding table.
The reader must still end each forward pass at the lm_head's projection, and take the logits from
the lm_head at mix (docs/formats.md §3.4). Both cases record statistics only: the stream's shape is
what the tests need, and the archives stay small (under 60 kB each).

Each case dumps a random-weight ``Qwen3ForCausalLM`` (hidden 32, 2 layers, 4 heads, 2 KV heads,
initializer_range 0.2, seeded) twice through mindstudio-probe 26.2.0's ``PrecisionDebugger``
around ``generate()`` (greedy, 4 new tokens): golden in float32, test in bfloat16 with layer 1's
``down_proj`` F.linear scaling its last 8 output columns by 2 at token 2 (the fault helper of
``make_model_fixtures.py``), and packs both with a ``case.json``. Run it in the tools' virtual
environment (route in ``make_model_fixtures.py``'s docstring), from the repository::

    python scripts/make_msprobe_pass_fixtures.py [--only CASE ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_model_fixtures as models

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "msprobe"
QWEN3 = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "tie_word_embeddings": False,
    "vocab_size": 256,
    "intermediate_size": 256,
    "attn_implementation": "eager",
    "initializer_range": 0.2,
}

CASES: dict[str, models.Case] = {
    "qwen3-msprobe-L1-wide-mlp": models.Case(
        "qwen3",
        "msprobe",
        "bfloat16",
        "model.layers.1.mlp.down_proj",
        2,
        "L1",
        "statistics",
        api_fault=True,
        fault_kind="scale",
    ),
    # mix: module records around the API calls; the logits are the lm_head module's, not gate_proj's
    "qwen3-msprobe-mix-wide-mlp": models.Case(
        "qwen3",
        "msprobe",
        "bfloat16",
        "model.layers.1.mlp.down_proj",
        2,
        "mix",
        "statistics",
        api_fault=True,
        fault_kind="scale",
    ),
}


def build_qwen3() -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(models.SEED)
    return tf.Qwen3ForCausalLM(tf.Qwen3Config(**QWEN3)).eval()


def dump_side(name: str, side: str, out: Path) -> None:
    """Run one side of a case and dump it into ``out`` (which must not exist)."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    case = CASES[name]
    model = build_qwen3()
    record: dict[str, Any] = {}
    if side == "test":
        model = model.to(getattr(torch, case.test_dtype))
        models.install_api_fault(model, case, models.TokenCounter(model), record)
    out.mkdir(parents=True)
    config = out / f"{side}_config.json"
    config.write_text(json.dumps(models._msprobe_config(case, out)), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model)
    record["generated"] = models._generate(model)
    debugger.stop()
    debugger.step()
    config.rename(out.parent / config.name)
    (out.parent / f"{side}_run.json").write_text(json.dumps(record), encoding="utf-8")


def make_case(name: str, work: Path, out_dir: Path) -> Path:
    """Dump both sides, take out the generating machine's paths, pack them; returns the archive."""
    case_dir = work / name
    for side in ("golden", "test"):
        command = [sys.executable, __file__, "--side", name, side, str(case_dir / side)]
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    models._relativise(case_dir)
    case = CASES[name]
    runs = {side: json.loads((case_dir / f"{side}_run.json").read_text()) for side in ("golden", "test")}
    description = {
        "case": name,
        **asdict(case),
        "config": QWEN3,
        "prompt": models.PROMPT,
        "new_tokens": models.NEW_TOKENS,
        "golden_dtype": "float32",
        "fault": f"{case.fault_module} at token {case.fault_token}: its last {models.TILE} output "
        "columns come out doubled (inside its F.linear call)",
        "fault_record": runs["test"].get("fault_record"),
        "logits_record_api": "Functional.linear",  # lm_head's projection, the pass's last linear
        "generated": {side: runs[side]["generated"] for side in runs},
        "tools": models._versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    for side in ("golden", "test"):
        (case_dir / f"{side}_run.json").unlink()
    archive = out_dir / f"{name}.tar.xz"
    models._pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="make only these cases")
    parser.add_argument("--out", type=Path, default=OUT, help="where the archives go")
    parser.add_argument("--side", nargs=3, metavar=("CASE", "SIDE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        name, side, out = args.side
        dump_side(name, side, Path(out))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-msprobe-") as work:
        for name in args.only or sorted(CASES):
            archive = make_case(name, Path(work), args.out)
            print(f"{archive}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
