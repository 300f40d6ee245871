"""``tui-acc demo --ranks N``: the tiny model run tensor-parallel on N ranks, one all-reduce faulty,
written as one msit ATB run (``tensors/{device}_{pid}/{token}/...``, bfloat16).

The simplest honest tensor parallelism: every rank computes the replicated part of each layer, and
``o_proj`` and ``down_proj`` are split row-wise (rank r holds input columns r of N). Each rank's
partial product feeds an ``AllReduceOperation`` whose ``intensor0`` is that partial and whose
``outtensor0`` is the sum of every rank's (in float64, rounded once to bfloat16: the same bits on
every CPU, as the demo model's operators). The fault: at one token, in one layer, one rank's
all-reduce leaves out a peer's contribution; that rank then carries on from the wrong sum.
"""

from __future__ import annotations

import json
import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tui_acc.demo.model import (
    BFLOAT16,
    Cache,
    DecoderLayer,
    Linear,
    TinyConfig,
    TinyLlamaForCausalLM,
    add,
    build_model,
    generate,
    linear,
    rounded,
    wide,
)
from tui_acc.dumps.writers.atb_bin import write_bin

TIMESTAMP = "20250101_000000"
PID_BASE = 5100
NEW_TOKENS = 6
FAULT_TOKEN = 3
FAULT_LAYER = 2
# a layer's operations, in execution order: (type, what it writes); the all-reduces are 3 and 8
LAYER_OPS = (
    "RmsNormOperation",
    "SelfAttentionOperation",
    "LinearOperation",
    "AllReduceOperation",
    "ElewiseOperation",
    "RmsNormOperation",
    "MlpGateOperation",
    "LinearOperation",
    "AllReduceOperation",
    "ElewiseOperation",
)
FAULT_OP_INDEX = 8  # the all-reduce after down_proj


@dataclass(frozen=True)
class Fault:
    token: int
    layer: int
    op_index: int  # in LAYER_OPS: 3 (after o_proj) or 8 (after down_proj)
    rank: int  # whose output leaves out the next rank's contribution


@dataclass(frozen=True)
class RanksDemo:
    out: Path
    dump: Path  # the run's tensors/ folder, holding a {device}_{pid} folder per rank
    world: int
    fault: Fault
    generated: list[int]

    @property
    def fault_op(self) -> str:
        """The ATB name of the all-reduce the fault corrupts (``fault_op_name``)."""
        return fault_op_name(self.fault)

    def describe(self) -> str:
        """The dump's folder, the fault, the generated ids and the command that checks the ranks, one per
        line."""
        peer = (self.fault.rank + 1) % self.world
        return "\n".join(
            [
                f"tensor-parallel test dump ({self.world} ranks, bfloat16): {self.dump}",
                f"injected fault: token {self.fault.token}, {self.fault_op}, rank {self.fault.rank}: "
                f"its all-reduce output leaves out rank {peer}'s contribution",
                f"one-device golden (float32, msit torch): {self.out / 'golden'}",
                f"generated ids (rank 0): {self.generated}",
                f"check it:  {shlex.join(['tui-acc', 'ranks', str(self.dump)])}",
                "against the golden:  "
                + shlex.join(["tui-acc", str(self.out / "golden"), str(self.out / "test"), "--all-tokens"]),
            ]
        )


def fault_op_name(fault: Fault) -> str:
    """``{layer}_LlamaLayer/{index}_{op}``: the ATB path of the operation ``fault`` corrupts (layers
    counted from 1)."""
    return f"{fault.layer + 1}_LlamaLayer/{fault.op_index}_{LAYER_OPS[fault.op_index]}"


MANIFEST = "demo.json"


