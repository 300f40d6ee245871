"""TorchAir dumps of a small Llama: an FX dump (the golden) and two GE dumps (clean, and one faulty
MatMul at token 2), packed as ``tests/data/torchair/llama.tar.xz`` (``fx/``, ``ge-clean/``,
``ge-fault/`` and ``case.json``: the faulty op's FX node and GE op, and its token).

No NPU and no TorchAir here, so each side is written as TorchAir writes it, from its source
(torchair ``fx_dumper.py``, ``fx2ge_converter.py``, ``dump_config.py``; msprobe's ``dump_data.proto``):

- The model is a Llama decoder (shapes from a transformers ``LlamaConfig``, seeded random weights,
  bf16) with a static KV cache, written in torch and traced by ``make_fx`` into two aten graphs: a
  prefill graph (4 tokens) and a decode graph (1 token). They run prefill, then decode twice: three
  runs, tokens 0, 1 and 2 (decode step 1 is token 2).
- **FX dump**: an ``Interpreter`` saving each aten node's arguments and results as ``_NpuFxDumper``
  does: ``worldsize1_global_rank0/graph_{n}/{step}/{node}-{target}.INPUT.{i}[.{j}].{time}.npy``, bf16
  saved as float32, other arguments as ``np.array(x)``.
- **GE dump**: a graph text per graph (``dynamo_original_graph_{n}_rank_0_pid_1_ts_….txt``: one GE op
  per aten node, named by type and count, inputs as ``producer:index``, each output's
  ``_fx_tensor_name``) and one file per op and run
  (``worldsize1_global_rank0/{time}/0/graph_{n}/1/{step}/{type}.{name}.{task}.{stream}.{timestamp}``)
  encoded with the protobuf library from ``scripts/proto/dump_data.proto``. The GE run computes each
  op from its own inputs, matmuls rounded once from float64 (not the CPU's bf16 kernel), so the two
  sides differ by rounding as a graph engine's kernels do. Layer 0's silu and the mul after it are
  one fused op (``AutomaticBufferFusionOp.{silu}{mul}``), the lm_head's weight is dumped FRACTAL_NZ,
  and GE inserted a Cast of the logits to float32 (``trans_Cast_0``, in no graph text).
- **The fault** (``ge-fault``): at token 2, layer 1's down-projection MatMul writes its first 8
  columns x1.25; everything after it in that run follows from it.

Run in the tools venv (torch, protobuf, grpcio-tools)::

    ~/tools-venv/bin/python scripts/make_torchair_fixtures.py
"""

from __future__ import annotations

import json
import operator
import struct
import sys
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch.fx import traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_ge_dump_fixtures import compiled, nz_tiles

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "tests" / "data" / "torchair" / "llama.tar.xz"
OUT = Path(tempfile.mkdtemp()) / "llama"
CONFIG = LlamaConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=16,
    rms_norm_eps=1e-6,
)
PROMPT, DECODE_STEPS, CACHE = 4, 2, 8
FAULT_TOKEN, FAULT_SCALE, FAULT_COLUMNS = 2, 4.0, 16
DT = {torch.float32: 1, torch.float16: 2, torch.int32: 7, torch.int64: 8, torch.bool: 11, torch.bfloat16: 27}
DT_NAME = {1: "DT_FLOAT", 2: "DT_FLOAT16", 7: "DT_INT32", 8: "DT_INT64", 11: "DT_BOOL", 27: "DT_BF16"}
ND, FRACTAL_NZ = 2, 29
GE_TYPE = {
    "mm": "MatMulV2",
    "bmm": "BatchMatMulV2",
    "add": "Add",
    "mul": "Mul",
    "pow": "Pow",
    "mean": "ReduceMean",
    "rsqrt": "Rsqrt",
    "silu": "Swish",
    "_softmax": "SoftmaxV2",
    "embedding": "GatherV2",
    "t": "Transpose",
    "view": "Reshape",
    "_unsafe_view": "Reshape",
    "transpose": "Transpose",
    "permute": "Transpose",
    "expand": "BroadcastTo",
    "clone": "Identity",
    "cat": "ConcatV2",
    "neg": "Neg",
    "slice": "StridedSliceV2",
    "index_copy": "Scatter",
    "unsqueeze": "Unsqueeze",
    "div": "RealDiv",
}


def weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    h, f, v = CONFIG.hidden_size, CONFIG.intermediate_size, CONFIG.vocab_size
    w: dict[str, torch.Tensor] = {"embed": torch.randn(v, h), "norm": 1 + 0.1 * torch.randn(h)}
    for layer in range(CONFIG.num_hidden_layers):
        for name, shape in (("q", (h, h)), ("k", (h, h)), ("v", (h, h)), ("o", (h, h))):
            w[f"{layer}.{name}"] = torch.randn(*shape) / h**0.5
        w[f"{layer}.gate"] = torch.randn(f, h) / h**0.5
        w[f"{layer}.up"] = torch.randn(f, h) / h**0.5
        w[f"{layer}.down"] = torch.randn(h, f) / f**0.5
        w[f"{layer}.in_norm"] = 1 + 0.1 * torch.randn(h)
        w[f"{layer}.post_norm"] = 1 + 0.1 * torch.randn(h)
    w["lm_head"] = torch.randn(v, h) / h**0.5
    return {k: t.to(torch.bfloat16) for k, t in w.items()}


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + CONFIG.rms_norm_eps) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


@contextmanager
def module(path: str, kind: type):
    """The nodes traced inside are ``path``'s (``node.meta["nn_module_stack"]``, as dynamo records it:
    ``(L['self'].{path}, class)`` for each module, outermost first)."""
    before = fx_traceback.current_meta.get("nn_module_stack")
    stack = dict(before or {})
    stack[f"L__self___{path.replace('.', '_')}"] = (f"L['self'].{path}", kind)
    fx_traceback.current_meta["nn_module_stack"] = stack
    try:
        yield
    finally:
        if before is None:
            fx_traceback.current_meta.pop("nn_module_stack", None)
        else:
            fx_traceback.current_meta["nn_module_stack"] = before


def forward(w: dict[str, torch.Tensor]):
    heads = CONFIG.num_attention_heads
    dim = CONFIG.hidden_size // heads

    def run(ids, positions, cos, sin, mask, *caches):
        seq = ids.shape[0]
        with module("model.embed_tokens", torch.nn.Embedding):
            x = torch.nn.functional.embedding(ids, w["embed"])
        new_caches = []
        for layer in range(CONFIG.num_hidden_layers):
            k_cache, v_cache = caches[2 * layer], caches[2 * layer + 1]
            prefix = f"model.layers.{layer}"
            with module(prefix, hf.LlamaDecoderLayer):
                with module(f"{prefix}.input_layernorm", hf.LlamaRMSNorm):
                    h = rms_norm(x, w[f"{layer}.in_norm"])
                with module(f"{prefix}.self_attn", hf.LlamaAttention):
                    q = (h @ w[f"{layer}.q"].t()).view(seq, heads, dim).transpose(0, 1)
                    k = (h @ w[f"{layer}.k"].t()).view(seq, heads, dim).transpose(0, 1)
                    v = (h @ w[f"{layer}.v"].t()).view(seq, heads, dim).transpose(0, 1)
                    q, k = rope(q, cos, sin), rope(k, cos, sin)
                    k_cache = k_cache.index_copy(1, positions, k)
                    v_cache = v_cache.index_copy(1, positions, v)
                    new_caches += [k_cache, v_cache]
                    scores = torch.bmm(q, k_cache.transpose(1, 2)) / dim**0.5 + mask
                    attn = torch.bmm(torch.softmax(scores, dim=-1), v_cache)
                    attn = attn.transpose(0, 1).reshape(seq, CONFIG.hidden_size) @ w[f"{layer}.o"].t()
                x = x + attn
                with module(f"{prefix}.post_attention_layernorm", hf.LlamaRMSNorm):
                    h = rms_norm(x, w[f"{layer}.post_norm"])
                with module(f"{prefix}.mlp", hf.LlamaMLP):
                    gate = torch.nn.functional.silu(h @ w[f"{layer}.gate"].t())
                    down = (gate * (h @ w[f"{layer}.up"].t())) @ w[f"{layer}.down"].t()
                x = x + down
        with module("model.norm", hf.LlamaRMSNorm):
            normed = rms_norm(x, w["norm"])
        with module("lm_head", torch.nn.Linear):
            logits = normed @ w["lm_head"].t()
        return (logits, *new_caches)

    return run


