"""Real msprobe dumps of a tensor-parallel Llama against its one-device golden:
``tests/data/tp/llama-tp2-msprobe.tar.xz``.

A tiny Llama-shaped model in plain torch modules (transformers' module names: ``model.layers.{i}.
self_attn.q_proj``..., 2 layers, hidden 32, 4 heads and 2 kv heads, random seeded weights, a KV
cache, greedy decoding one forward pass per token):

- ``golden/``: the model on one process in float32 (no process group: msprobe writes ``proc{PID}``);
- ``clean/``: the same weights tensor-parallel on 2 processes (``torch.multiprocessing.spawn``,
  torch.distributed's gloo backend on the CPU), in bfloat16: q/k/v and gate/up column-parallel (rank r
  its heads, its columns), o_proj and down_proj row-parallel (rank r its input columns, its slice of
  the weight's columns, then ``torch.distributed.all_reduce`` of the partial sums inside the
  projection's ``forward``, as vLLM's RowParallelLinear does), embedding and lm_head replicated;
- ``allreduce/``: as ``clean/``, but rank 1's all-reduce after down_proj in layer 1 at token 2 leaves
  its peer's contribution out (its output is its own partial sum);
- ``column/``: as ``clean/``, but rank 1's up_proj (column-parallel: its 32 of the 64 output columns)
  in layer 0 at token 1 computes with its weight shard scaled by 1.05 (swapped in without an API
  call, as scripts/make_ep_msprobe_fixtures.py does for its expert), so msprobe's records of that
  ``Functional.linear`` and of its module hold the wrong output while their input is the clean run's.
  It tips token 1's greedy choice, a near tie in the golden (case.json's ``generated``): tokens 2 and
  3 of ``column/`` run on another token than the golden's.

The golden and the tests share the model's code (``build_model``), so their module and class names
are the same; the golden's row-parallel projections simply have nothing to all-reduce.

Every side is dumped by mindstudio-probe's ``PrecisionDebugger`` (task tensor, level mix: modules and
API calls; L1 would leave no module around the test's all-reduce, see ``LEVEL``), one step for the
whole generation. msprobe writes ``step0/proc{PID}/`` for the golden (no process group) and
``step0/rank0/``, ``step0/rank1/`` for a test (``dump.json``, ``construct.json``, ``stack.json``,
``dump_tensor_data/*.pt``), each rank its own records with its own call counters. It records
``Distributed.all_reduce.N.forward`` with the tensor before the call as ``input_args[0]`` (``input.0``)
and the same tensor after it as ``output[0]`` (``output.0``); ``op`` is recorded only where the
caller passes it. Rank 0 picks each next token and broadcasts it (``Distributed.broadcast``, between
forward passes), as a serving engine does, so a rank whose logits went wrong runs the same request.

The all-reduce fault is installed below msprobe: ``torch.distributed.all_reduce`` is replaced before
msprobe is imported and wraps it (core/dump/api_dump/api_registry.py ``store_ori_attr``), so msprobe's
record of that call holds the wrong output, as it would a faulty communication library's. The column
fault is a second weight tensor (not a parameter) that the projection uses in place of its own at the
faulty token. The script reads the dumps back and refuses an archive whose faulty records do not show
their fault (``check_fault``, ``check_column_fault``).

Run in the tools venv (docs/formats.md §0; scripts/make_model_fixtures.py's docstring)::

    ~/tools-venv/bin/python scripts/make_tp_msprobe_fixtures.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_model_fixtures import PROMPT, SEED, _pack, _relativise  # noqa: E402

OUT = REPO / "tests" / "data" / "tp"
NAME = "llama-tp2-msprobe"
# mix, not L1: L1 records API calls only (construct.json is empty), so no module holds the test's
# Distributed.all_reduce records, which the one-device golden does not have; mix records the
# modules too (each API call under its module), and the all-reduce is then the test's own operator
# inside the projection both sides have
LEVEL = "mix"
WORLD = 2
NEW_TOKENS = 4
VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 256, 32, 64, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
THETA, EPS, STD = 10000.0, 1e-6, 0.2
TEST_DTYPE = "bfloat16"
CASES = ("clean", "allreduce", "column")
FAULT = {"case": "allreduce", "rank": 1, "layer": 1, "projection": "down_proj", "token": 2}
# a column-parallel projection's shard wrong on one rank: its output columns, not a collective
COLUMN_FAULT = {"case": "column", "rank": 1, "layer": 0, "projection": "up_proj", "token": 1}
SCALE = 1.05

STATE: dict[str, Any] = {"token": -1, "layer": -1, "projection": "", "all_reduce": 0, "column": None}


# --- the model: one code for both sides, ``world`` 1 on the golden ---------------------------------


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
        weights[prefix + "mlp.gate_proj.weight"] = normal(INTER, HIDDEN)
        weights[prefix + "mlp.up_proj.weight"] = normal(INTER, HIDDEN)
        weights[prefix + "mlp.down_proj.weight"] = normal(HIDDEN, INTER)
    weights["model.norm.weight"] = 1 + normal(HIDDEN) / 2
    weights["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return weights


def build_model(rank: int, world: int, dtype: Any, faulty: bool = False) -> Any:
    """The model as rank ``rank`` of ``world`` holds it (``world`` 1: the whole model); ``faulty``: this
    rank holds ``COLUMN_FAULT``'s projection with a wrong shard beside its own."""
    import torch
    import torch.distributed as dist
    from torch import nn

    full = full_weights()
    heads, kv_heads, inter = HEADS // world, KV_HEADS // world, INTER // world

    def rows(name: str, size: int) -> Any:  # column-parallel: rank r's output rows of the weight
        return full[name][rank * size : (rank + 1) * size]

    def columns(name: str, size: int) -> Any:  # row-parallel: rank r's input columns of the weight
        return full[name][:, rank * size : (rank + 1) * size]

    class Linear(nn.Module):
        """``F.linear`` without bias; row-parallel ones all-reduce their partial sums (world > 1);
        ``wrong`` (the column fault's shard) a second weight that ``use_wrong`` swaps in, without an
        API call msprobe would record."""

        def __init__(self, weight: Any, name: str, reduce: bool = False, wrong: Any = None) -> None:
            super().__init__()
            self.weight = nn.Parameter(weight.to(dtype).contiguous(), requires_grad=False)
            self.name, self.reduce = name, reduce
            self.wrong = None if wrong is None else wrong.to(dtype).contiguous()
            self.use_wrong = False

        def forward(self, x: Any) -> Any:
            STATE["projection"] = self.name
            out = nn.functional.linear(x, self.wrong if self.use_wrong else self.weight)
            if self.reduce and world > 1:
                dist.all_reduce(out)
            return out

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
            self.layer = layer
            self.q_proj = Linear(rows(p + "q_proj.weight", heads * HEAD_DIM), "q_proj")
            self.k_proj = Linear(rows(p + "k_proj.weight", kv_heads * HEAD_DIM), "k_proj")
            self.v_proj = Linear(rows(p + "v_proj.weight", kv_heads * HEAD_DIM), "v_proj")
            self.o_proj = Linear(columns(p + "o_proj.weight", heads * HEAD_DIM), "o_proj", reduce=True)
            self.cache: list[Any] = []

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            STATE["layer"] = self.layer
            batch, tokens, _ = x.shape
            q = self.q_proj(x).view(batch, tokens, heads, HEAD_DIM).transpose(1, 2)
            k = self.k_proj(x).view(batch, tokens, kv_heads, HEAD_DIM).transpose(1, 2)
            v = self.v_proj(x).view(batch, tokens, kv_heads, HEAD_DIM).transpose(1, 2)
            q, k = (
                rotate(q, cos.unsqueeze(1), sin.unsqueeze(1)),
                rotate(k, cos.unsqueeze(1), sin.unsqueeze(1)),
            )
            if self.cache:
                k, v = torch.cat((self.cache[0], k), dim=2), torch.cat((self.cache[1], v), dim=2)
            self.cache = [k, v]
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HEAD_DIM)
            if tokens > 1:  # the prefill: causal
                scores = scores.masked_fill(
                    torch.ones(tokens, tokens, dtype=torch.bool).triu(1), float("-inf")
                )
            probabilities = torch.softmax(scores.float(), dim=-1).to(dtype)
            attended = torch.matmul(probabilities, v).transpose(1, 2).reshape(batch, tokens, heads * HEAD_DIM)
            return self.o_proj(attended)

    class LlamaMLP(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}.mlp."
            self.layer = layer
            self.is_faulty = faulty and layer == COLUMN_FAULT["layer"]
            up = rows(p + "up_proj.weight", inter)
            self.gate_proj = Linear(rows(p + "gate_proj.weight", inter), "gate_proj")
            self.up_proj = Linear(up, "up_proj", wrong=up * SCALE if self.is_faulty else None)
            self.down_proj = Linear(columns(p + "down_proj.weight", inter), "down_proj", reduce=True)

        def forward(self, x: Any) -> Any:
            self.up_proj.use_wrong = self.is_faulty and STATE["token"] == COLUMN_FAULT["token"]
            if self.up_proj.use_wrong:
                STATE["column"] = {"token": STATE["token"], "layer": self.layer}
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self, layer: int) -> None:
            super().__init__()
            p = f"model.layers.{layer}."
            self.self_attn = LlamaAttention(layer)
            self.mlp = LlamaMLP(layer)
            self.input_layernorm = LlamaRMSNorm(full[p + "input_layernorm.weight"])
            self.post_attention_layernorm = LlamaRMSNorm(full[p + "post_attention_layernorm.weight"])

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class LlamaModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding.from_pretrained(full["model.embed_tokens.weight"].to(dtype))
            self.layers = nn.ModuleList(LlamaDecoderLayer(i) for i in range(LAYERS))
            self.norm = LlamaRMSNorm(full["model.norm.weight"])
            self.rotary_emb = LlamaRotaryEmbedding()

        def forward(self, ids: Any, positions: Any) -> Any:
            x = self.embed_tokens(ids)
            cos, sin = self.rotary_emb(positions)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.norm(x)

    class LlamaForCausalLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = LlamaModel()
            self.lm_head = Linear(full["lm_head.weight"], "lm_head")

        def forward(self, ids: Any, positions: Any) -> Any:
            STATE["token"] += 1
            return self.lm_head(self.model(ids, positions)[:, -1:])  # the last position's logits only

    return LlamaForCausalLM().eval()


