"""Real msprobe dumps of an expert-parallel MoE model against its one-device golden:
``tests/data/tp/moe-ep2-msprobe.tar.xz``.

A tiny MoE model of Llama's shape in plain torch modules (2 layers, hidden 32, 4 heads and 2 kv
heads, attention as scripts/make_tp_msprobe_fixtures.py's but unsharded, random seeded weights, a KV
cache, greedy decoding one forward pass per token). Its MLP is a Mixtral/Qwen2-MoE-style sparse
block (``model.layers.{i}.mlp``, class ``SparseMoeBlock``): a router ``gate`` Linear, softmax, the
top 2 of 4 experts per token renormalised, each expert its own module ``experts.{e}`` (class
``ExpertMLP``: gate_proj, up_proj, down_proj, SiLU) called only on the tokens routed to it, their
outputs weighted and added into a zero tensor (``index_add_``):

- ``golden/``: the model on one process in float32, every expert on it (msprobe writes ``proc{PID}``);
- ``clean/``: the same weights expert-parallel on 2 processes (``torch.multiprocessing.spawn``, gloo
  on the CPU), in bfloat16: attention, norms, router, embedding and lm_head replicated (every rank
  computes them whole); rank r holds experts 2r and 2r+1 only, in an ``nn.ModuleDict`` keyed by their
  global id (``experts.2``, ``experts.3`` on rank 1), runs them on the tokens routed to them and adds
  their weighted outputs into a zero tensor of the block's output shape (its partial sum), which
  ``torch.distributed.all_reduce`` then sums, inside the block's ``forward``;
- ``expert/``: as ``clean/``, but expert 3 (rank 1) in layer 1 at token 2 computes its down_proj with
  a wrong weight (scaled by 1.05; swapped in without an API call, so msprobe's records of that
  expert's ``Functional.linear`` and of its module hold the wrong output).

Rank 0 picks each next token and broadcasts it, as the TP fixture does. Every side is dumped by
mindstudio-probe's ``PrecisionDebugger`` (task tensor, level mix), one step for the whole generation.
The script reads the dump back and refuses an archive whose faulty expert's record does not show the
fault (``check_fault``).

Run in the tools venv::

    ~/tools-venv/bin/python scripts/make_ep_msprobe_fixtures.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_model_fixtures import PROMPT, SEED, _pack, _relativise  # noqa: E402
from make_tp_msprobe_fixtures import (  # noqa: E402
    _config,
    _free_port,
    _relativise_stdlib,
    _versions,
)

OUT = REPO / "tests" / "data" / "tp"
NAME = "moe-ep2-msprobe"
LEVEL = "mix"  # modules and API calls: the all-reduce is recorded under the MoE block
WORLD = 2
NEW_TOKENS = 4
VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 256, 32, 32, 2, 4, 2
EXPERTS, TOP_K = 4, 2
HEAD_DIM = HIDDEN // HEADS
THETA, EPS, STD = 10000.0, 1e-6, 0.2
TEST_DTYPE = "bfloat16"
CASES = ("clean", "expert")
FAULT = {"case": "expert", "rank": 1, "layer": 1, "expert": 3, "projection": "down_proj", "token": 2}
SCALE = 1.05
# the router's logits scaled so that bfloat16 routes every token as float32 does, in the same order
# (checked: ``routes``), and expert 3 is among layer 1's two at token 2
ROUTER_SCALE = 1.2

STATE: dict[str, Any] = {"token": -1, "calls": {}, "fault": None, "routes": []}


def full_weights() -> dict[str, Any]:
    """The golden's weights, float32, seeded: the same tensors on every process."""
    import torch

    generator = torch.Generator().manual_seed(SEED)

    def normal(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator) * STD

    weights = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        prefix = f"model.layers.{i}."
        weights[prefix + "input_layernorm.weight"] = 1 + normal(HIDDEN) / 2
        weights[prefix + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        weights[prefix + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        weights[prefix + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        weights[prefix + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        weights[prefix + "post_attention_layernorm.weight"] = 1 + normal(HIDDEN) / 2
        weights[prefix + "mlp.gate.weight"] = normal(EXPERTS, HIDDEN) * ROUTER_SCALE
        for e in range(EXPERTS):
            weights[prefix + f"mlp.experts.{e}.gate_proj.weight"] = normal(INTER, HIDDEN)
            weights[prefix + f"mlp.experts.{e}.up_proj.weight"] = normal(INTER, HIDDEN)
            weights[prefix + f"mlp.experts.{e}.down_proj.weight"] = normal(HIDDEN, INTER)
    weights["model.norm.weight"] = 1 + normal(HIDDEN) / 2
    weights["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return weights


def build_model(rank: int, world: int, dtype: Any, faulty: bool = False) -> Any:
    """The model as rank ``rank`` of ``world`` holds it (``world`` 1: the whole model, every expert)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    full = full_weights()
    per_rank = EXPERTS // world
    owned = range(rank * per_rank, (rank + 1) * per_rank)

    class Linear(nn.Module):
        """``F.linear`` without bias; ``wrong`` (the faulty expert's down_proj) a second weight that
        ``use_wrong`` swaps in, without an API call msprobe would record."""

        def __init__(self, weight: Any, wrong: Any = None) -> None:
            super().__init__()
            self.weight = nn.Parameter(weight.to(dtype).contiguous(), requires_grad=False)
            self.wrong = None if wrong is None else wrong.to(dtype).contiguous()
            self.use_wrong = False

        def forward(self, x: Any) -> Any:
            return nn.functional.linear(x, self.wrong if self.use_wrong else self.weight)

    class LlamaRMSNorm(nn.Module):
        def __init__(self, weight: Any) -> None:
            super().__init__()
            self.weight = nn.Parameter(weight.to(dtype), requires_grad=False)

        def forward(self, x: Any) -> Any:
            wide = x.float()
            wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + EPS)
            return self.weight * wide.to(dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def forward(self, positions: Any) -> Any:
            exponents = torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM
            angles = positions.float().unsqueeze(-1) * (1.0 / THETA**exponents)
            both = torch.cat((angles, angles), dim=-1)
            return both.cos().to(dtype), both.sin().to(dtype)

    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin

    class LlamaAttention(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}.self_attn."
            self.q_proj = Linear(full[p + "q_proj.weight"])
            self.k_proj = Linear(full[p + "k_proj.weight"])
            self.v_proj = Linear(full[p + "v_proj.weight"])
            self.o_proj = Linear(full[p + "o_proj.weight"])
            self.cache: list[Any] = []

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            batch, tokens, _ = x.shape
            q = self.q_proj(x).view(batch, tokens, HEADS, HEAD_DIM).transpose(1, 2)
            k = self.k_proj(x).view(batch, tokens, KV_HEADS, HEAD_DIM).transpose(1, 2)
            v = self.v_proj(x).view(batch, tokens, KV_HEADS, HEAD_DIM).transpose(1, 2)
            q, k = (
                rotate(q, cos.unsqueeze(1), sin.unsqueeze(1)),
                rotate(k, cos.unsqueeze(1), sin.unsqueeze(1)),
            )
            if self.cache:
                k, v = torch.cat((self.cache[0], k), dim=2), torch.cat((self.cache[1], v), dim=2)
            self.cache = [k, v]
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HEAD_DIM)
            if tokens > 1:  # the prefill: causal
                scores = scores.masked_fill(
                    torch.ones(tokens, tokens, dtype=torch.bool).triu(1), float("-inf")
                )
            probabilities = torch.softmax(scores.float(), dim=-1).to(dtype)
            attended = torch.matmul(probabilities, v).transpose(1, 2).reshape(batch, tokens, HIDDEN)
            return self.o_proj(attended)

    class ExpertMLP(nn.Module):
        def __init__(self, layer: int, expert: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}.mlp.experts.{expert}."
            self.layer, self.expert = layer, expert
            self.is_faulty = faulty and (layer, expert) == (FAULT["layer"], FAULT["expert"])
            down = full[p + "down_proj.weight"]
            self.gate_proj = Linear(full[p + "gate_proj.weight"])
            self.up_proj = Linear(full[p + "up_proj.weight"])
            self.down_proj = Linear(down, down * SCALE if self.is_faulty else None)

        def forward(self, x: Any) -> Any:
            key = f"{self.layer}.{self.expert}"
            call = STATE["calls"].get(key, 0)
            STATE["calls"][key] = call + 1
            self.down_proj.use_wrong = self.is_faulty and STATE["token"] == FAULT["token"]
            if self.down_proj.use_wrong:
                STATE["fault"] = {"call": call, "tokens": int(x.shape[0])}
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class SparseMoeBlock(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            self.gate = Linear(full[f"model.layers.{layer}.mlp.gate.weight"])
            # keyed by the global expert id: msprobe names them model.layers.{i}.mlp.experts.{e}
            self.experts = nn.ModuleDict({str(e): ExpertMLP(layer, e) for e in owned})

        def forward(self, x: Any) -> Any:
            batch, tokens, hidden = x.shape
            flat = x.reshape(-1, hidden)
            probabilities = torch.softmax(self.gate(flat).float(), dim=-1)
            weights, chosen = torch.topk(probabilities, TOP_K, dim=-1)
            STATE["routes"].append(chosen.tolist())
            weights = (weights / weights.sum(dim=-1, keepdim=True)).to(dtype)
            out = torch.zeros_like(flat)  # this rank's partial sum
            for key, expert in self.experts.items():
                where, slot = torch.where(chosen == int(key))
                if where.numel() == 0:
                    continue
                out.index_add_(0, where, expert(flat[where]) * weights[where, slot, None])
            if world > 1:
                dist.all_reduce(out)
            return out.reshape(batch, tokens, hidden)

    class MoeDecoderLayer(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}."
            self.self_attn = LlamaAttention(layer)
            self.mlp = SparseMoeBlock(layer)
            self.input_layernorm = LlamaRMSNorm(full[p + "input_layernorm.weight"])
            self.post_attention_layernorm = LlamaRMSNorm(full[p + "post_attention_layernorm.weight"])

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class MoeModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding.from_pretrained(full["model.embed_tokens.weight"].to(dtype))
            self.layers = nn.ModuleList(MoeDecoderLayer(i) for i in range(LAYERS))
            self.norm = LlamaRMSNorm(full["model.norm.weight"])
            self.rotary_emb = LlamaRotaryEmbedding()

        def forward(self, ids: Any, positions: Any) -> Any:
            x = self.embed_tokens(ids)
            cos, sin = self.rotary_emb(positions)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.norm(x)

    class MoeForCausalLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = MoeModel()
            self.lm_head = Linear(full["lm_head.weight"])

        def forward(self, ids: Any, positions: Any) -> Any:
            STATE["token"] += 1
            return self.lm_head(self.model(ids, positions)[:, -1:])  # the last position's logits only

    return MoeForCausalLM().eval()


def generate(model: Any, world: int = 1) -> list[int]:
    """Greedy decoding, one forward pass per token; with several ranks rank 0 picks and broadcasts."""
    import torch
    import torch.distributed as dist

    ids, positions, generated = torch.tensor([PROMPT]), torch.arange(len(PROMPT)).unsqueeze(0), []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(ids, positions)
            ids = logits[:, -1:].float().argmax(-1)
            if world > 1:
                dist.broadcast(ids, src=0)
            positions = positions[:, -1:] + 1
            generated.append(int(ids[0, 0]))
    return generated


def _dump(model: Any, out: Path, config_name: str, world: int = 1) -> list[int]:
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(config_path=str(_config(out, config_name)))
    debugger.start(model)
    generated = generate(model, world)
    debugger.stop()
    debugger.step()
    return generated


def golden_main(out: str, record: str) -> None:
    import torch

    torch.set_grad_enabled(False)
    Path(out).mkdir(parents=True)
    generated = _dump(build_model(0, 1, torch.float32), Path(out), "golden")
    Path(record).write_text(
        json.dumps({"generated": generated, "calls": STATE["calls"], "routes": STATE["routes"]}),
        encoding="utf-8",
    )


def rank_main(rank: int, world: int, case: str, out: str, port: int, record: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_grad_enabled(False)
    faulty = case == FAULT["case"] and rank == FAULT["rank"]
    model = build_model(rank, world, getattr(torch, TEST_DTYPE), faulty)
    generated = _dump(model, Path(out), f"{case}_rank{rank}", world)
    if rank == 0:
        Path(out).parent.joinpath(f"{case}_rank0_config.json").rename(
            Path(out).parent / f"{case}_config.json"
        )
    else:
        Path(out).parent.joinpath(f"{case}_rank{rank}_config.json").unlink()
    Path(f"{record}.{rank}").write_text(
        json.dumps(
            {
                "generated": generated,
                "calls": STATE["calls"],
                "fault": STATE["fault"],
                "routes": STATE["routes"],
            }
        ),
        encoding="utf-8",
    )
    dist.destroy_process_group()


def run_test(case: str, out: Path, work: Path) -> dict[str, Any]:
    import torch.multiprocessing as mp

    out.mkdir(parents=True)
    record = work / f"{case}_run.json"
    mp.spawn(rank_main, args=(WORLD, case, str(out), _free_port(), str(record)), nprocs=WORLD)
    runs = [json.loads(Path(f"{record}.{r}").read_text(encoding="utf-8")) for r in range(WORLD)]
    if len({tuple(r["generated"]) for r in runs}) != 1:
        raise SystemExit(f"{case}: the ranks generated different tokens {[r['generated'] for r in runs]}")
    if runs[0]["routes"] != runs[1]["routes"]:
        raise SystemExit(f"{case}: the ranks routed tokens differently")
    calls: dict[str, int] = {}
    for run in runs:
        calls.update(run["calls"])
    return {
        "generated": runs[0]["generated"],
        "calls": calls,
        "fault": runs[FAULT["rank"]]["fault"],
        "routes": runs[0]["routes"],
    }


def _module_record(out: Path, rank: int, call: int) -> tuple[str, dict[str, Any], Path]:
    (dump_json,) = out.glob(f"step0/rank{rank}/dump.json")
    data = json.loads(dump_json.read_text(encoding="utf-8"))["data"]
    prefix = f"Module.model.layers.{FAULT['layer']}.mlp.experts.{FAULT['expert']}.ExpertMLP.forward."
    name = f"{prefix}{call}"
    if name not in data:
        raise SystemExit(
            f"msprobe recorded no {name} (it has {sorted(k for k in data if k.startswith(prefix))})"
        )
    return name, data[name], dump_json.parent / "dump_tensor_data"


def check_fault(case_dir: Path, call: int) -> dict[str, Any]:
    """msprobe's record of the faulty expert's call, on the faulty rank: its input the clean run's, its
    output far from the clean run's (the wrong down_proj weight)."""
    import torch

    def tensors(case: str) -> tuple[str, Any, Any]:
        name, entry, folder = _module_record(case_dir / case, FAULT["rank"], call)
        return (
            name,
            torch.load(folder / entry["input_args"][0]["data_name"]),
            torch.load(folder / entry["output"][0]["data_name"]),
        )

    name, clean_in, clean_out = tensors("clean")
    _, wrong_in, wrong_out = tensors(FAULT["case"])
    scaled = (clean_out.double() * SCALE).to(clean_out.dtype)
    if not torch.equal(clean_in, wrong_in) or torch.equal(clean_out, wrong_out):
        raise SystemExit(f"{name}: msprobe's record does not show the fault")
    relative = float((wrong_out.double() - scaled.double()).abs().max() / scaled.double().abs().max())
    if relative > 2**-6:
        raise SystemExit(f"{name}: the faulty output is not the clean one scaled ({relative})")
    return {
        "record": name,
        "input_0": "the clean run's, bit for bit",
        "output_0": f"the clean run's times {SCALE} (the down_proj weight scaled), to bfloat16 rounding",
    }


def make_archive(work: Path) -> Path:
    import subprocess

    case_dir = work / NAME
    case_dir.mkdir()
    command = [sys.executable, __file__, "--golden", str(case_dir / "golden"), str(work / "golden_run.json")]
    subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    runs = {"golden": json.loads((work / "golden_run.json").read_text(encoding="utf-8"))}
    for case in CASES:
        command = [sys.executable, __file__, "--test", case, str(case_dir / case), str(work)]
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
        runs[case] = json.loads((work / f"{case}_run.json").read_text(encoding="utf-8"))
    for case in CASES:
        if runs[case]["routes"] != runs["golden"]["routes"] or runs[case]["calls"] != runs["golden"]["calls"]:
            raise SystemExit(f"{case} routed tokens otherwise than the golden: {runs[case]['routes']}")
    fault = runs[FAULT["case"]]["fault"]
    if not fault:
        raise SystemExit(
            f"expert {FAULT['expert']} in layer {FAULT['layer']} ran no token at token {FAULT['token']}"
        )
    seen = check_fault(case_dir, fault["call"])
    _relativise(case_dir)
    _relativise_stdlib(case_dir)
    module = f"model.layers.{FAULT['layer']}.mlp.experts.{FAULT['expert']}"
    description = {
        "case": NAME,
        "golden": "a MoE model of Llama's shape in plain torch modules, float32, one process, every "
        "expert on it (msprobe writes proc{PID})",
        "test": f"the same weights expert-parallel on {WORLD} processes (gloo, CPU), {TEST_DTYPE}: "
        "attention, norms, router, embedding and lm_head replicated; rank r holds experts 2r and 2r+1 "
        "(named by their global id), adds their weighted outputs into a zero tensor and "
        "torch.distributed.all_reduce sums it inside the MoE block's forward",
        "cases": {
            "clean": "the expert-parallel run as it should be",
            "expert": f"expert {FAULT['expert']} on rank {FAULT['rank']} in layer {FAULT['layer']} at token "
            f"{FAULT['token']} computes its {FAULT['projection']} with the weight scaled by {SCALE}",
        },
        "config": {
            "vocab": VOCAB,
            "hidden": HIDDEN,
            "intermediate": INTER,
            "layers": LAYERS,
            "heads": HEADS,
            "kv_heads": KV_HEADS,
            "experts": EXPERTS,
            "top_k": TOP_K,
            "world": WORLD,
            "experts_of_rank": {str(r): [r * 2, r * 2 + 1] for r in range(WORLD)},
            "weights_std": STD,
            "router_scale": ROUTER_SCALE,
            "seed": SEED,
        },
        "msprobe": {"task": "tensor", "level": LEVEL},
        "golden_dtype": "float32",
        "test_dtype": TEST_DTYPE,
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "fault": {
            **FAULT,
            "scale": SCALE,
            "module": module,
            "call": fault["call"],
            "routed_tokens": fault["tokens"],
            "record": seen["record"],
            "linear_module": f"{module}.{FAULT['projection']}",
            "as_recorded": seen,
        },
        "expert_calls": runs["golden"]["calls"],
        "routes": "every side routed every token to the same experts, in the same order (topk indices)",
        "generated": {side: run["generated"] for side, run in runs.items()},
        "tools": _versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = OUT / f"{NAME}.tar.xz"
    _pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--golden", nargs=2, metavar=("OUT", "RECORD"), help=argparse.SUPPRESS)
    parser.add_argument("--test", nargs=3, metavar=("CASE", "OUT", "WORK"), help=argparse.SUPPRESS)
    parser.add_argument("--keep", metavar="DIR", help="also leave the unpacked case in DIR")
    args = parser.parse_args(argv)
    if args.golden:
        golden_main(*args.golden)
        return 0
    if args.test:
        case, out, work = args.test
        run = run_test(case, Path(out), Path(work))
        Path(work, f"{case}_run.json").write_text(json.dumps(run), encoding="utf-8")
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-ep-") as work:
        archive = make_archive(Path(work))
        if args.keep:
            import shutil

            shutil.copytree(Path(work) / NAME, Path(args.keep) / NAME, dirs_exist_ok=True)
        print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