def make_ranks_demo(
    out: Path, world: int = 2, seed: int = 0, progress: Callable[[str], None] | None = None
) -> RanksDemo:
    """Write (or reuse) the demo's tensor-parallel dump under ``out``."""
    from tui_acc import __version__
    from tui_acc.demo import DemoError

    if world < 2:
        raise DemoError(f"--ranks {world}: a tensor-parallel run needs 2 ranks or more")
    config = TinyConfig()
    if config.hidden_size % world or config.intermediate_size % world:
        raise DemoError(f"--ranks {world}: the demo model's sizes do not split into {world} ranks")
    say = progress or (lambda _msg: None)
    out = out.expanduser()
    layout = f"ranks{world}"
    fault = Fault(FAULT_TOKEN, FAULT_LAYER, FAULT_OP_INDEX, world - 1)
    dump = out / "test" / f"msit_dump_{TIMESTAMP}" / "tensors"
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if (
        isinstance(manifest, dict)
        and manifest.get("version") == __version__
        and manifest.get("seed") == seed
        and manifest.get("layout") == layout
        and dump.is_dir()
        and (out / "golden").is_dir()
    ):
        say(f"reusing the demo already in {out}")
        return RanksDemo(out, dump, world, fault, list(manifest.get("generated", [])))
    if out.exists() and any(out.iterdir()):
        raise DemoError(f"{out}: exists and is not an empty folder or an earlier demo; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    prompt = random.Random(seed).sample(range(1, 500), 8)
    say(f"tensor-parallel run on {world} ranks: bfloat16, fault at token {fault.token} ...")
    generated = run_tensor_parallel(out / "test", seed, prompt, NEW_TOKENS, world, fault, config)
    say("one-device golden: float32 ...")
    write_golden(out / "golden", seed, prompt, config)
    body = {"version": __version__, "seed": seed, "layout": layout, "prompt": prompt, "generated": generated}
    body["fault"] = {"token": fault.token, "op": fault_op_name(fault), "rank": fault.rank}
    (out / MANIFEST).write_text(json.dumps(body, indent=2), encoding="utf-8")
    return RanksDemo(out, dump, world, fault, generated)


def write_golden(
    out: Path,
    seed: int,
    prompt: list[int],
    config: TinyConfig | None = None,
    new_tokens: int = NEW_TOKENS,
) -> list[int]:
    """The same model on one device in float32, captured in msit's torch layout (weights included):
    the golden a sharded run is compared with."""
    from tui_acc.demo.capture import MsitTorchCapture

    model = build_model(seed, config)
    with MsitTorchCapture(model, out, dump_weight=True):
        return generate(model, prompt, new_tokens)


def _row_parallel(layer: Linear, x: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s partial product: its block of input columns, rounded once."""
    width = layer.in_features // world
    cols = slice(rank * width, (rank + 1) * width)
    return rounded(linear(x[..., cols], layer.weight[:, cols]), x.dtype)


def _all_reduce(partials: list[np.ndarray], leave_out: int | None = None) -> np.ndarray:
    """The sum in float64 (bfloat16 values add exactly there: any order, the same bits), rounded once."""
    kept = [p for r, p in enumerate(partials) if r != leave_out]
    return rounded(np.stack([wide(p) for p in kept]).sum(axis=0), partials[0].dtype)


def run_tensor_parallel(
    out: Path,
    seed: int,
    prompt: list[int],
    new_tokens: int,
    world: int,
    fault: Fault | None,
    config: TinyConfig | None = None,
) -> list[int]:
    """Generate greedily on ``world`` ranks and write each rank's ATB dump; return rank 0's ids."""
    model = build_model(seed, config).to(BFLOAT16)
    root = out / f"msit_dump_{TIMESTAMP}"
    _write_topology(root, model, world)
    caches: list[list[Cache]] = [[[] for _ in model.model.layers] for _ in range(world)]
    ids = np.array([prompt], dtype=np.int64)
    positions = np.arange(len(prompt), dtype=np.int64)[None]
    generated: list[int] = []
    for token in range(new_tokens):
        folders = [root / "tensors" / f"{r}_{PID_BASE + r}" / str(token) for r in range(world)]
        logits = _forward(model, ids, positions, caches, folders, token, fault)
        next_id = int(logits[0][0, -1].astype(np.float32).argmax())  # rank 0 samples; the others follow it
        generated.append(next_id)
        ids = np.array([[next_id]], dtype=np.int64)
        positions = positions[:, -1:] + 1
    return generated


def _forward(
    model: TinyLlamaForCausalLM,
    ids: np.ndarray,
    positions: np.ndarray,
    caches: list[list[Cache]],
    folders: list[Path],
    token: int,
    fault: Fault | None,
) -> list[np.ndarray]:
    world = len(folders)
    hidden = model.model.embed_tokens(ids)
    cos, sin = model.model.rotary_emb(hidden, positions)
    states = [hidden] * world
    for folder in folders:
        _write(folder / "0_WordEmbedding", inputs=[ids], outputs=[hidden])
    for i, layer in enumerate(model.model.decoder_layers()):
        faulty = fault if fault is not None and (fault.token, fault.layer) == (token, i) else None
        states = _layer(
            layer,
            states,
            cos,
            sin,
            [c[i] for c in caches],
            [f / f"{i + 1}_LlamaLayer" for f in folders],
            faulty,
        )
    top = len(model.model.layers) + 1
    logits = []
    for rank, folder in enumerate(folders):
        normed = model.model.norm(states[rank])
        _write(folder / f"{top}_RmsNormOperation", inputs=[states[rank]], outputs=[normed])
        last = normed[:, -1:, :]  # the positions it projects: the last (MindIE gathers them first)
        result = model.lm_head(last)
        _write(folder / f"{top + 1}_LmHead", inputs=[last], outputs=[result])
        logits.append(result)
    return logits


def _layer(
    layer: DecoderLayer,
    states: list[np.ndarray],
    cos: np.ndarray,
    sin: np.ndarray,
    caches: list[Cache],
    folders: list[Path],
    fault: Fault | None,
) -> list[np.ndarray]:
    world = len(states)
    entering = list(states)
    written: list[dict[int, tuple[list[np.ndarray], list[np.ndarray]]]] = [{} for _ in range(world)]
    partials = []
    for rank in range(world):
        normed = layer.input_layernorm(states[rank])
        context = layer.self_attn.context(normed, cos, sin, caches[rank])
        partial = _row_parallel(layer.self_attn.o_proj, context, rank, world)
        written[rank].update(
            {0: ([states[rank]], [normed]), 1: ([normed], [context]), 2: ([context], [partial])}
        )
        partials.append(partial)
    reduced = _reduced(partials, fault, 3)
    mlp_partials = []
    for rank in range(world):
        after_attention = add(states[rank], reduced[rank])
        normed = layer.post_attention_layernorm(after_attention)
        gated = layer.mlp.gated(normed)
        partial = _row_parallel(layer.mlp.down_proj, gated, rank, world)
        written[rank].update(
            {
                3: ([partials[rank]], [reduced[rank]]),
                4: ([states[rank], reduced[rank]], [after_attention]),
                5: ([after_attention], [normed]),
                6: ([normed], [gated]),
                7: ([gated], [partial]),
            }
        )
        states[rank] = after_attention
        mlp_partials.append(partial)
    reduced = _reduced(mlp_partials, fault, 8)
    out = []
    for rank in range(world):
        result = add(states[rank], reduced[rank])
        # the layer graph itself: its first intensor (the hidden states) and its outtensor, as msit
        # writes a graph operation's
        _write(folders[rank], [entering[rank]], [result])
        written[rank].update(
            {8: ([mlp_partials[rank]], [reduced[rank]]), 9: ([states[rank], reduced[rank]], [result])}
        )
        out.append(result)
        for index, (inputs, outputs) in sorted(written[rank].items()):
            folder = folders[rank] / f"{index}_{LAYER_OPS[index]}"
            param = {
                "allReduceType": "sum",
                "rank": rank,
                "rankSize": world,
                "rankRoot": 0,
                "backend": "hccl",
            }
            _write(folder, inputs, outputs, param if LAYER_OPS[index] == "AllReduceOperation" else {})
    return out


def _reduced(partials: list[np.ndarray], fault: Fault | None, op_index: int) -> list[np.ndarray]:
    """Every rank's all-reduce output; the faulty rank's leaves out the next rank's contribution."""
    total = _all_reduce(partials)
    results = [total] * len(partials)
    if fault is not None and fault.op_index == op_index:
        results = list(results)
        results[fault.rank] = _all_reduce(partials, leave_out=(fault.rank + 1) % len(partials))
    return results


def _write(
    folder: Path,
    inputs: list[np.ndarray],
    outputs: list[np.ndarray],
    param: dict[str, object] | None = None,
) -> None:
    # msit ATB's default -time 3: intensors before execution, outtensors after (docs/formats.md §2.1)
    for k, tensor in enumerate(inputs):
        write_bin(folder / "before" / f"intensor{k}.bin", tensor)
    for k, tensor in enumerate(outputs):
        write_bin(folder / "after" / f"outtensor{k}.bin", tensor)
    (folder / "op_param.json").write_text(json.dumps(param or {}), encoding="utf-8")


def _write_topology(root: Path, model: TinyLlamaForCausalLM, world: int) -> None:
    """model/{pid}/DecoderModel.json per rank: the reader takes the model's name and first id from it."""
    layers = len(model.model.layers)
    types = ["WordEmbedding", *(["LlamaLayer"] * layers), "RmsNormOperation", "LmHead"]
    nodes = [
        {"opName": f"{t}_{i}", "opType": t, "param": {}, "inTensors": [], "outTensors": []}
        for i, t in enumerate(types)
    ]
    for rank in range(world):
        path = root / "model" / str(PID_BASE + rank) / "DecoderModel.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"modelName": "DecoderModel", "nodes": nodes}), encoding="utf-8")
