"""An msit ATB dump of ``make_npu_fixtures.py``'s W8A8 Llama port: ``tests/data/npu/w8a8-llama-atb.tar.xz``.

The same weights, prompt and faults as the msprobe port (its golden, the float32 transformers run
in ``w8a8-llama-msprobe-mix``, is the golden here too), served the way an ATB model (MindIE's
ATB-Models) runs it: one graph per layer holding ATB operations, in bf16, every linear but the
LM head W8A8 dynamic (``ElewiseOperation`` ELEWISE_DYNAMIC_QUANT, then a quantised
``LinearOperation`` with ``quantMode`` PER_TOKEN), ``RmsNormOperation``, ``RopeOperation``
(``rotaryCoeff`` 2), ``ReshapeAndCacheOperation`` into a paged cache (block size 128, the request in
block 2 of 3), ``SelfAttentionOperation`` (PA_ENCODER, a causal mask) at the prefill and
``PagedAttentionOperation`` at each decode step, ``ActivationOperation`` swish, ``ElewiseOperation``
add and mul.

No NPU runs here and no ATB dump can be made without one: each operation is written below in
torch from ATB's ``include/atb/infer_op_params.h`` and its operation docs (the intensors' order,
the parameters and their defaults), and its intensors, outtensors and ``op_param.json`` are written
in the layout msit's ATB probe writes (``msit_dump_{time}/tensors/{device}_{pid}/{token}/{i}_{type}/``,
``before/intensor{k}.bin``, ``after/outtensor{k}.bin``; the model and layer topologies), with the
``.bin`` header of Mki's ``BinFile`` as docs/formats.md §2.3 gives it. Nothing here is tui-acc's
code: a misreading of ATB's docs would have to be made twice, in two forms, to pass unnoticed.

Every leaf operation keeps all its intensors (``msit llm dump -stp 2``); a graph operation keeps
its first intensor (the activation) and its outtensors, which is what the pairing reads of it.

Cases (one archive, a test dump per case; the golden is the msprobe archive's):

- ``clean``: the port as it should be;
- ``attention``: layer 0's PagedAttentionOperation output 3 % off at token 2 (a decode step);
- ``dequant``: layer 1's o_proj LinearOperation dequantises with its scale 2 % off, at every token;
- ``rope``: layer 1's RopeOperation turns the query the other way (the sine's sign), at every token;
- ``kvslot``: layer 1's ReshapeAndCacheOperation writes token 2's key and value one slot too far.

Run it in the tools' venv (docs/formats.md §0; torch and transformers)::

    ~/tools-venv/bin/python scripts/make_atb_npu_fixtures.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_model_fixtures import PROMPT, _pack  # noqa: E402
from make_npu_fixtures import BLOCK, BLOCKS, NEW_TOKENS, REQUEST_BLOCK, build_golden  # noqa: E402

OUT = REPO / "tests" / "data" / "npu"
NAME = "w8a8-llama-atb"
PID, TIMESTAMP = 4242, "20260101_000000"
CASES = ("clean", "attention", "dequant", "rope", "kvslot")
FAULTS = {
    "attention": "layer 0's PagedAttentionOperation output 3 % off at token 2 (a decode step)",
    "dequant": "layer 1's o_proj LinearOperation dequantised with its scale 2 % off, at every token",
    "rope": "layer 1's RopeOperation turns the query the other way (the sine's sign), at every token",
    "kvslot": "layer 1's ReshapeAndCacheOperation writes token 2's key and value one slot too far",
}

# infer_op_params.h's enumerations, as the probe writes them (numbers)
ELEWISE_ADD, ELEWISE_MUL, ELEWISE_DYNAMIC_QUANT = 8, 9, 19
ACTIVATION_SWISH = 4
PA_ENCODER, MASK_TYPE_NORM = 3, 1
QUANT_PER_TOKEN = 2
ACL_BF16 = 27
RMS_NORM_NORM = 1

# aclDataType codes of the .bin header (docs/formats.md §2.3)
DTYPE_CODES = {"float32": 0, "float16": 1, "int8": 2, "int32": 3, "int64": 9, "bool": 12, "bfloat16": 27}
ND_FORMAT, NZ_FORMAT = 2, 29
NZ_WEIGHTS: list[Any] = []  # the tensors written in FRACTAL_NZ

STATE: dict[str, Any] = {"case": "clean", "token": -1, "layer": -1}


def _faulty(kind: str, layer: int, token: int | None = None) -> bool:
    return STATE["case"] == kind and STATE["layer"] == layer and (token is None or STATE["token"] == token)


# --- the .bin file, as Mki's BinFile writes it -------------------------------------------------------


def fractal_nz(matrix: Any) -> Any:
    """An int8 ``[H, W]`` matrix as the NPU stores a weight in FRACTAL_NZ, the four-dim
    ``[1, W/32, H', 32]`` ATB's transdata kernel makes of it (``transdata_operation.cpp``: H padded
    to 16, W to the 32-wide int8 tile; ``[N, H', W'/32, 32] -> [N, W'/32, H', 32]``)."""
    import torch

    rows, cols = matrix.shape
    padded = torch.nn.functional.pad(matrix, (0, -cols % 32, 0, -rows % 16))
    return padded.reshape(1, padded.shape[0], padded.shape[1] // 32, 32).permute(0, 2, 1, 3)


def write_bin(path: Path, tensor: Any) -> None:
    """Header lines, ``$End=1``, then the tensor's raw little-endian bytes (bf16 as its 16-bit words);
    a quantised linear's int8 weight in FRACTAL_NZ, as ATB-Models load them."""
    import torch

    layout = NZ_FORMAT if any(tensor is weight for weight in NZ_WEIGHTS) else ND_FORMAT
    if layout == NZ_FORMAT:
        tensor = fractal_nz(tensor)
    tensor = tensor.detach().contiguous().cpu()
    dtype = str(tensor.dtype).removeprefix("torch.")
    raw = (tensor.view(torch.int16) if dtype == "bfloat16" else tensor).numpy().tobytes()
    header = [
        "$Version=1.0",
        "$Object.Count=1",
        f"$Object.Length={len(raw)}",
        f"format={layout}",
        f"dtype={DTYPE_CODES[dtype]}",
        "dims=" + ",".join(str(d) for d in tensor.shape),
        f"$Object.data=0,{len(raw)}",
        "$End=1",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(header) + "\n").encode() + raw)


