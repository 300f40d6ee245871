"""Real msprobe dumps of an expert-parallel MoE model against its one-device golden:
``tests/data/tp/moe-ep2-msprobe.tar.xz`` (the default), with ``--world 4 --allreduce-outside``
``tests/data/tp/moe-ep4-msprobe.tar.xz`` and with the options at the end below
``tests/data/tp/moe-ep3rr-msprobe.tar.xz``.

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

``--world 4``: 4 processes, rank r holding expert r alone (at a decoded token, whose 2 experts run on
2 ranks, the other 2 ranks run no expert in that layer: their partial sum stays zero); the fault is
expert 3 on rank 3 (layer 1, token 2, down_proj x1.05). ``--allreduce-outside``: the MoE block
returns its rank's partial sum and the decoder layer all-reduces it after the block returns (msprobe
records the all-reduce under the decoder layer, the block's output is the rank's partial sum). The
archive is ``moe-ep{world}-msprobe`` for the two layouts committed (2 ranks, all-reduce inside; 4
ranks, all-reduce outside), ``moe-ep{world}-allreduce-{inside|outside}-msprobe`` for any other.

``--experts N --top-k K``: N routed experts, top K per token; ``--placement round-robin``: rank r
holds the experts e with e % world == r (not a contiguous block); ``--fault-expert E``: the expert
wrong in ``expert/``; ``--shared-expert``: each MoE block also has a shared expert
(``model.layers.{i}.mlp.shared_expert``, class ``SharedMLP``: gate_proj, up_proj, down_proj, SiLU, its
weights drawn after the layer's experts') that every rank runs whole on every token and adds to the
all-reduced sum, and a third case ``shared/``: the shared expert of rank ``--shared-fault-rank`` (1)
computes its down_proj with the weight scaled by 1.05 in layer 1 at token 2 (the script refuses an
archive whose msprobe records, named by that rank's construct.json, do not show it:
``check_shared_fault``). ``--world 3 --experts 6 --top-k 1 --placement round-robin --shared-expert
--fault-expert 2`` is the committed ``moe-ep3rr-msprobe`` (expert 2 on rank 2, rank 1's shared expert).

Rank 0 picks each next token and broadcasts it, as the TP fixture does. Every side is dumped by
mindstudio-probe's ``PrecisionDebugger`` (task tensor, level mix), one step for the whole generation.
The script reads the dump back and refuses an archive whose faulty expert's record does not show the
fault (``check_fault``).

Run in the tools venv::

    ~/tools-venv/bin/python scripts/make_ep_msprobe_fixtures.py
    ~/tools-venv/bin/python scripts/make_ep_msprobe_fixtures.py --world 4 --allreduce-outside
    ~/tools-venv/bin/python scripts/make_ep_msprobe_fixtures.py --world 3 --experts 6 --top-k 1 \
        --placement round-robin --shared-expert --fault-expert 2
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
LEVEL = "mix"  # modules and API calls: the all-reduce is recorded under the module that calls it
WORLD = 2  # the default; --world
WORLDS = (2, 3, 4)  # EXPERTS split evenly
NEW_TOKENS = 4
VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 256, 32, 32, 2, 4, 2
EXPERTS, TOP_K = 4, 2  # --experts, --top-k
PLACEMENTS = ("contiguous", "round-robin")
PLACEMENT = "contiguous"  # --placement: rank r holds a contiguous block, or the experts e % world == r
SHARED = False  # --shared-expert: a shared expert module every rank runs whole
HEAD_DIM = HIDDEN // HEADS
THETA, EPS, STD = 10000.0, 1e-6, 0.2
TEST_DTYPE = "bfloat16"
CASES = ("clean", "expert")  # and "shared" with --shared-expert
FAULT: dict[str, Any] = {
    "case": "expert",
    "rank": 1,
    "layer": 1,
    "expert": 3,
    "projection": "down_proj",
    "token": 2,
}
# --shared-expert: in shared/, this rank's shared expert computes its down_proj with the wrong weight
SHARED_FAULT: dict[str, Any] = {
    "case": "shared",
    "rank": 1,
    "layer": 1,
    "projection": "down_proj",
    "token": 2,
}
SCALE = 1.05
# the router's logits scaled so that bfloat16 routes every token as float32 does, in the same order
# (checked: ``routes``), and expert 3 is among layer 1's two at token 2
ROUTER_SCALE = 1.2

STATE: dict[str, Any] = {
    "token": -1,
    "calls": {},
    "shared_calls": {},
    "fault": None,
    "shared_fault": None,
    "routes": [],
}


def settings() -> tuple[int, int, str, bool, int, int]:
    """The model's options as ``configure`` takes them (a spawned rank imports this module afresh)."""
    return EXPERTS, TOP_K, PLACEMENT, SHARED, int(FAULT["expert"]), int(SHARED_FAULT["rank"])


