"""Real-tool dumps of the families, dump kinds and fault places tests/data/models lacks:
``tests/data/families/<case>.tar.xz``.

Each case runs a random-weight model built from a transformers config three times through the real
dumper (msit 8.2.0's ``register_hook``, mindstudio-probe 26.2.0's ``PrecisionDebugger``, or SGLang's
dumper as ``make_sglang_fixtures.py`` writes it): ``golden/`` in float32, ``test/`` in a lower
precision with one bug inside the model's computation, ``clean/`` the same lower-precision run
without it. ``case.json`` says where the bug is, what a correct tool names at each token, and the
error the clean run already has there (measured here, from the dumps, with numpy).

The faults (``family_faults.py``) are bugs a port could have: a KV cache block read with another
block's scale or its newest row read before it was written, a softmax whose normaliser is short, a
per-channel dequantisation scale wrong on one tile of output columns, quick_gelu where the tanh GELU
belongs, an embedding gathered from an fp8 copy, a router keeping an expert it did not choose.

Run it in the tools' virtual environment (route in ``make_model_fixtures.py``'s docstring), from
the repository::

    python scripts/make_family_fixtures.py [--only CASE ...] [--seed N] [--out DIR]

Every side runs in a process of its own (msit's DumpConfig is a process-wide singleton). ``--seed``
and ``--out`` are for trying seeds (``qwen2moe-msprobe-L0-gate`` was chosen so).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import family_faults as faults
import family_measure as measure
import make_model_fixtures as models
from family_faults import Fault

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "families"
PROMPT = models.PROMPT
NEW_TOKENS = models.NEW_TOKENS
SEED = models.SEED
SIDES = ("golden", "test", "clean")
# SGLang's dumper with DUMPER_FILTER set so that no module's inputs are written (dumper.py:490-500)
OUTPUTS_ONLY = "'.inputs.' not in name"


@dataclass(frozen=True)
class Case:
    family: str  # a key of BUILDERS
    dumper: str  # msprobe | msit | sglang
    test_dtype: str  # bfloat16 | float16
    fault: Fault
    why: str  # why the named operator is the one a correct tool names
    level: str = ""  # msprobe: L0 | L1 | mix
    task: str = "tensor"  # msprobe: tensor | statistics
    summary_mode: str = "statistics"  # msprobe statistics task
    seed: int = SEED
    config: dict[str, Any] = field(default_factory=dict)  # overrides of the family's config
    # the weights' precision in the checkpoint both sides load: the test's (a released bf16 or fp16
    # checkpoint, the golden run in float32), or float32 (the golden keeps every bit, as
    # make_model_fixtures.py's cases do, and the test's weights are a cast)
    checkpoint: str = "test"
    note: str = ""


CASES: dict[str, Case] = {
    "qwen3-msprobe-L0-kvcache": Case(
        "qwen3",
        "msprobe",
        "bfloat16",
        Fault("kv_scale", "model.layers.1.self_attn", (2,), factor=1.1),
        "the attention's own code reads its value cache wrong at token 2: its q/k/v projections "
        "and norms are right and o_proj only carries the error; transformers passes the attention "
        "its inputs as keyword arguments, which msprobe records under input_kwargs",
        level="L0",
    ),
    "qwen3-msprobe-L1-softmax": Case(
        "qwen3",
        "msprobe",
        "bfloat16",
        Fault("scale", "model.layers.1.self_attn", (2,), api="softmax", factor=1.025),
        "the softmax of layer 1's attention (a short normaliser) is wrong at token 2 while the "
        "scores it is given are right: that Functional.softmax record is where the error starts",
        level="L1",
        config={"intermediate_size": 256},
        note="vocab_size == intermediate_size == 256: the MLP's projections have the logits' width",
    ),
    "qwen2moe-msprobe-L0-gate": Case(
        "qwen2_moe",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.1.mlp.shared_expert.down_proj", (2,), factor=1.08),
        "layer 1's shared expert down projection (a wrong dequantisation scale on one tile) is "
        "wrong at token 2; the shared_expert_gates (one output value per row) are right at every token",
        level="L0",
        checkpoint="float32",
        note="no seed tried made tui-acc name a shared_expert_gate (1234 and 1-11 with this float32 "
        "checkpoint, 1-12 with a bf16 one): this is the default seed; seeds 1, 6, 8 and 9 label "
        "a router or experts local in the clean pair too (bf16 routing flips)",
    ),
    "gemma3-msprobe-L0-gelu": Case(
        "gemma3",
        "msprobe",
        "bfloat16",
        Fault("quick_gelu", "model.layers.1.mlp.act_fn", None),
        "layer 1's activation is quick_gelu where the tanh GELU belongs, at every token, the "
        "prefill included; what it is given (gate_proj's output) is right",
        level="L0",
    ),
    "llama-msprobe-L0-embedding": Case(
        "llama",
        "msprobe",
        "bfloat16",
        Fault("fp8", "model.embed_tokens", (0,)),
        "the prefill gathers the embedding rows from an fp8 (e4m3) copy of the table; the token "
        "ids are identical, so the embedding is where the error starts, at the prefill only",
        level="L0",
        seed=1,
        checkpoint="float32",
        note="a float32 checkpoint: the clean run's embedding differs from the golden's by the "
        "bf16 rounding of the table alone",
    ),
    "qwen3-msit-lmhead": Case(
        "qwen3",
        "msit",
        "float16",
        Fault("tile_scale", "lm_head", (1,), factor=1.12, columns=32),
        "lm_head (a wrong dequantisation scale on one vocabulary tile) is wrong at token 1 while "
        "the final norm feeding it is right: the last operator is where the error starts",
    ),
    "qwen3-sglang-outputs": Case(
        "qwen3",
        "sglang",
        "bfloat16",
        Fault("tile_scale", "model.layers.0.mlp.up_proj", (2,), factor=1.11),
        "layer 0's up projection is wrong at token 2; the dump holds module outputs only "
        "(DUMPER_FILTER drops every inputs.* name), so what feeds a module is the output of the "
        "one before it, and the final norm is fed by the last layer",
        seed=1,
        note=f"SGLang dumper, DUMPER_NON_INTRUSIVE_MODE=all, DUMPER_FILTER={OUTPUTS_ONLY!r}",
    ),
    "phi3-msprobe-mix": Case(
        "phi3",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.1.mlp.gate_up_proj", (1,), api="linear", factor=1.1),
        "the F.linear call inside layer 1's fused gate_up_proj is wrong at token 1 (a wrong "
        "dequantisation scale on one tile); the module around it only contains it",
        level="mix",
    ),
    "gptneox-msit": Case(
        "gpt_neox",
        "msit",
        "float16",
        Fault("tile_scale", "gpt_neox.layers.0.attention.dense", (2,), factor=1.06),
        "layer 0's attention output projection is wrong at token 2; with the parallel residual "
        "the MLP beside it reads the same, right, input; msit drops keyword arguments",
    ),
    "mixtral-msprobe-L0-statistics": Case(
        "mixtral",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.1.mlp.experts", (1,), factor=1.25),
        "layer 1's experts (the sparse MoE block's fused experts) are wrong at token 1 while the "
        "router (gate) is right; the dump holds statistics only",
        level="L0",
        task="statistics",
    ),
    "deepseekv3-msprobe-L0": Case(
        "deepseek_v3",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.0.self_attn.kv_b_proj", (2,), factor=1.09),
        "layer 0's MLA kv_b_proj (the latent KV up-projection) is wrong at token 2 while the "
        "kv_a_layernorm feeding it is right",
        level="L0",
    ),
    "qwen2-msprobe-L0-decode": Case(
        "qwen2",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.0.mlp.up_proj", (3,), factor=1.09),
        "at token 3 only, layer 0's up_proj dequantises one tile of output columns with the "
        "previous step's scale (a stale value); its input is right",
        level="L0",
    ),
    "mistral-msit-kvstale": Case(
        "mistral",
        "msit",
        "float16",
        Fault("kv_stale", "model.layers.0.self_attn", (2,)),
        "at decode token 2 layer 0's attention reads the newest position's value row before it was "
        "written (the previous position's): its q/k/v projections are right and o_proj only carries "
        "the error, so the attention's own code is where it starts; msit keeps no keyword inputs, "
        "and transformers passes the attention all of its own (hidden states, position embeddings, "
        "cache), so nothing in the dump feeds it but what came before it at the token",
        note="sliding_window 4: the attention at token 2 (position 7) sees positions 4-7",
    ),
    "olmo2-msprobe-L0-tiny": Case(
        "olmo2",
        "msprobe",
        "bfloat16",
        Fault("scale", "model.layers.1.mlp.down_proj", (2,), factor=1.01),
        "layer 1's down_proj output is 1 % too large at token 2, on a right input: a fault about the "
        "size of the clean run's own error there. OLMo2's rotary embedding returns its cos and sin "
        "in float32, computed from the inv_freq buffer the cast to bfloat16 rounded: rounding of the "
        "model's dtype, which a correct tool does not label local at any token",
        level="L0",
    ),
    "olmo2-msprobe-L0-statistics": Case(
        "olmo2",
        "msprobe",
        "bfloat16",
        Fault("head_scale", "model.layers.0.self_attn", (2,), factor=1.3, columns=1),
        "layer 0's attention output of head 1 is 30 % too large at decode token 2, between its score "
        "arithmetic and o_proj: in the attention's own code, which no record holds (its q/k/v "
        "projections and norms are right, o_proj computes right from a wrong input). The dump holds "
        "statistics only, so the attention is named by the threshold rule",
        level="L0",
        task="statistics",
    ),
    "qwen3moe-msprobe-L0-router": Case(
        "qwen3_moe",
        "msprobe",
        "bfloat16",
        Fault("router_swap", "model.layers.1.mlp.gate", (2,)),
        "layer 1's router keeps a wrong expert for decode token 2 (its second choice replaced by an "
        "expert it did not choose, fault_detail): its logits and scores are right, its indices are "
        "not, so the router is where the error starts; the experts after it compute right what "
        "they are given, only fed other experts than the golden's, so they are not local",
        level="L0",
        note="fault_error and clean_error are of the router's first output, its logits, which the "
        "fault leaves right: what it gets wrong is its third output, the kept experts' indices",
    ),
    "gemma2-msprobe-L1-big": Case(
        "gemma2",
        "msprobe",
        "bfloat16",
        Fault("scale", "model.layers.0.mlp.up_proj", (1,), api="linear", factor=1.5),
        "the F.linear of layer 0's up_proj outputs 50 % too much at token 1, on a right input. "
        "Gemma2's RMSNorms compute x * (1 + w) with w = 0 (their initial weights): Tensor.__mul__ "
        "records whose output equals their input, which are not in-place operators (no __imul__) "
        "and not local",
        level="L1",
        note="soft-capping at the Gemma2 defaults (attention 50, final logits 30); sliding_window 4",
    ),
    "qwen2moe-msprobe-L0-flip": Case(
        "qwen2_moe",
        "msprobe",
        "bfloat16",
        Fault("tile_scale", "model.layers.1.mlp.shared_expert.down_proj", (2,), factor=1.08),
        "qwen2moe-msprobe-L0-gate's model and fault at another seed: layer 1's shared expert down "
        "projection is wrong at token 2. A router whose bfloat16 scores of two experts are near-equal "
        "keeps another expert than the golden's: the top k of its own scores, a flip of rounding, "
        "not its fault, and the experts fed the other expert are not judged on it",
        level="L0",
        seed=1,
        checkpoint="float32",
        note="the routers flip at tokens 0 and 3, in the test and the clean run alike (their dumps' "
        "indices against the golden's): layer 0's at token 0, the prompt's second row (experts 3, 0 "
        "kept for the golden's 3, 2; golden probabilities 0.2150 and 0.2155), and layer 1's at "
        "token 3 (1, 3 for 1, 2; 0.1826 and 0.1848). At token 2 layer 1's router fails by what "
        "came in (the cache holds the flipped row) but keeps the golden's experts. The logits fail "
        "at token 0 in both pairs, where nothing is local; every run generates the same tokens",
    ),
}


# --- one side, in its own process -----------------------------------------------------------


def dump_side(name: str, side: str, out: Path, seed: int) -> None:
    """Run one side of a case (golden, test or clean) and dump it into ``out`` (which must not exist)."""
    import torch

    case = replace(CASES[name], seed=seed)
    checkpoint = case.test_dtype if case.checkpoint == "test" else case.checkpoint
    model = faults.build_model(case.family, case.seed, case.config, checkpoint)
    if side != "golden":
        model = model.to(getattr(torch, case.test_dtype))
    tokens = models.TokenCounter(model)
    record: dict[str, Any] = {"culprit": faults.culprit_names(model, case.fault, case.dumper)}
    if side == "test":
        faults.install(model, case.fault, tokens, record)
    out.mkdir(parents=True)
    if case.dumper == "msit":
        from msit_llm import DumpConfig, register_hook

        register_hook(model, DumpConfig(dump_path=str(out), token_range=list(range(NEW_TOKENS))))
        ids = models._generate(model)
    elif case.dumper == "sglang":
        ids = _sglang_run(model, out)
    else:
        from msprobe.pytorch import PrecisionDebugger

        config = out.parent / f"{side}_config.json"
        config.write_text(json.dumps(models._msprobe_config(case, out)), encoding="utf-8")
        debugger = PrecisionDebugger(config_path=str(config))
        debugger.start(model)
        ids = models._generate(model)
        debugger.stop()
        debugger.step()
    record["generated"] = ids
    (out.parent / f"{side}_run.json").write_text(json.dumps(record), encoding="utf-8")


def _sglang_run(model: Any, out: Path) -> list[int]:
    """Greedy decoding under SGLang's dumper (its automatic hooks, outputs only), a step per pass."""
    import make_sglang_fixtures as sglang
    import torch
    from transformers import DynamicCache

    dumper = sglang.Dumper(filter=OUTPUTS_ONLY)
    sglang.install_hooks(model, dumper)
    cache = DynamicCache()
    ids = torch.tensor([PROMPT])
    position = 0
    generated: list[int] = []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            positions = torch.arange(position, position + ids.shape[1]).unsqueeze(0)
            logits = model(
                input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True
            ).logits
            position += ids.shape[1]
            ids = logits[:, -1:].argmax(-1)
            generated.append(int(ids[0, 0]))
            dumper.step += 1  # model_runner.py:1900-1901: dumper.step() after each forward
    sglang.write_rank(out, dumper.written, rank=0, world=1)
    return generated