# --- the recorder: operations as they run, graphs around them ----------------------------------------


@dataclass
class Node:
    """One operation as it ran: its type, op_param.json, intensors and outtensors; a graph's
    inputs are what its insides read from outside it, its outputs its last operation's."""

    op_type: str
    param: dict[str, Any]
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    made: set[int] = field(default_factory=set)  # ids of the tensors made inside (a graph)


class Recorder:
    """Collects one token's operations, graphs around them."""

    def __init__(self) -> None:
        self.top: list[Node] = []
        self._open: list[Node] = []

    def reset(self) -> None:
        self.top, self._open = [], []

    @contextlib.contextmanager
    def graph(self, op_type: str) -> Iterator[Node]:
        node = Node(op_type, {})
        (self._open[-1].children if self._open else self.top).append(node)
        self._open.append(node)
        try:
            yield node
        finally:
            self._open.pop()

    def op(self, op_type: str, param: dict[str, Any], inputs: list[Any], outputs: list[Any]) -> None:
        node = Node(op_type, param, list(inputs), list(outputs))
        (self._open[-1].children if self._open else self.top).append(node)
        for graph in self._open:
            for tensor in inputs:
                if id(tensor) not in graph.made and not any(t is tensor for t in graph.inputs):
                    graph.inputs.append(tensor)
            graph.made |= {id(t) for t in outputs}
            graph.outputs = list(outputs)


REC = Recorder()


# --- ATB's operations, in torch, from infer_op_params.h and the operation docs ----------------------


def gather(table: Any, indices: Any) -> Any:
    """GatherOperation (axis 0): ``table[indices]``."""
    out = table[indices.long()]
    REC.op("GatherOperation", {"axis": 0, "batchDims": 0}, [table, indices], [out])
    return out


def rms_norm(x: Any, gamma: Any, eps: float) -> Any:
    """RmsNormOperation (layerType NORM): ``x / sqrt(mean(x^2) + epsilon) * gamma`` in float32."""
    import torch

    wide = x.float()
    out = (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()).to(x.dtype)
    param = {"layerType": RMS_NORM_NORM, "normParam": {"quantType": 0, "epsilon": eps}}
    REC.op("RmsNormOperation", param, [x, gamma], [out])
    return out