def configure(
    experts: int, top_k: int, placement: str, shared: bool, fault_expert: int, shared_rank: int
) -> None:
    """Set the model's options (the defaults: the two committed layouts' model)."""
    global EXPERTS, TOP_K, PLACEMENT, SHARED
    EXPERTS, TOP_K, PLACEMENT, SHARED = experts, top_k, placement, shared
    FAULT["expert"], SHARED_FAULT["rank"] = fault_expert, shared_rank


def default_model() -> bool:
    return settings() == (4, 2, "contiguous", False, 3, 1)


def model_options() -> list[str]:
    """The command-line options that give the model as configured (none for the defaults)."""
    options = [] if EXPERTS == 4 else ["--experts", str(EXPERTS)]
    options += [] if TOP_K == 2 else ["--top-k", str(TOP_K)]
    options += [] if PLACEMENT == "contiguous" else ["--placement", PLACEMENT]
    options += ["--shared-expert"] if SHARED else []
    options += [] if FAULT["expert"] == 3 else ["--fault-expert", str(FAULT["expert"])]
    options += [] if SHARED_FAULT["rank"] == 1 else ["--shared-fault-rank", str(SHARED_FAULT["rank"])]
    return options


def archive_name(world: int, outside: bool) -> str:
    """The archive's name: the committed layouts by their world (and ``rr``: round-robin with a shared
    expert), any other by its placement, its shared expert and where it all-reduces."""
    if default_model() and (world, outside) in ((WORLD, False), (4, True)):
        return f"moe-ep{world}-msprobe"
    if settings() == (6, 1, "round-robin", True, 2, 1) and (world, outside) == (3, False):
        return "moe-ep3rr-msprobe"
    model = "" if default_model() else f"-e{EXPERTS}k{TOP_K}{'rr' if PLACEMENT == 'round-robin' else ''}"
    model += "-shared" if SHARED else ""
    return f"moe-ep{world}{model}-allreduce-{'outside' if outside else 'inside'}-msprobe"


def experts_of(rank: int, world: int) -> list[int]:
    """The global ids of the experts rank ``rank`` of ``world`` holds."""
    if PLACEMENT == "round-robin":
        return [e for e in range(EXPERTS) if e % world == rank]
    per_rank = EXPERTS // world
    return list(range(rank * per_rank, (rank + 1) * per_rank))