def inputs(ids: list[int], start: int, caches: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    dim = CONFIG.hidden_size // CONFIG.num_attention_heads
    positions = torch.arange(start, start + len(ids))
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = positions[:, None].float() * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    seen = torch.arange(CACHE)[None, :] <= positions[:, None]
    mask = torch.where(seen, 0.0, -1e4).to(torch.bfloat16)
    return (torch.tensor(ids), positions, cos, sin, mask, *caches)


class Recorder(torch.fx.Interpreter):
    """Runs a graph, keeping each aten node's arguments and results; ``ge`` computes matmuls in
    float64 rounded once (a graph engine's kernels) and applies the fault."""

    def __init__(self, gm: torch.fx.GraphModule, ge: bool, fault: str | None) -> None:
        super().__init__(gm)
        self.ge, self.fault = ge, fault
        self.calls: list[tuple[torch.fx.Node, tuple, object]] = []

    def run_node(self, n: torch.fx.Node) -> object:
        self._node = n
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        if not isinstance(target, torch._ops.OpOverload):
            return super().call_function(target, args, kwargs)
        name = target.overloadpacket.__name__
        if self.ge and name in ("mm", "bmm"):
            result = target(*(a.double() for a in args)).to(args[0].dtype)
        else:
            result = super().call_function(target, args, kwargs)
        if self._node.name == self.fault:
            result = result.clone()
            result[..., :FAULT_COLUMNS] *= FAULT_SCALE
        self.calls.append((self._node, args, result))
        return result


def ge_names(gm: torch.fx.GraphModule) -> dict[str, tuple[str, str]]:
    """FX node -> (GE op name, GE type): named by type and count, as TorchAir's converters name them."""
    counts: dict[str, int] = {}
    names = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            names[node.name] = (node.name, "Data")
        elif node.op == "get_attr":  # a weight the graph holds
            names[node.name] = (node.name, "Const")
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            kind = node.target.overloadpacket.__name__
            ge_type = GE_TYPE.get(kind, "".join(p.title() for p in kind.split("_")))
            n = counts.get(ge_type, 0)
            counts[ge_type] = n + 1
            names[node.name] = (ge_type if n == 0 else f"{ge_type}_{n}", ge_type)
    return names


# numbers TorchAir makes Consts of take the dtype of the tensor they meet (dtype_promote); these are
# index lists, int64 whatever the tensor
_MATMUL_ATTRS = {"transpose_x1": False, "transpose_x2": False, "offset_x": 0}
_BATCH_MATMUL_ATTRS = {"adj_x1": False, "adj_x2": False, "offset_x": 0}


def converted(node: torch.fx.Node, args) -> tuple[list[tuple[object, torch.Tensor]], dict]:
    """What TorchAir's converter for ``node`` feeds its GE op: per input the FX node it comes from (None
    for a Const made of a number) and its value, and the op's attributes (torchair's
    ``ge_converter/aten/*.py``; index_copy, which TorchAir does not convert, as a Scatter along its dim)."""
    kind = node.target.overloadpacket.__name__
    fx = node.args

    def edge(i: int) -> tuple[object, torch.Tensor]:
        return fx[i], args[i]

    def const(value, dtype=torch.int64) -> tuple[object, torch.Tensor]:
        return None, torch.tensor(value, dtype=dtype)

    first = args[0] if isinstance(args[0], torch.Tensor) else None
    number = first.dtype if first is not None else torch.float32
    if kind == "mm":
        return [edge(0), edge(1)], dict(_MATMUL_ATTRS)
    if kind == "bmm":
        return [edge(0), edge(1)], dict(_BATCH_MATMUL_ATTRS)
    if kind in ("add", "mul", "div", "pow", "sub"):
        second = edge(1) if isinstance(args[1], torch.Tensor) else const(args[1], number)
        return [edge(0), second], {}
    if kind == "mean":
        return [edge(0), const(list(args[1]))], {"keep_dims": bool(args[2]) if len(args) > 2 else False}
    if kind == "silu":
        return [edge(0)], {"scale": 1.0}
    if kind == "_softmax":
        return [edge(0)], {"axes": [int(args[1])], "half_to_float": bool(args[2])}
    if kind == "embedding":
        return [edge(0), edge(1), const([0])], {"batch_dims": 0}
    if kind == "t":
        return [edge(0), const([1, 0])], {}
    if kind == "transpose":
        perm = list(range(args[0].dim()))
        a, b = (d % args[0].dim() for d in args[1:3])
        perm[a], perm[b] = perm[b], perm[a]
        return [edge(0), const(perm)], {}
    if kind == "permute":
        return [edge(0), const(list(args[1]))], {}
    if kind in ("view", "_unsafe_view", "expand"):
        return [edge(0), const(list(args[1]))], {}
    if kind == "slice":
        dim, start, end = args[1], args[2], min(args[3], args[0].shape[args[1]])
        step = args[4] if len(args) > 4 else 1
        return [edge(0), const([start]), const([end]), const([dim]), const([step])], {}
    if kind == "cat":
        parts = [(producer, value) for producer, value in zip(fx[0], args[0], strict=True)]
        return [*parts, const(args[1])], {"N": len(parts)}
    if kind == "index_copy":
        return [edge(0), edge(2), edge(3)], {"axis": int(args[1]), "reduce": "update"}
    if kind == "unsqueeze":
        return [edge(0)], {"axes": [int(args[1])]}
    return [edge(i) for i, a in enumerate(args) if isinstance(a, torch.Tensor)], {}


def attr_text(key: str, value) -> list[str]:
    """One attr as GE's OpDef prints it (a map entry; list values with their val_type)."""
    if isinstance(value, bool):
        body = f"b: {str(value).lower()}"
    elif isinstance(value, int):
        body = f"i: {value}"
    elif isinstance(value, float):
        body = f"f: {value!r}"
    elif isinstance(value, str):  # escaped as protobuf's text format writes bytes
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'")
        body = f's: "{escaped}"'
    else:
        body = "list { " + " ".join(f"i: {v}" for v in value) + " val_type: VT_LIST_INT }"
    return ["  attr {", f'    key: "{key}"', f"    value {{ {body} }}", "  }"]


def graph_text(graph_id: int, gm: torch.fx.GraphModule, names, example: dict) -> str:
    """The graph as TorchAir's graph dump writes it (protobuf text of GraphDef): numbers its
    converters take as inputs are Const ops of their own, before the op that takes them."""
    shapes = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    lines = [f'name: "graph_{graph_id}"']
    consts = 0
    for node in gm.graph.nodes:
        if node.name not in names:
            continue
        op_name, op_type = names[node.name]
        inputs, attrs = converted(node, example[node.name]) if node.op == "call_function" else ([], {})
        # TorchAir's attr_scope gives every op a converter makes the FX node's nn_module_stack
        stack = node.meta.get("nn_module_stack")
        scoped = attr_text("nn_module_stack", str(stack)) if stack else []
        edges = []
        for producer, value in inputs:
            if producer is None:
                const = "Const" if consts == 0 else f"Const_{consts}"
                consts += 1
                dims = " ".join(f"dim: {d}" for d in value.shape)
                lines += ["op {", f'  name: "{const}"', '  type: "Const"', "  output_desc {",
                          '    name: "y"', f"    dtype: {DT_NAME[DT[value.dtype]]}",
                          f"    shape {{ {dims} }}", '    layout: "ND"', "  }", *scoped, "}"]  # fmt: skip
                edges.append(f"{const}:0")
            else:
                source, index = (
                    (producer.args[0], producer.args[1])
                    if producer.target is operator.getitem
                    else (producer, 0)
                )
                edges.append(f"{names[source.name][0]}:{index}")
        lines += ["op {", f'  name: "{op_name}"', f'  type: "{op_type}"']
        lines += [f'  input: "{e}"' for e in edges]
        for key, value in attrs.items():
            lines += attr_text(key, value)
        lines += scoped
        values = shapes[node.name]
        if values is None and node.op == "get_attr":
            values = getattr(gm, node.target)
        outputs = values if isinstance(values, (list, tuple)) else [values]
        for i, value in enumerate(outputs):
            if not isinstance(value, torch.Tensor):
                continue
            dims = " ".join(f"dim: {d}" for d in value.shape)
            lines += [
                "  output_desc {",
                '    name: "y"',
                f"    dtype: {DT_NAME[DT[value.dtype]]}",
                f"    shape {{ {dims} }}",
                '    layout: "ND"',
            ]
            if node.op == "call_function":
                fx = f"{node.name}-{node.target}.OUTPUT.{i}"
                lines += [
                    "    attr {",
                    '      key: "_fx_tensor_name"',
                    f'      value {{ s: "{fx}" }}',
                    "    }",
                ]
            lines.append("  }")
        lines.append("}")
    return "\n".join(lines) + "\n"


def as_saved(value: object) -> np.ndarray:
    """What _NpuFxDumper saves: bf16 as float32, other arguments as np.array(x)."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    return np.array(value)


def write_fx(folder: Path, calls, time: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for node, args, result in calls:
        stamp = f"{time:020d}"
        time += 1
        prefix = f"{node.name}-{node.target}"
        for i, arg in enumerate(args):
            if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
                for j, tensor in enumerate(arg):
                    np.save(folder / f"{prefix}.INPUT.{i}.{j}.{stamp}.npy", as_saved(tensor))
                continue
            np.save(folder / f"{prefix}.INPUT.{i}.{stamp}.npy", as_saved(arg))
        for k, tensor in enumerate(result if isinstance(result, (list, tuple)) else [result]):
            np.save(folder / f"{prefix}.OUTPUT.{k}.{stamp}.npy", as_saved(tensor))
    return time


def ge_tensor(pb, kind, value: torch.Tensor, nz: bool = False):
    item = kind()
    array = value.detach().contiguous()
    raw = array.view(torch.int16).numpy() if array.dtype == torch.bfloat16 else array.numpy()
    item.data_type = DT[array.dtype]
    if nz:
        tiles = nz_tiles(raw.reshape(raw.shape[-2], raw.shape[-1]))
        item.format = FRACTAL_NZ
        item.shape.dim.extend(tiles.shape)
        item.original_shape.dim.extend(raw.shape)
        raw = tiles
    else:
        item.format = ND
        item.shape.dim.extend(raw.shape)
    item.size = raw.nbytes
    return item, raw.tobytes()


def write_ge_file(pb, path: Path, op_name: str, tensor_inputs, outputs, nz_input: int | None = None) -> None:
    dump = pb.DumpData(version="2.0", dump_time=1, op_name=op_name)
    payload = b""
    for i, value in enumerate(tensor_inputs):
        item, raw = ge_tensor(pb, pb.OpInput, value, nz=i == nz_input)
        dump.input.append(item)
        payload += raw
    for value in outputs:
        item, raw = ge_tensor(pb, pb.OpOutput, value)
        dump.output.append(item)
        payload += raw
    header = dump.SerializeToString()
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)


def write_ge(pb, folder: Path, calls, names, fused: tuple[str, str] | None, lm_head: str, time: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    task = 1
    pending: tuple[list, object] | None = None
    for node, args, result in calls:
        op_name, op_type = names[node.name]
        stamp = f"{time:016d}"
        time += 1
        task += 1
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        tensors = [value for _, value in converted(node, args)[0]]
        if fused is not None and node.name == fused[0]:  # the fused op's inputs are its first constituent's
            pending = (tensors, op_name)
            continue
        if fused is not None and node.name == fused[1] and pending is not None:
            first_inputs, first_name = pending
            other = [t for t in tensors if not any(t is s for s in first_inputs)]
            name = f"AutomaticBufferFusionOp.{first_name}{op_name}.{task}.6.{stamp}"
            write_ge_file(pb, folder / name, first_name + op_name, first_inputs + other[1:], outputs)
            continue
        nz = 1 if node.name == lm_head else None
        write_ge_file(pb, folder / f"{op_type}.{op_name}.{task}.6.{stamp}", op_name, tensors, outputs, nz)
        if node.name == lm_head:  # the Cast GE inserted after the logits
            stamp = f"{time:016d}"
            time += 1
            cast = outputs[0].float()
            write_ge_file(
                pb, folder / f"Cast.trans_Cast_0.{task + 1}.6.{stamp}", "trans_Cast_0", outputs, [cast]
            )
    return time


def main() -> int:
    pb = compiled()
    OUT.mkdir(parents=True)
    w = weights()
    run = forward(w)
    heads, dim = CONFIG.num_attention_heads, CONFIG.hidden_size // CONFIG.num_attention_heads
    empty = [
        torch.zeros(heads, CACHE, dim, dtype=torch.bfloat16) for _ in range(2 * CONFIG.num_hidden_layers)
    ]
    prompt = [3, 17, 42, 9]
    with fx_traceback.preserve_node_meta():  # each node keeps the module it was traced in
        graphs = {
            1: make_fx(run)(*inputs(prompt, 0, empty)),
            2: make_fx(run)(*inputs([0], PROMPT, empty)),
        }
    names = {graph_id: ge_names(gm) for graph_id, gm in graphs.items()}
    mm_nodes = {
        gid: [
            n.name
            for n in gm.graph.nodes
            if n.op == "call_function" and n.target == torch.ops.aten.mm.default
        ]
        for gid, gm in graphs.items()
    }
    silu = {
        gid: next(n for n in gm.graph.nodes if n.target == torch.ops.aten.silu.default)
        for gid, gm in graphs.items()
    }
    fused = {gid: (node.name, next(iter(node.users)).name) for gid, node in silu.items()}
    # mm order per layer: q, k, v, o, gate, up, down; then the lm_head
    per_layer = 7
    down_1 = {gid: found[per_layer + 6] for gid, found in mm_nodes.items()}
    lm_head = {gid: found[-1] for gid, found in mm_nodes.items()}
    fx_root = OUT / "fx" / "msprobe_fx_dump" / "worldsize1_global_rank0"
    ge_kinds = ("ge-clean", "ge-fault", "ge-nofusion")
    ge_roots = {kind: OUT / kind / "msprobe_ge_dump" for kind in ge_kinds}
    examples: dict[int, dict[str, tuple]] = {}  # each graph's first run: its nodes' arguments
    # the runs: prefill, then decode twice, the caches carried from run to run
    fx_time, ge_time = 20261129000000000000, 1764374400000000
    caches = dict.fromkeys(("fx", *ge_kinds), empty)
    tokens = dict.fromkeys(("fx", *ge_kinds), prompt)
    steps = {1: 0, 2: 0}
    for token in range(1 + DECODE_STEPS):
        graph_id = 1 if token == 0 else 2
        step = steps[graph_id]
        steps[graph_id] += 1
        start = 0 if token == 0 else PROMPT + token - 1
        ids = list(prompt) if token == 0 else [tokens["fx"][-1]]
        for kind in ("fx", *ge_kinds):
            fault = down_1[graph_id] if kind == "ge-fault" and token == FAULT_TOKEN else None
            recorder = Recorder(graphs[graph_id], ge=kind != "fx", fault=fault)
            logits, *caches[kind] = recorder.run(*inputs(ids, start, caches[kind]))
            # every side decodes the golden's tokens (teacher forcing), so the runs stay comparable
            examples.setdefault(graph_id, {node.name: args for node, args, _ in recorder.calls})
            if kind == "fx":
                fx_time = write_fx(fx_root / f"graph_{graph_id}" / str(step), recorder.calls, fx_time)
                next_token = int(logits[-1].float().argmax())
                for k in tokens:
                    tokens[k] = tokens[k] + [next_token]
            else:
                folder = (
                    ge_roots[kind]
                    / "worldsize1_global_rank0"
                    / "20261129000000"
                    / "0"
                    / f"graph_{graph_id}"
                    / "1"
                    / str(step)
                )
                fusion = fused[graph_id] if kind != "ge-nofusion" else None
                ge_time = write_ge(
                    pb, folder, recorder.calls, names[graph_id], fusion, lm_head[graph_id], ge_time
                )
    for root in ge_roots.values():
        for graph_id, gm in graphs.items():
            text = graph_text(graph_id, gm, names[graph_id], examples[graph_id])
            (root / f"dynamo_original_graph_{graph_id}_rank_0_pid_1_ts_20261129000000000000.txt").write_text(
                text
            )
    case = {
        "token": FAULT_TOKEN,
        "graph": "graph_2",
        "step": FAULT_TOKEN - 1,
        "fx_node": f"graph_2/{down_1[2]}-aten.mm.default",
        "ge_op": f"graph_2/{names[2][down_1[2]][0]}",
        "fused": f"graph_2/{names[2][fused[2][0]][0]}{names[2][fused[2][1]][0]}",
        "nz_weight_of": f"graph_2/{names[2][lm_head[2]][0]}",
        "inserted_cast": "trans_Cast_0",
        "unfused": [f"graph_2/{names[2][n][0]}" for n in fused[2]],
    }
    (OUT / "case.json").write_text(json.dumps(case, indent=1) + "\n", encoding="utf-8")
    files = sum(1 for p in OUT.rglob("*") if p.is_file())
    with tarfile.open(ARCHIVE, "w:xz") as archive:
        for path in sorted(OUT.rglob("*")):  # sorted, owner and times fixed: the same bytes each run
            info = archive.gettarinfo(str(path), str(path.relative_to(OUT.parent)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 1764374400
            if path.is_file():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    print(f"{ARCHIVE.relative_to(REPO)}: {files} files, {ARCHIVE.stat().st_size} bytes; {case}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