def dynamic_quant(x: Any) -> tuple[Any, Any]:
    """ElewiseOperation ELEWISE_DYNAMIC_QUANT, symmetric: per row ``scale = max|x| / 127``,
    ``y = round(x / scale)`` in int8; outtensors y and scale."""
    import torch

    wide = x.float()
    scale = wide.abs().amax(dim=-1) / 127.0
    y = torch.round(wide / scale.unsqueeze(-1)).clamp(-128, 127).to(torch.int8)
    param = {"elewiseType": ELEWISE_DYNAMIC_QUANT, "quantParam": {"inputScale": 1.0, "asymmetric": False}}
    REC.op("ElewiseOperation", param, [x], [y, scale])
    return y, scale


def quant_linear(x: Any, weight: Any, scale: Any, per_token: Any, faulty: bool = False) -> Any:
    """LinearOperation, quantised (outDataType bf16, quantMode PER_TOKEN, no bias): intensors x int8,
    weight int8 ``[n, k]`` (transposeB), the dequant scale ``[n]``, the per-token scale;
    ``(x @ weight^T) * scale * per_token``, the int8 products summed exactly."""
    import torch

    total = (x.to(torch.int64) @ weight.to(torch.int64).t()).to(torch.float32)
    used = scale * 1.02 if faulty else scale
    out = (total * used.float() * per_token.float().unsqueeze(-1)).to(torch.bfloat16)
    param = {
        "transposeA": False,
        "transposeB": True,
        "hasBias": False,
        "outDataType": ACL_BF16,
        "enAccum": False,
        "matmulType": 0,
        "quantMode": QUANT_PER_TOKEN,
    }
    REC.op("LinearOperation", param, [x, weight, scale, per_token], [out])
    return out


def float_linear(x: Any, weight: Any) -> Any:
    """LinearOperation, float (transposeB, no bias): ``x @ weight^T``, float32 sums."""
    out = (x.float() @ weight.float().t()).to(x.dtype)
    param = {"transposeA": False, "transposeB": True, "hasBias": False, "outDataType": -1, "quantMode": 0}
    REC.op("LinearOperation", param, [x, weight], [out])
    return out


def rope(q: Any, k: Any, cos: Any, sin: Any, seqlen: Any, flip_query: bool) -> tuple[Any, Any]:
    """RopeOperation, rotaryCoeff 2: q ``[tokens, N*D]``, k ``[tokens, N_kv*D]``, cos and sin
    ``[tokens, D]``; each head ``x * cos + cat(-x2, x1) * sin`` (x1, x2 its halves), float32."""
    import torch

    def rotate(x: Any, sign: float) -> Any:
        heads = x.float().view(x.shape[0], -1, cos.shape[-1])
        first, second = heads.chunk(2, dim=-1)
        turned = torch.cat((-second, first), dim=-1)
        out = heads * cos.float().unsqueeze(1) + sign * turned * sin.float().unsqueeze(1)
        return out.reshape(x.shape).to(x.dtype)

    q_out, k_out = rotate(q, -1.0 if flip_query else 1.0), rotate(k, 1.0)
    REC.op("RopeOperation", {"rotaryCoeff": 2, "cosFormat": 0}, [q, k, cos, sin, seqlen], [q_out, k_out])
    return q_out, k_out