def fault_of(world: int) -> dict[str, Any]:
    """FAULT with its rank: the one holding the faulty expert."""
    return {**FAULT, "rank": next(r for r in range(world) if FAULT["expert"] in experts_of(r, world))}


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
        if SHARED:  # drawn after the experts: without it every weight is as before
            weights[prefix + "mlp.shared_expert.gate_proj.weight"] = normal(INTER, HIDDEN)
            weights[prefix + "mlp.shared_expert.up_proj.weight"] = normal(INTER, HIDDEN)
            weights[prefix + "mlp.shared_expert.down_proj.weight"] = normal(HIDDEN, INTER)
    weights["model.norm.weight"] = 1 + normal(HIDDEN) / 2
    weights["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return weights


def build_model(
    rank: int,
    world: int,
    dtype: Any,
    faulty: bool = False,
    outside: bool = False,
    shared_faulty: bool = False,
) -> Any:
    """The model as rank ``rank`` of ``world`` holds it (``world`` 1: the whole model, every expert);
    ``outside``: the decoder layer all-reduces the MoE block's partial sum, not the block;
    ``shared_faulty``: this rank's shared expert is SHARED_FAULT's."""
    import torch
    import torch.distributed as dist
    from torch import nn

    full = full_weights()
    owned = experts_of(rank, world)

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

    class SharedMLP(nn.Module):
        """The shared expert: every token, on every rank, whole (replicated)."""

        def __init__(self, layer: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}.mlp.shared_expert."
            self.layer = layer
            self.is_faulty = shared_faulty and layer == SHARED_FAULT["layer"]
            down = full[p + "down_proj.weight"]
            self.gate_proj = Linear(full[p + "gate_proj.weight"])
            self.up_proj = Linear(full[p + "up_proj.weight"])
            self.down_proj = Linear(down, down * SCALE if self.is_faulty else None)

        def forward(self, x: Any) -> Any:
            call = STATE["shared_calls"].get(self.layer, 0)
            STATE["shared_calls"][self.layer] = call + 1
            self.down_proj.use_wrong = self.is_faulty and STATE["token"] == SHARED_FAULT["token"]
            if self.down_proj.use_wrong:
                STATE["shared_fault"] = {"call": call, "tokens": int(x.shape[0])}
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class SparseMoeBlock(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            self.gate = Linear(full[f"model.layers.{layer}.mlp.gate.weight"])
            # keyed by the global expert id: msprobe names them model.layers.{i}.mlp.experts.{e}
            self.experts = nn.ModuleDict({str(e): ExpertMLP(layer, e) for e in owned})
            if SHARED:
                self.shared_expert = SharedMLP(layer)

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
            if world > 1 and not outside:
                dist.all_reduce(out)
            if SHARED:  # every rank's own, whole, added after the all-reduce
                out = out + self.shared_expert(flat)
            return out.reshape(batch, tokens, hidden)  # outside: this rank's partial sum

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
            if world > 1 and outside:
                moe = self.mlp(self.post_attention_layernorm(x))
                dist.all_reduce(moe)  # the ranks' partial sums, after the block returned
                return x + moe
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


def rank_main(
    rank: int, world: int, case: str, out: str, port: int, record: str, outside: bool, model: tuple[Any, ...]
) -> None:
    import torch
    import torch.distributed as dist

    configure(*model)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_grad_enabled(False)
    faulty = case == FAULT["case"] and rank == fault_of(world)["rank"]
    shared_faulty = case == SHARED_FAULT["case"] and rank == SHARED_FAULT["rank"]
    model = build_model(rank, world, getattr(torch, TEST_DTYPE), faulty, outside, shared_faulty)
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
                **({"shared_fault": STATE["shared_fault"]} if SHARED else {}),
                "routes": STATE["routes"],
            }
        ),
        encoding="utf-8",
    )
    dist.destroy_process_group()