# --- a whole case ---------------------------------------------------------------------------


def make_case(name: str, work: Path, out_dir: Path, seed: int | None = None) -> Path:
    """Dump the three sides, measure the errors at the culprit, pack them; returns the archive."""
    case = CASES[name]
    seed = case.seed if seed is None else seed
    case_dir = work / name
    for side in SIDES:
        command = [sys.executable, __file__, "--side", name, side, str(case_dir / side), str(seed)]
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    models._relativise(case_dir)
    runs = {side: json.loads((case_dir / f"{side}_run.json").read_text()) for side in SIDES}
    fault = case.fault
    present = list(fault.tokens) if fault.tokens is not None else list(range(NEW_TOKENS))
    culprit = runs["test"]["culprit"]
    expected = {str(t): culprit["node"].format(token=t, call=culprit["calls"][str(t)]) for t in present}
    records = {str(t): culprit["record"].format(token=t, call=culprit["calls"][str(t)]) for t in present}
    if fault.api:
        expected = records = {str(t): runs["test"]["api_records"][str(t)] for t in present}
    errors = measure.errors_at(case_dir, case.dumper, records, statistics=case.task == "statistics")
    measure.check_same_records(case_dir, case.dumper)
    generated = {side: runs[side]["generated"] for side in SIDES}
    if any(len(tokens) != NEW_TOKENS for tokens in generated.values()):
        raise SystemExit(f"{name}: a run stopped early (an end-of-text token): {generated}; try another seed")
    if not generated["golden"] == generated["test"] == generated["clean"]:
        print(f"{name}: the runs generate different tokens: {generated}", file=sys.stderr)
    description = {
        "case": name,
        "family": case.family,
        "dumper": case.dumper,
        "level": case.level,
        "task": case.task,
        "golden_dtype": "float32",
        "test_dtype": case.test_dtype,
        "fault_kind": fault.kind,
        "fault": faults.describe(fault),
        "fault_module": fault.module,
        "fault_api": fault.api or None,
        "fault_tokens": present,
        "fault_record": records,
        "expected_local": expected,
        "fault_detail": runs["test"].get("fault_detail"),
        "why": case.why,
        "error_measure": errors["measure"],
        "fault_error": errors["test"],
        "clean_error": errors["clean"],
        "note": case.note,
        "seed": seed,
        "checkpoint_dtype": case.test_dtype if case.checkpoint == "test" else case.checkpoint,
        "config": {**faults.family_config(case.family), **case.config},
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "generated": generated,
        "same_tokens": generated["golden"] == generated["test"] == generated["clean"],
        "tools": models._versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    for side in SIDES:
        (case_dir / f"{side}_run.json").unlink()
    archive = out_dir / f"{name}.tar.xz"
    models._pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="make only these cases")
    parser.add_argument("--seed", type=int, help="the model's seed instead of the case's")
    parser.add_argument("--out", type=Path, default=OUT, help="where the archives go")
    parser.add_argument("--work", type=Path, help="dump into this folder (kept) instead of a temporary one")
    parser.add_argument("--side", nargs=4, metavar=("CASE", "SIDE", "OUT", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        name, side, out, seed = args.side
        dump_side(name, side, Path(out), int(seed))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-families-") as temporary:
        work = args.work or Path(temporary)
        for name in args.only or sorted(CASES):
            archive = make_case(name, work, args.out, args.seed)
            print(f"{archive}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