def reshape_and_cache(
    key: Any, value: Any, key_cache: Any, value_cache: Any, slots: Any, shift: int
) -> tuple[Any, Any]:
    """ReshapeAndCacheOperation (ND caches ``[blocks, block_size, N_kv, D]``): token i's key and value
    at ``cache[slot // block_size, slot % block_size]``; its outtensors are the caches after (returned)."""
    before = [t.clone() for t in (key_cache, value_cache)]
    block = key_cache.shape[1]
    for i, slot in enumerate((slots + shift).tolist()):
        key_cache[slot // block, slot % block] = key[i]
        value_cache[slot // block, slot % block] = value[i]
    param = {"compressType": 0, "kvCacheCfg": 0}
    after = (key_cache.clone(), value_cache.clone())
    REC.op("ReshapeAndCacheOperation", param, [key, value, *before, slots], list(after))
    return after


def _attend(q: Any, k: Any, v: Any, allowed: Any, scale: float) -> Any:
    """q ``[q_len, N, D]``, k/v ``[kv_len, N_kv, D]``: softmax(scale q k^T) v per head, float32 scores,
    the probabilities rounded to bf16 before the second matmul; GQA: head h reads kv head h // group."""
    import torch

    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    scores = scores.masked_fill(~allowed.unsqueeze(0), float("-inf"))
    probabilities = torch.softmax(scores, dim=-1).to(torch.bfloat16).float()
    return torch.einsum("hqk,khd->qhd", probabilities, v)


def self_attention(q: Any, k: Any, v: Any, mask: Any, seq_len: Any, heads: int, kv_heads: int) -> Any:
    """SelfAttentionOperation, calcType PA_ENCODER, maskType NORM: intensors q, k, v ``[tokens, N*D]``,
    the mask (a score is left out where it is not 0), seqLen; each request's tokens attend to its own."""
    dim = q.shape[-1] // heads
    tokens = q.shape[0]
    allowed = mask[:tokens, :tokens] == 0
    out = (
        _attend(
            q.view(tokens, heads, dim),
            k.view(tokens, kv_heads, dim),
            v.view(tokens, kv_heads, dim),
            allowed,
            1.0 / math.sqrt(dim),
        )
        .reshape(tokens, heads * dim)
        .to(q.dtype)
    )
    param = {
        "headNum": heads,
        "kvHeadNum": kv_heads,
        "qScale": 1.0,
        "qkScale": 1.0 / math.sqrt(dim),
        "calcType": PA_ENCODER,
        "maskType": MASK_TYPE_NORM,
        "kernelType": 0,
        "clampType": 0,
        "quantType": 0,
        "isTriuMask": 1,
    }
    REC.op("SelfAttentionOperation", param, [q, k, v, mask, seq_len], [out])
    return out


def paged_attention(
    q: Any, key_cache: Any, value_cache: Any, tables: Any, context: Any, heads: int, kv_heads: int, off: float
) -> Any:
    """PagedAttentionOperation: query ``[tokens, N, D]``, the caches, blockTables, contextLens; token i
    attends to the first ``contextLens[i]`` cached tokens its table row names."""
    import torch

    dim = q.shape[-1]
    block = key_cache.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float32)
    for i, length in enumerate(context.tolist()):
        blocks = tables[i, : math.ceil(length / block)].long()
        k = key_cache[blocks].reshape(-1, kv_heads, dim)[:length]
        v = value_cache[blocks].reshape(-1, kv_heads, dim)[:length]
        allowed = torch.ones(1, length, dtype=torch.bool)
        out[i : i + 1] = _attend(q[i : i + 1], k, v, allowed, 1.0 / math.sqrt(dim))
    out = (out * off).to(q.dtype)
    param = {"headNum": heads, "qkScale": 1.0 / math.sqrt(dim), "kvHeadNum": kv_heads, "maskType": 0}
    REC.op("PagedAttentionOperation", param, [q, key_cache, value_cache, tables, context], [out])
    return out


def swish(x: Any) -> Any:
    """ActivationOperation swish: ``x * sigmoid(x)`` in float32."""
    import torch

    out = (x.float() * torch.sigmoid(x.float())).to(x.dtype)
    REC.op("ActivationOperation", {"activationType": ACTIVATION_SWISH, "scale": 1.0, "dim": -1}, [x], [out])
    return out


def elewise(kind: int, a: Any, b: Any) -> Any:
    """ElewiseOperation add (8) or mul (9), in float32, rounded to the inputs' dtype."""
    out = (a.float() + b.float() if kind == ELEWISE_ADD else a.float() * b.float()).to(a.dtype)
    REC.op("ElewiseOperation", {"elewiseType": kind}, [a, b], [out])
    return out


# --- the port: ATB-Models' graph of a Llama, these operations inside ----------------------------------


class Port:
    """The golden's weights, W8A8 dynamic (per output channel int8 weights, per token activations),
    bf16; the LM head and the norms in bf16. One paged KV cache per layer."""

    def __init__(self, golden: Any) -> None:
        import torch

        bf16 = torch.bfloat16
        config = golden.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.dim = config.hidden_size // self.heads
        self.eps = float(config.rms_norm_eps)
        exponents = torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim
        self.inv_freq = 1.0 / (config.rope_parameters["rope_theta"] ** exponents)
        model = golden.model
        self.embedding = model.embed_tokens.weight.detach().to(bf16)
        self.final_norm = model.norm.weight.detach().to(bf16)
        self.lm_head = golden.lm_head.weight.detach().to(bf16)
        self.layers = []
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                {
                    "input_norm": layer.input_layernorm.weight.detach().to(bf16),
                    "post_norm": layer.post_attention_layernorm.weight.detach().to(bf16),
                    **{name: _quantised(getattr(attn, f"{name}_proj")) for name in "qkvo"},
                    **{name: _quantised(getattr(mlp, f"{name}_proj")) for name in ("gate", "up", "down")},
                    "key_cache": torch.zeros(BLOCKS, BLOCK, self.kv_heads, self.dim, dtype=bf16),
                    "value_cache": torch.zeros(BLOCKS, BLOCK, self.kv_heads, self.dim, dtype=bf16),
                }
            )

    def forward(self, ids: Any, positions: Any) -> Any:
        """One model execution (a token): ids and positions ``[tokens]``; the last token's logits."""
        import torch

        STATE["token"] += 1
        tokens = ids.shape[0]
        angles = positions.float().unsqueeze(-1) * self.inv_freq
        both = torch.cat((angles, angles), dim=-1)
        cos, sin = both.cos().to(torch.bfloat16), both.sin().to(torch.bfloat16)
        slots = (REQUEST_BLOCK * BLOCK + positions).to(torch.int32)
        seq_len = torch.tensor([tokens], dtype=torch.int32)
        with REC.graph("WordEmbedding") as embedding:
            embedding.inputs.append(ids)  # the graph reads the ids first, then its table
            x = gather(self.embedding, ids)
        for index, weights in enumerate(self.layers):
            STATE["layer"] = index
            with REC.graph("DecoderLayer") as layer:
                layer.inputs.append(x)
                x = self._layer(x, weights, cos, sin, slots, seq_len, positions)
        x = rms_norm(x, self.final_norm, self.eps)
        with REC.graph("LmHead") as head:
            last = x[-1:].clone()
            head.inputs.append(last)
            return float_linear(last, self.lm_head)

    def _layer(
        self, x: Any, w: dict[str, Any], cos: Any, sin: Any, slots: Any, seq_len: Any, positions: Any
    ) -> Any:
        import torch

        normed = rms_norm(x, w["input_norm"], self.eps)
        with REC.graph("Attention"):
            quantised, per_token = dynamic_quant(normed)
            q, k, v = (quant_linear(quantised, *w[name], per_token) for name in "qkv")
            q, k = rope(q, k, cos, sin, seq_len, flip_query=_faulty("rope", 1))
            tokens = x.shape[0]
            shift = 1 if _faulty("kvslot", 1, token=2) else 0
            key_cache, value_cache = reshape_and_cache(
                k.view(tokens, self.kv_heads, self.dim),
                v.view(tokens, self.kv_heads, self.dim),
                w["key_cache"],
                w["value_cache"],
                slots,
                shift,
            )
            if STATE["token"] == 0:
                mask = torch.triu(torch.ones(tokens, tokens), diagonal=1).to(torch.bfloat16)
                attended = self_attention(q, k, v, mask, seq_len, self.heads, self.kv_heads)
            else:
                off = 1.03 if _faulty("attention", 0, token=2) else 1.0
                tables = torch.tensor([[REQUEST_BLOCK]], dtype=torch.int32)
                context = (positions[-1:] + 1).to(torch.int32)
                attended = paged_attention(
                    q.view(tokens, self.heads, self.dim),
                    key_cache,
                    value_cache,
                    tables,
                    context,
                    self.heads,
                    self.kv_heads,
                    off,
                ).view(tokens, -1)
            quantised, per_token = dynamic_quant(attended)
            out = quant_linear(quantised, *w["o"], per_token, faulty=_faulty("dequant", 1))
        x = elewise(ELEWISE_ADD, x, out)
        normed = rms_norm(x, w["post_norm"], self.eps)
        with REC.graph("Mlp"):
            quantised, per_token = dynamic_quant(normed)
            gate = quant_linear(quantised, *w["gate"], per_token)
            up = quant_linear(quantised, *w["up"], per_token)
            both = elewise(ELEWISE_MUL, swish(gate), up)
            quantised, per_token = dynamic_quant(both)
            out = quant_linear(quantised, *w["down"], per_token)
        return elewise(ELEWISE_ADD, x, out)