def run_test(case: str, out: Path, work: Path, world: int, outside: bool) -> dict[str, Any]:
    import torch.multiprocessing as mp

    out.mkdir(parents=True)
    record = work / f"{case}_run.json"
    mp.spawn(
        rank_main,
        args=(world, case, str(out), _free_port(), str(record), outside, settings()),
        nprocs=world,
    )
    runs = [json.loads(Path(f"{record}.{r}").read_text(encoding="utf-8")) for r in range(world)]
    if len({tuple(r["generated"]) for r in runs}) != 1:
        raise SystemExit(f"{case}: the ranks generated different tokens {[r['generated'] for r in runs]}")
    if any(run["routes"] != runs[0]["routes"] for run in runs):
        raise SystemExit(f"{case}: the ranks routed tokens differently")
    calls: dict[str, int] = {}
    for run in runs:
        calls.update(run["calls"])
    return {
        "generated": runs[0]["generated"],
        "calls": calls,
        "fault": runs[fault_of(world)["rank"]]["fault"],
        **({"shared_fault": runs[SHARED_FAULT["rank"]]["shared_fault"]} if SHARED else {}),
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


def check_fault(case_dir: Path, call: int, rank: int) -> dict[str, Any]:
    """msprobe's record of the faulty expert's call, on the faulty rank: its input the clean run's, its
    output far from the clean run's (the wrong down_proj weight)."""
    import torch

    def tensors(case: str) -> tuple[str, Any, Any]:
        name, entry, folder = _module_record(case_dir / case, rank, call)
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


def check_shared_fault(case_dir: Path, call: int, world: int) -> dict[str, Any]:
    """msprobe's records of the faulty shared expert's down_proj on SHARED_FAULT's rank, named as its
    construct.json names them (the Linear module's call and the ``Functional.linear`` under it): their
    input the clean run's, their output the clean run's scaled; the other ranks' the clean run's."""
    import torch

    rank, layer = SHARED_FAULT["rank"], SHARED_FAULT["layer"]
    module = (
        f"Module.model.layers.{layer}.mlp.shared_expert.{SHARED_FAULT['projection']}.Linear.forward.{call}"
    )

    def records(case: str, on: int) -> dict[str, tuple[Any, Any]]:
        folder = case_dir / case / "step0" / f"rank{on}"
        construct = json.loads((folder / "construct.json").read_text(encoding="utf-8"))
        data = json.loads((folder / "dump.json").read_text(encoding="utf-8"))["data"]
        under = [name for name, parent in construct.items() if parent == module]
        if module not in construct or [n.startswith("Functional.linear.") for n in under] != [True]:
            raise SystemExit(
                f"rank {on}'s construct.json has no {module} with one Functional.linear under it"
            )
        return {
            name: (
                torch.load(folder / "dump_tensor_data" / data[name]["input_args"][0]["data_name"]),
                torch.load(folder / "dump_tensor_data" / data[name]["output"][0]["data_name"]),
            )
            for name in (module, under[0])
        }

    clean, wrong = records("clean", rank), records(SHARED_FAULT["case"], rank)
    if clean.keys() != wrong.keys():
        raise SystemExit(
            f"{module}: the clean and faulty runs' records differ ({clean.keys()}, {wrong.keys()})"
        )
    for name, (clean_in, clean_out) in clean.items():
        wrong_in, wrong_out = wrong[name]
        scaled = (clean_out.double() * SCALE).to(clean_out.dtype)
        if not torch.equal(clean_in, wrong_in) or torch.equal(clean_out, wrong_out):
            raise SystemExit(f"rank {rank}'s {name}: msprobe's record does not show the fault")
        relative = float((wrong_out.double() - scaled.double()).abs().max() / scaled.double().abs().max())
        if relative > 2**-6:
            raise SystemExit(
                f"rank {rank}'s {name}: the faulty output is not the clean one scaled ({relative})"
            )
    for other in set(range(world)) - {rank}:
        clean, wrong = records("clean", other), records(SHARED_FAULT["case"], other)
        if any(not torch.equal(out, wrong[name][1]) for name, (_, out) in clean.items()):
            raise SystemExit(f"rank {other}'s {module} differs too: the fault is not rank {rank}'s alone")
    linear = next(name for name in records("clean", rank) if name != module)
    return {
        "record": module,
        "linear_record": linear,
        "input_0": "the clean run's, bit for bit (both records)",
        "output_0": f"the clean run's times {SCALE} (the down_proj weight scaled), to bfloat16 rounding; "
        "the other ranks' records the clean run's",
    }


def idle_ranks(routes: list[Any], world: int) -> dict[str, dict[str, list[int]]]:
    """token -> layer -> the ranks that ran no expert there (their partial sum all zeros), from the
    routes (one entry per MoE block call: a forward pass's layers in turn, each position's top k)."""
    idle: dict[str, dict[str, list[int]]] = {}
    for index, chosen in enumerate(routes):
        token, layer = divmod(index, LAYERS)
        ran = {expert for position in chosen for expert in position}
        ranks = [r for r in range(world) if not ran & set(experts_of(r, world))]
        if ranks:
            idle.setdefault(str(token), {})[str(layer)] = ranks
    return idle


def make_archive(work: Path, world: int = WORLD, outside: bool = False, out: Path = OUT) -> Path:
    import subprocess

    name, fault_spec = archive_name(world, outside), fault_of(world)
    layout = [] if (world, outside) == (WORLD, False) and default_model() else ["--world", str(world)]
    layout += ["--allreduce-outside"] if outside else []
    layout += model_options()
    case_dir = work / name
    case_dir.mkdir()
    command = [sys.executable, __file__, *model_options(), "--golden", str(case_dir / "golden")]
    command.append(str(work / "golden_run.json"))
    subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    runs = {"golden": json.loads((work / "golden_run.json").read_text(encoding="utf-8"))}
    cases = (*CASES, SHARED_FAULT["case"]) if SHARED else CASES
    for case in cases:
        command = [sys.executable, __file__, *layout, "--test", case, str(case_dir / case), str(work)]
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
        runs[case] = json.loads((work / f"{case}_run.json").read_text(encoding="utf-8"))
    for case in cases:
        if runs[case]["routes"] != runs["golden"]["routes"] or runs[case]["calls"] != runs["golden"]["calls"]:
            raise SystemExit(f"{case} routed tokens otherwise than the golden: {runs[case]['routes']}")
    fault = runs[FAULT["case"]]["fault"]
    if not fault:
        raise SystemExit(
            f"expert {FAULT['expert']} in layer {FAULT['layer']} ran no token at token {FAULT['token']}"
        )
    seen = check_fault(case_dir, fault["call"], fault_spec["rank"])
    shared_fault = runs[SHARED_FAULT["case"]]["shared_fault"] if SHARED else None
    if SHARED and not shared_fault:
        raise SystemExit(f"rank {SHARED_FAULT['rank']}'s shared expert did not run the fault")
    shared_seen = check_shared_fault(case_dir, shared_fault["call"], world) if shared_fault else None
    idle = idle_ranks(runs["golden"]["routes"], world)
    if world == 4 and not idle:
        raise SystemExit("no token where some rank runs no expert in a layer")
    _relativise(case_dir)
    _relativise_stdlib(case_dir)
    module = f"model.layers.{FAULT['layer']}.mlp.experts.{FAULT['expert']}"
    if PLACEMENT == "round-robin":
        holds = (
            f"rank r holds the experts e with e % {world} == r (named by their global id), adds their "
            "weighted outputs"
        )
    elif world == WORLD:
        holds = "rank r holds experts 2r and 2r+1 (named by their global id), adds their weighted outputs"
    else:
        holds = "rank r holds expert r alone (named by its global id), adds its weighted output"
    if outside:
        where = (
            "returns it, and the decoder layer's forward sums it with torch.distributed.all_reduce "
            "after the MoE block returned"
        )
    else:
        where = "torch.distributed.all_reduce sums it inside the MoE block's forward"
    if SHARED:
        where += (
            ", then every rank adds its shared expert's output (model.layers.{i}.mlp.shared_expert, "
            "run whole on every rank, after the all-reduce)"
        )
    config: dict[str, Any] = {
        "vocab": VOCAB,
        "hidden": HIDDEN,
        "intermediate": INTER,
        "layers": LAYERS,
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "experts": EXPERTS,
        "top_k": TOP_K,
        "world": world,
        "experts_of_rank": {str(r): experts_of(r, world) for r in range(world)},
        "weights_std": STD,
        "router_scale": ROUTER_SCALE,
        "seed": SEED,
    }
    if layout:  # the 2-rank archive, made before these were recorded, stays as it was
        config["allreduce"] = (
            {"where": "outside", "module": "model.layers.{i}", "class": "MoeDecoderLayer"}
            if outside
            else {"where": "inside", "module": "model.layers.{i}.mlp", "class": "SparseMoeBlock"}
        )
    if not default_model():  # the committed 2- and 4-rank archives stay as they were
        config["placement"] = PLACEMENT
        config["shared_expert"] = (
            {
                "module": "model.layers.{i}.mlp.shared_expert",
                "class": "SharedMLP",
                "projections": ["gate_proj", "up_proj", "down_proj"],
                "activation": "silu",
                "where": "every rank runs it whole on every token and adds its output after the all-reduce",
            }
            if SHARED
            else None
        )
    description: dict[str, Any] = {
        "case": name,
        "golden": "a MoE model of Llama's shape in plain torch modules, float32, one process, every "
        "expert on it (msprobe writes proc{PID})",
        "test": f"the same weights expert-parallel on {world} processes (gloo, CPU), {TEST_DTYPE}: "
        f"attention, norms, router, embedding and lm_head replicated; {holds} into a zero tensor and "
        f"{where}",
        "cases": {
            "clean": "the expert-parallel run as it should be",
            "expert": f"expert {FAULT['expert']} on rank {fault_spec['rank']} in layer {FAULT['layer']} at "
            f"token {FAULT['token']} computes its {FAULT['projection']} with the weight scaled by {SCALE}",
        },
        "config": config,
        "msprobe": {"task": "tensor", "level": LEVEL},
        "golden_dtype": "float32",
        "test_dtype": TEST_DTYPE,
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "fault": {
            **fault_spec,
            "scale": SCALE,
            "module": module,
            "call": fault["call"],
            "routed_tokens": fault["tokens"],
            "record": seen["record"],
            "linear_module": f"{module}.{FAULT['projection']}",
            "as_recorded": seen,
        },
        **(
            {
                "shared_fault": {
                    **SHARED_FAULT,
                    "scale": SCALE,
                    "module": f"model.layers.{SHARED_FAULT['layer']}.mlp.shared_expert",
                    "call": shared_fault["call"],
                    "routed_tokens": shared_fault["tokens"],
                    "record": shared_seen["record"],
                    "linear_record": shared_seen["linear_record"],
                    "linear_module": f"model.layers.{SHARED_FAULT['layer']}.mlp.shared_expert."
                    f"{SHARED_FAULT['projection']}",
                    "as_recorded": shared_seen,
                }
            }
            if shared_fault and shared_seen
            else {}
        ),
        "expert_calls": runs["golden"]["calls"],
        "routes": "every side routed every token to the same experts, in the same order (topk indices)",
    }
    if layout:
        description["idle_ranks"] = {
            "what": "token -> layer -> the ranks that ran no expert there (from the routes; their "
            "partial sum stays zeros)",
            "by_token": idle,
        }
    if SHARED:
        description["cases"]["shared"] = (
            f"rank {SHARED_FAULT['rank']}'s shared expert in layer {SHARED_FAULT['layer']} at token "
            f"{SHARED_FAULT['token']} computes its {SHARED_FAULT['projection']} with the weight scaled by "
            f"{SCALE} (the other ranks' shared expert as it should be)"
        )
    description["generated"] = {side: run["generated"] for side, run in runs.items()}
    description["tools"] = _versions()
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = out / f"{name}.tar.xz"
    _pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--world",
        type=int,
        choices=WORLDS,
        default=WORLD,
        help=f"ranks of the test run, the experts split evenly (default {WORLD})",
    )
    parser.add_argument("--experts", type=int, default=EXPERTS, help=f"routed experts (default {EXPERTS})")
    parser.add_argument("--top-k", type=int, default=TOP_K, help=f"experts per token (default {TOP_K})")
    parser.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default=PLACEMENT,
        help="which experts rank r holds: a contiguous block (the default) or those e with e %% world == r",
    )
    parser.add_argument(
        "--shared-expert",
        action="store_true",
        help="a shared expert (model.layers.{i}.mlp.shared_expert) every rank runs whole, and a "
        "shared/ case whose --shared-fault-rank's shared expert is wrong",
    )
    parser.add_argument(
        "--fault-expert",
        type=int,
        default=FAULT["expert"],
        help=f"the expert wrong in expert/ (default {FAULT['expert']})",
    )
    parser.add_argument(
        "--shared-fault-rank",
        type=int,
        default=SHARED_FAULT["rank"],
        help=f"the rank whose shared expert is wrong in shared/ (default {SHARED_FAULT['rank']})",
    )
    parser.add_argument(
        "--allreduce-outside",
        action="store_true",
        help="all-reduce the MoE partial sums in the decoder layer after the block returns",
    )
    parser.add_argument(
        "--out", metavar="DIR", type=Path, default=OUT, help="where the archive goes (tests/data/tp)"
    )
    parser.add_argument("--golden", nargs=2, metavar=("OUT", "RECORD"), help=argparse.SUPPRESS)
    parser.add_argument("--test", nargs=3, metavar=("CASE", "OUT", "WORK"), help=argparse.SUPPRESS)
    parser.add_argument("--keep", metavar="DIR", help="also leave the unpacked case in DIR")
    args = parser.parse_args(argv)
    if args.experts % args.world or not 0 < args.top_k <= args.experts:
        parser.error(
            f"{args.experts} experts cannot be split evenly over {args.world} ranks, top {args.top_k}"
        )
    if not 0 <= args.fault_expert < args.experts or not 0 <= args.shared_fault_rank < args.world:
        parser.error("--fault-expert must be an expert, --shared-fault-rank a rank")
    configure(
        args.experts,
        args.top_k,
        args.placement,
        args.shared_expert,
        args.fault_expert,
        args.shared_fault_rank,
    )
    if args.golden:
        golden_main(*args.golden)
        return 0
    if args.test:
        case, out, work = args.test
        run = run_test(case, Path(out), Path(work), args.world, args.allreduce_outside)
        Path(work, f"{case}_run.json").write_text(json.dumps(run), encoding="utf-8")
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    name = archive_name(args.world, args.allreduce_outside)
    with tempfile.TemporaryDirectory(prefix="tui-acc-ep-") as work:
        archive = make_archive(Path(work), args.world, args.allreduce_outside, args.out.resolve())
        if args.keep:
            import shutil

            shutil.copytree(Path(work) / name, Path(args.keep) / name, dirs_exist_ok=True)
        shown = archive.relative_to(REPO) if archive.is_relative_to(REPO) else archive
        print(f"{shown}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
