"""Re-encode an msit torch capture of the demo model as an msit ATB dump (docs/formats.md §2.2, §2.4).

The graph mirrors what an ATB Llama port builds: ``WordEmbedding``, one ``LlamaLayer`` per layer
holding an ``Attention`` graph (four ``LinearOperation``) and an ``MlpGateLayerV2`` graph (gate,
activation, up, down), two ``RmsNormOperation``, the final norm and ``LmHead``. Tensors are
bit-identical to the capture. With ``mindie=True`` the layout is MindIE's: two model topologies,
a warm-up in folder 0, tokens 0 and 1 together in folder 1. Another graph (``AtbOp`` trees) can be
given for other model families: there is no real ATB dump of them without an NPU.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.dumps.writers.atb_bin import write_bin

PID = 4242


@dataclass
class AtbOp:
    """One ATB operation of the graph to write, and the captured module whose files it carries."""

    op_type: str
    torch_name: str | None
    children: list[AtbOp] = field(default_factory=list)
    inputs: bool = False
    outputs: tuple[str, ...] = ()  # the module's files written as outtensor0, 1, ...; () for all outputs


def _graph(num_layers: int) -> list[AtbOp]:
    def layer(i: int) -> AtbOp:
        p = f"root.model.layers.{i}"
        attention = AtbOp(
            "Attention",
            f"{p}.self_attn",
            [AtbOp("LinearOperation", f"{p}.self_attn.{x}_proj") for x in "qkvo"],
        )
        mlp = AtbOp(
            "MlpGateLayerV2",
            f"{p}.mlp",
            [
                AtbOp("LinearOperation", f"{p}.mlp.gate_proj"),
                AtbOp("ActivationOperation", f"{p}.mlp.act_fn"),
                AtbOp("LinearOperation", f"{p}.mlp.up_proj"),
                AtbOp("LinearOperation", f"{p}.mlp.down_proj"),
            ],
        )
        norms = (
            AtbOp("RmsNormOperation", f"{p}.input_layernorm"),
            AtbOp("RmsNormOperation", f"{p}.post_attention_layernorm"),
        )
        return AtbOp("LlamaLayer", p, [norms[0], attention, norms[1], mlp], inputs=True)

    return [
        AtbOp("WordEmbedding", "root.model.embed_tokens", inputs=True),
        *(layer(i) for i in range(num_layers)),
        AtbOp("RmsNormOperation", "root.model.norm", inputs=True),
        AtbOp("LmHead", "root.lm_head", inputs=True),
    ]


def export_atb(
    torch_dump: Path,
    out: Path,
    mindie: bool = False,
    timestamp: str = "20250101_000000",
    graph: list[AtbOp] | None = None,
) -> Path:
    """Write ``out/msit_dump_{timestamp}`` from the msit torch dump at ``torch_dump``; return it.

    ``graph`` is the model's top-level operations; by default the demo's Llama graph.
    """
    (device,) = [
        p for p in torch_dump.glob("msit_dump_*/torch_tensors/*") if (p / "model_tree.json").is_file()
    ]
    tokens = sorted(int(p.name) for p in device.iterdir() if p.name.isdigit())
    if graph is None:
        # the first token the dump holds: a re-dump holds one token only
        num_layers = len(
            {p.name.split(".")[3] for p in (device / str(tokens[0])).glob("root.model.layers.*")}
        )
        graph = _graph(num_layers)
    root = out / f"msit_dump_{timestamp}"
    tensors = root / "tensors" / f"0_{PID}"
    decode_start = len(graph) if mindie else 0
    models = [("DecoderModel_Prefill", 0)] + ([("DecoderModel_Decoder", decode_start)] if mindie else [])
    for name, start in models:
        _write_topology(root / "model" / str(PID) / f"{name}.json", name, graph, start)
    _write_layer_topology(root / "layer" / str(PID), graph)
    for token in tokens:
        if mindie:
            if token == 0:
                _write_token(device / "0", tensors / "0", graph, 0)  # the warm-up runs the prefill model
                _write_token(device / "0", tensors / "1", graph, 0)
            elif token == 1:
                _write_token(device / "1", tensors / "1", graph, decode_start)
            else:
                _write_token(device / str(token), tensors / str(token), graph, decode_start)
        else:
            _write_token(device / str(token), tensors / str(token), graph, 0)
    return root


def _write_token(src: Path, dst: Path, graph: list[AtbOp], first_id: int) -> None:
    for index, op in enumerate(graph, start=first_id):
        _write_op(src, dst / f"{index}_{op.op_type}", op)


def _write_op(src: Path, folder: Path, op: AtbOp) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    module = src / op.torch_name if op.torch_name else None
    if module is not None and module.is_dir():
        outputs = [module / name for name in op.outputs] or sorted(
            p for p in module.glob("output*.pth") if p.stem.count("_") < 2
        )
        for k, file in enumerate(outputs):
            write_bin(folder / "after" / f"outtensor{k}.bin", load_tensor(file, ANYWHERE))
        if op.inputs and (module / "input_0.pth").is_file():
            write_bin(folder / "before" / "intensor0.bin", load_tensor(module / "input_0.pth", ANYWHERE))
    (folder / "op_param.json").write_text("{}", encoding="utf-8")
    for index, child in enumerate(op.children):
        _write_op(src, folder / f"{index}_{child.op_type}", child)


def _write_topology(path: Path, model_name: str, graph: list[AtbOp], first_id: int) -> None:
    def node(op: AtbOp, name: str) -> dict[str, object]:
        entry: dict[str, object] = {
            "opName": name,
            "opType": op.op_type,
            "param": {},
            "inTensors": [],
            "outTensors": [],
        }
        if op.children:
            entry["nodes"] = [
                node(c, f"{c.op_type}_{name.rsplit('_', 1)[-1]}_{j}") for j, c in enumerate(op.children)
            ]
        return entry

    nodes = [node(op, f"{op.op_type}_{i}") for i, op in enumerate(graph, start=first_id)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"modelName": model_name, "nodes": nodes}), encoding="utf-8")


def _write_layer_topology(folder: Path, graph: list[AtbOp]) -> None:
    layer_type = Counter(op.op_type for op in graph).most_common(1)[0][0]
    layer = next(op for op in graph if op.op_type == layer_type)
    folder.mkdir(parents=True, exist_ok=True)
    body = {
        "opName": f"{layer_type}_1",
        "opType": layer_type,
        "param": {},
        "nodes": [{"opType": c.op_type} for c in layer.children],
    }
    (folder / f"{layer_type}_1.json").write_text(json.dumps(body), encoding="utf-8")


def tensor_count(root: Path) -> int:
    """How many ``.bin`` files an export wrote (for the demo's summary)."""
    return sum(1 for _ in root.rglob("*.bin"))


__all__ = ["AtbOp", "export_atb", "tensor_count"]