def _quantised(linear: Any) -> tuple[Any, Any]:
    """vllm-ascend's / MindIE's W8A8 dynamic weight: per output channel ``scale = max|w| / 127``, the
    weight rounded to int8 ``[n, k]``."""
    import torch

    weight = linear.weight.detach().float()
    scale = weight.abs().amax(dim=1) / 127.0
    quantised = torch.round(weight / scale.unsqueeze(1)).clamp(-127, 127).to(torch.int8)
    NZ_WEIGHTS.append(quantised)
    return quantised, scale


# --- the dump: msit's ATB probe layout ------------------------------------------------------------------


class Names:
    """Tensor names for the topology's edges: the model's inputs, its weights, what its operations make."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.kept: list[Any] = []  # the tensors named, alive, so their ids are not reused
        self.counts = {"input": 0, "weight": 0, "internal": 0}

    def of(self, tensor: Any, kind: str = "input") -> str:
        if id(tensor) not in self.names:
            self.names[id(tensor)] = f"LlamaModel_{kind}_{self.counts[kind]}"
            self.counts[kind] += 1
            self.kept.append(tensor)
        return self.names[id(tensor)]


def _topology(node: Node, op_name: str, names: Names) -> dict[str, Any]:
    for child in _leaves(node):
        for tensor in child.outputs:
            names.of(tensor, "internal")
    for tensor in node.inputs:
        names.of(tensor, "weight" if not tensor.is_floating_point() or tensor.ndim == 1 else "input")
    entry: dict[str, Any] = {
        "opName": op_name,
        "opType": node.op_type,
        "param": node.param,
        "inTensors": [names.of(t) for t in node.inputs],
        "outTensors": [names.of(t, "internal") for t in node.outputs],
    }
    if node.children:
        suffix = op_name.rsplit("_", 1)[-1]
        entry["nodes"] = [
            _topology(c, f"{c.op_type}_{suffix}_{j}", names) for j, c in enumerate(node.children)
        ]
    return entry


def _leaves(node: Node) -> Iterator[Node]:
    if not node.children:
        yield node
    for child in node.children:
        yield from _leaves(child)


def _write_node(folder: Path, node: Node) -> None:
    inputs = node.inputs[:1] if node.children else node.inputs
    for k, tensor in enumerate(inputs):
        write_bin(folder / "before" / f"intensor{k}.bin", tensor)
    for k, tensor in enumerate(node.outputs):
        write_bin(folder / "after" / f"outtensor{k}.bin", tensor)
    (folder / "op_param.json").write_text(json.dumps(node.param), encoding="utf-8")
    for index, child in enumerate(node.children):
        _write_node(folder / f"{index}_{child.op_type}", child)


def dump_case(case: str, out: Path, golden: Any) -> list[int]:
    """Run the port on the prompt and ``NEW_TOKENS - 1`` decode steps; write each token's operations."""
    import torch

    STATE.update(case=case, token=-1, layer=-1)
    port = Port(golden)
    root = out / f"msit_dump_{TIMESTAMP}"
    tensors = root / "tensors" / f"0_{PID}"
    ids = torch.tensor(PROMPT, dtype=torch.int64)
    positions = torch.arange(len(PROMPT))
    generated: list[int] = []
    for token in range(NEW_TOKENS):
        REC.reset()
        with torch.no_grad():
            logits = port.forward(ids, positions)
        for index, node in enumerate(REC.top):
            _write_node(tensors / str(token) / f"{index}_{node.op_type}", node)
        if token == 0:
            names = Names()
            body = {
                "modelName": "LlamaModel",
                "nodes": [_topology(n, f"{n.op_type}_{i}", names) for i, n in enumerate(REC.top)],
            }
            model = root / "model" / str(PID) / "LlamaModel.json"
            model.parent.mkdir(parents=True, exist_ok=True)
            model.write_text(json.dumps(body), encoding="utf-8")
            layer = next(n for n in body["nodes"] if n["opType"] == "DecoderLayer")
            path = root / "layer" / str(PID) / "DecoderLayer_1.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**layer, "opName": "DecoderLayer_1"}), encoding="utf-8")
        ids = logits.float().argmax(-1)
        positions = positions[-1:] + 1
        generated.append(int(ids[0]))
    return generated


def make_archive(work: Path) -> Path:
    import torch

    case_dir = work / NAME
    golden = build_golden()
    generated = {case: dump_case(case, case_dir / case, golden) for case in CASES}
    description = {
        "case": NAME,
        "golden": "w8a8-llama-msprobe-mix's golden: transformers LlamaForCausalLM, float32, eager attention",
        "test": "the same weights, W8A8 dynamic linears (LM head bf16), bf16, ATB operations written from "
        "ATB's infer_op_params.h and operation docs, in msit's ATB dump layout",
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "faults": FAULTS,
        "generated": generated,
        "tools": {"torch": torch.__version__},
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = OUT / f"{NAME}.tar.xz"
    _pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-atb-") as work:
        archive = make_archive(Path(work))
        print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