def generate(model: Any, world: int = 1) -> list[int]:
    """Greedy decoding, one forward pass per token (the prompt's at token 0), the KV cache kept.
    With several ranks rank 0 picks the next token and broadcasts it, as a serving engine does: a
    rank whose logits went wrong still runs the same request."""
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


def _config(out: Path, name: str) -> Path:
    config = out.parent / f"{name}_config.json"
    settings = {
        "task": "tensor",
        "dump_path": str(out),
        "rank": [],
        "step": [],
        "level": LEVEL,
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    config.write_text(json.dumps(settings), encoding="utf-8")
    return config


def _dump(model: Any, out: Path, config_name: str, world: int = 1) -> list[int]:
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(config_path=str(_config(out, config_name)))
    debugger.start(model)
    generated = generate(model, world)
    debugger.stop()
    debugger.step()
    return generated


# --- the golden: one process --------------------------------------------------------------------


def golden_main(out: str, record: str) -> None:
    import torch

    torch.set_grad_enabled(False)
    Path(out).mkdir(parents=True)
    generated = _dump(build_model(0, 1, torch.float32), Path(out), "golden")
    Path(record).write_text(json.dumps({"generated": generated}), encoding="utf-8")


# --- a test: one process per rank ---------------------------------------------------------------


def rank_main(rank: int, world: int, case: str, out: str, port: int, record: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_grad_enabled(False)
    original = dist.all_reduce
    faulty: dict[str, Any] = {}

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):  # type: ignore[no-untyped-def]
        """torch's; in the faulty case one call on the faulty rank keeps only its own partial sum."""
        index = STATE["all_reduce"]
        STATE["all_reduce"] += 1
        own = tensor.clone()
        work = original(tensor, op=op, group=group, async_op=async_op)
        where = {"token": STATE["token"], "layer": STATE["layer"], "projection": STATE["projection"]}
        if case == FAULT["case"] and rank == FAULT["rank"] and all(where[k] == FAULT[k] for k in where):
            tensor.copy_(own)
            faulty["record"] = f"Distributed.all_reduce.{index}.forward"
        return work

    # before msprobe is imported: it wraps whatever these are when it registers its hooks
    dist.all_reduce = all_reduce
    dist.distributed_c10d.all_reduce = all_reduce
    column = case == COLUMN_FAULT["case"] and rank == COLUMN_FAULT["rank"]
    model = build_model(rank, world, getattr(torch, TEST_DTYPE), column)
    generated = _dump(model, Path(out), f"{case}_rank{rank}", world)
    if rank == 0:
        Path(out).parent.joinpath(f"{case}_rank0_config.json").rename(
            Path(out).parent / f"{case}_config.json"
        )
    else:
        Path(out).parent.joinpath(f"{case}_rank{rank}_config.json").unlink()
    Path(f"{record}.{rank}").write_text(
        json.dumps({"generated": generated, "fault_record": faulty.get("record"), "column": STATE["column"]}),
        encoding="utf-8",
    )
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_test(case: str, out: Path, work: Path) -> dict[str, Any]:
    import torch.multiprocessing as mp

    out.mkdir(parents=True)
    record = work / f"{case}_run.json"
    mp.spawn(rank_main, args=(WORLD, case, str(out), _free_port(), str(record)), nprocs=WORLD)
    runs = [json.loads(Path(f"{record}.{r}").read_text(encoding="utf-8")) for r in range(WORLD)]
    if len({tuple(r["generated"]) for r in runs}) != 1:
        raise SystemExit(f"{case}: the ranks generated different tokens {[r['generated'] for r in runs]}")
    return {
        "generated": runs[0]["generated"],
        "fault_record": runs[FAULT["rank"]]["fault_record"],
        "column": runs[COLUMN_FAULT["rank"]]["column"],
    }


def check_fault(out: Path, name: str) -> dict[str, Any]:
    """The faulty record as msprobe wrote it, on both ranks: the faulty rank's ``output.0`` is its own
    ``input.0`` (its peer's contribution left out); its peer's is the sum of both ranks' ``input.0``
    rounded once to the dtype (what gloo's all-reduce of two gives)."""
    import torch

    def tensors(rank: int) -> tuple[Any, Any]:
        (dump_json,) = out.glob(f"step0/rank{rank}/dump.json")
        entry = json.loads(dump_json.read_text(encoding="utf-8"))["data"][name]
        folder = dump_json.parent / "dump_tensor_data"
        return (
            torch.load(folder / entry["input_args"][0]["data_name"]),
            torch.load(folder / entry["output"][0]["data_name"]),
        )

    (own, wrong), (peer, right) = tensors(FAULT["rank"]), tensors(1 - FAULT["rank"])
    summed = (own.double() + peer.double()).to(own.dtype)
    if not (torch.equal(wrong, own) and torch.equal(right, summed)) or torch.equal(wrong, right):
        raise SystemExit(f"{name}: msprobe's record does not show the fault")
    return {
        "faulty_rank_output_0": "its own input.0 (the peer's contribution left out)",
        "peer_output_0": "input.0 of both ranks summed, rounded once",
        "input_slot": "input_args[0] / input.0: the tensor before the call",
        "output_slot": "output[0] / output.0: the same tensor after the call",
    }


def column_records(out: Path, rank: int) -> tuple[str, str]:
    """msprobe's names of the column fault's projection on ``rank`` of the test ``out``: its module's
    record (the call at the fault's token) and the ``Functional.linear`` that construct.json puts
    under it."""
    (construct,) = out.glob(f"step0/rank{rank}/construct.json")
    parents = json.loads(construct.read_text(encoding="utf-8"))
    module = (
        f"Module.model.layers.{COLUMN_FAULT['layer']}.mlp.{COLUMN_FAULT['projection']}.Linear.forward."
        f"{COLUMN_FAULT['token']}"
    )
    linears = [k for k, parent in parents.items() if parent == module and k.startswith("Functional.linear.")]
    if len(linears) != 1:
        raise SystemExit(f"{out.name}: construct.json puts {linears} under {module}, not one linear")
    return module, linears[0]


def check_column_fault(case_dir: Path) -> dict[str, Any]:
    """msprobe's records of the column fault's projection: on the faulty rank, the linear's and its
    module's input the clean run's bit for bit, their output not the clean run's but the clean one
    times ``SCALE`` to bfloat16 rounding; on its peer, every one of them the clean run's."""
    import torch

    def tensors(case: str, rank: int, name: str) -> tuple[Any, Any]:
        (dump_json,) = (case_dir / case).glob(f"step0/rank{rank}/dump.json")
        entry = json.loads(dump_json.read_text(encoding="utf-8"))["data"][name]
        folder = dump_json.parent / "dump_tensor_data"
        return (
            torch.load(folder / entry["input_args"][0]["data_name"]),
            torch.load(folder / entry["output"][0]["data_name"]),
        )

    rank, case = COLUMN_FAULT["rank"], COLUMN_FAULT["case"]
    names = column_records(case_dir / case, rank)
    if column_records(case_dir / "clean", rank) != names:
        raise SystemExit(f"clean and {case} named the faulty projection's records otherwise")
    for name in names:
        clean_in, clean_out = tensors("clean", rank, name)
        wrong_in, wrong_out = tensors(case, rank, name)
        if not torch.equal(clean_in, wrong_in) or torch.equal(clean_out, wrong_out):
            raise SystemExit(f"{name}: msprobe's record on rank {rank} does not show the column fault")
        scaled = clean_out.double() * SCALE
        relative = float((wrong_out.double() - scaled).abs().max() / scaled.abs().max())
        if relative > 2**-6:
            raise SystemExit(f"{name}: the faulty output is not the clean one scaled ({relative})")
        peer = [tensors(side, 1 - rank, name) for side in ("clean", case)]
        if not all(torch.equal(a, b) for a, b in zip(*peer, strict=True)):
            raise SystemExit(f"{name}: rank {1 - rank}'s record differs from the clean run's")
    return {
        "module_record": names[0],
        "record": names[1],
        "input_0": "the clean run's, bit for bit (on both ranks)",
        "output_0": f"on rank {rank} the clean run's times {SCALE} (its up_proj weight shard scaled), to "
        f"bfloat16 rounding; on rank {1 - rank} the clean run's",
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
    fault_record = runs[FAULT["case"]]["fault_record"]
    if not fault_record:
        raise SystemExit("the faulty all-reduce never ran")
    seen = check_fault(case_dir / FAULT["case"], fault_record)
    if runs[COLUMN_FAULT["case"]]["column"] != {
        "token": COLUMN_FAULT["token"],
        "layer": COLUMN_FAULT["layer"],
    }:
        raise SystemExit(f"the faulty {COLUMN_FAULT['projection']} never ran: {runs[COLUMN_FAULT['case']]}")
    column_seen = check_column_fault(case_dir)
    _relativise(case_dir)
    _relativise_stdlib(case_dir)
    description = {
        "case": NAME,
        "golden": "a Llama-shaped model in plain torch modules (transformers' module names), float32, "
        "one process (msprobe writes proc{PID})",
        "test": f"the same weights tensor-parallel on {WORLD} processes (gloo, CPU), {TEST_DTYPE}: "
        "q/k/v and gate/up column-parallel, o_proj and down_proj row-parallel with "
        "torch.distributed.all_reduce inside their forward, embedding and lm_head replicated",
        "cases": {
            "clean": "the tensor-parallel run as it should be",
            "allreduce": f"rank {FAULT['rank']}'s all-reduce after {FAULT['projection']} in layer "
            f"{FAULT['layer']} at token {FAULT['token']} leaves its peer's contribution out",
            "column": f"rank {COLUMN_FAULT['rank']}'s {COLUMN_FAULT['projection']} (column-parallel: its "
            f"{INTER // WORLD} of the {INTER} output columns) in layer {COLUMN_FAULT['layer']} at token "
            f"{COLUMN_FAULT['token']} computes with its weight shard scaled by {SCALE}",
        },
        "config": {
            "vocab": VOCAB,
            "hidden": HIDDEN,
            "intermediate": INTER,
            "layers": LAYERS,
            "heads": HEADS,
            "kv_heads": KV_HEADS,
            "world": WORLD,
            "weights_std": STD,
            "seed": SEED,
        },
        "msprobe": {"task": "tensor", "level": LEVEL},
        "golden_dtype": "float32",
        "test_dtype": TEST_DTYPE,
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "fault": {
            **FAULT,
            "module": f"model.layers.{FAULT['layer']}.mlp.{FAULT['projection']}",
            "record": fault_record,
            "as_recorded": seen,
        },
        "column_fault": {
            **COLUMN_FAULT,
            "scale": SCALE,
            "module": f"model.layers.{COLUMN_FAULT['layer']}.mlp.{COLUMN_FAULT['projection']}",
            "module_record": column_seen["module_record"],
            "record": column_seen["record"],
            "as_recorded": column_seen,
        },
        "generated": {side: run["generated"] for side, run in runs.items()},
        "tools": _versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = OUT / f"{NAME}.tar.xz"
    _pack(case_dir, archive)
    return archive


def _relativise_stdlib(case_dir: Path) -> None:
    """The spawned ranks' stacks pass through the base interpreter's multiprocessing: its path too."""
    stdlib = re.escape(sys.base_prefix) + r"/lib/python[0-9.]+/"
    for stack in case_dir.rglob("stack.json"):
        text = stack.read_text(encoding="utf-8")
        stack.write_text(re.sub(stdlib, "lib/", text), encoding="utf-8")


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("mindstudio-probe", "torch")}


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
    with tempfile.TemporaryDirectory(prefix="tui-acc-tp-") as work:
        archive = make_archive(Path(work))
        if args.keep:
            import shutil

            shutil.copytree(Path(work) / NAME, Path(args.keep) / NAME, dirs_exist_ok=True)
        print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
