"""SGLang dumper fixtures: ``tests/data/sglang/sglang-llama.tar.xz``.

SGLang cannot run here (it needs a GPU or an NPU), so this runs a random-weight Llama built from a
transformers config (seeded, float32) under a dumper that writes files exactly as SGLang's
``sglang.srt.debug_utils.dumper`` (sglang 0.5.23) names and fills them, with its automatic hooks
in ``DUMPER_NON_INTRUSIVE_MODE=all`` and two explicit ``dumper.dump(..., dims=...)`` calls in the
MLP, as a developer adds them to the model's code. Every naming rule below cites the line of
python/sglang/srt/debug_utils/dumper.py (sglang 0.5.23) it follows.

Three runs of the same prompt, greedy:

* ``golden/``: one device, float32.
* ``test/``: one device, one fault (``model.layers.1.mlp.down_proj`` doubles its last TILE output
  columns at step FAULT_STEP of the golden's numbering), and a warm-up request first, as a server
  runs one: every step is numbered one later than the golden's (aligned by ``input_ids``).
* ``test_tp2/``: the faulty run as tensor parallelism over two ranks lays it out: each rank's file
  holds what that rank's SGLang layer holds. Column-parallel outputs (q/k/v, gate/up projections,
  the activation and attention heads) are the rank's slice of the last (heads) dimension, the
  row-parallel projections' inputs too; their outputs are all-reduced, so whole on both ranks.
  The explicit dumps carry the dims annotation: ``mlp_act`` (``b s i[tp]``: each rank its slice)
  and ``mlp_down`` (``b s h[tp:partial]``: each rank's partial product ``act_r @ W_down[:, r].T``,
  computed, before the all-reduce; with the fault, as it is in the kernel).

Run it with any Python that has torch and transformers (no project dependency), from the
repository: ``python scripts/make_sglang_fixtures.py``. ``case.json`` says where the fault is.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "sglang" / "sglang-llama.tar.xz"
SEED = 1234
PROMPT = [1, 37, 20, 8, 4]
WARMUP = [5, 6]  # the test server's warm-up request
STEPS = 3  # prefill, then two decode steps
FAULT_MODULE = "model.layers.1.mlp.down_proj"
FAULT_STEP = 2  # golden numbering
TILE = 4
TP = 2
# dumper.py:1160-1172 (_get_default_exp_name): "dump_" + UTC time + "_" + ms + 3 random digits
EXP_NAME = "dump_20261123_120000_123456"
# the layer modules whose forward sets layer_id (dumper.py:658, 695-705)
LAYER_NAME = re.compile(r"(?:.+\.)?layers\.(\d+)$")
# The names the hooks dump bare: the union of every plugin's core fields (dumper.py:668-670), SGLang's
# (1802-1805) and Megatron's (1901-1904), whichever framework is present
CORE_FIELDS = frozenset(
    {"input_ids", "positions", "seq_lens", "req_pool_indices", "rids"}
    | {"position_ids", "cu_seqlens_q", "cu_seqlens_kv", "qkv_format"}
)


@dataclass
class Written:
    """One dump call, kept so the TP=2 run can be laid out from it."""

    tags: dict[str, Any]
    value: torch.Tensor
    dims: str | None


@dataclass
class Dumper:
    """SGLang's ``_Dumper`` (dumper.py:229) with ``DUMPER_ENABLE=1`` and ``DUMPER_NON_INTRUSIVE_MODE=all``."""

    step: int = 0  # dumper.py:223: starts at 0, +1 in step() after each forward (model_runner.py:1901)
    dump_index: int = 0  # dumper.py:222, +1 before each file (586): the first file is 1, never reset
    ctx: dict[str, Any] = field(default_factory=dict)
    written: list[tuple[int, Written]] = field(default_factory=list)
    filter: str | None = None  # DUMPER_FILTER (dumper.py:137-174): a Python expression over the tags

    def dump(self, name: str, value: torch.Tensor, dims: str | None = None, **kwargs: Any) -> None:
        # dumper.py:490-495: the tags are name, recompute_status, the call's kwargs, then the context
        tags = {"name": name, "recompute_status": "disabled", **kwargs, **self.ctx}
        if self.filter is not None and not evaluate_filter(self.filter, tags):
            return  # dumper.py:490-500: filtered out before dump_index counts a file (586)
        self.written.append((self.step, Written(tags, value.detach().clone(), dims)))

    def set_ctx(self, **kwargs: Any) -> None:  # dumper.py:352-364: None clears a key
        self.ctx = {k: v for k, v in (self.ctx | kwargs).items() if v is not None}


def evaluate_filter(expression: str, tags: dict[str, Any]) -> bool:
    """dumper.py:1312-1320: DUMPER_FILTER evaluated with the tags as its names, without builtins."""
    return bool(eval(expression, {"__builtins__": {}}, dict(tags)))


def write_rank(folder: Path, written: list[tuple[int, Written]], rank: int, world: int) -> None:
    """The files of one rank, in dump order (dumper.py:575-636)."""
    exp = folder / EXP_NAME  # dumper.py:598: {dir}/{exp_name}/{file}
    exp.mkdir(parents=True)
    for dump_index, (step, item) in enumerate(written, start=1):
        # dumper.py:589-594: step, rank, dump_index, then the tags
        full = {"step": step, "rank": rank, "dump_index": dump_index, **item.tags}
        file_name = "___".join(f"{k}={v}" for k, v in full.items()) + ".pt"  # dumper.py:597, 1298-1299
        # dumper.py:612-619: {"value": ..., "meta": {**full_kwargs, **static meta, **meta-only fields}}
        meta: dict[str, Any] = {**full, **static_meta(rank, world)}
        if item.dims is not None:
            meta["dims"] = item.dims  # dumper.py:296-298: dump(dims=...) is a meta-only field
        torch.save({"value": item.value, "meta": meta}, exp / file_name)  # dumper.py:636, 1099-1103


def static_meta(rank: int, world: int) -> dict[str, Any]:
    """dumper.py:1332-1348 with the SGLang plugin's parallel info (1724-1758), pure TP."""
    info = {
        "tp_rank": rank,
        "tp_size": world,
        "pp_rank": 0,
        "pp_size": 1,
        "moe_ep_rank": 0,
        "moe_ep_size": 1,
        "moe_tp_rank": rank,
        "moe_tp_size": world,
        "moe_dp_rank": 0,
        "moe_dp_size": 1,
        "attn_dp_enabled": False,
        "attn_tp_rank": rank,
        "attn_tp_size": world,
        "attn_dp_rank": 0,
        "attn_dp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
    }
    return {
        "world_rank": rank,
        "world_size": world,
        "sglang_parallel_info": info,
        "tokenizer_path": "tiny-llama",
    }


def convert_value(value: Any) -> dict[str, torch.Tensor]:
    """dumper.py:758-775: a tensor; a tuple/list's tensors (keyed by position when several)."""
    if isinstance(value, torch.Tensor):
        return {"": value}
    if isinstance(value, (tuple, list)):
        tensors = [t for t in value if isinstance(t, torch.Tensor)]
        if len(tensors) == 1:
            return {"": tensors[0]}
        return {str(i): t for i, t in enumerate(tensors)}
    return {}  # other objects (a ModelOutput, a cache): no plugin converts them, nothing is dumped


def install_hooks(model: torch.nn.Module, dumper: Dumper) -> None:
    """dumper.py:656-775 (_NonIntrusiveDumper) with mode "all"."""

    def dump_value(module_name: str, value: Any, sub_name: str) -> None:  # dumper.py:745-756
        for key, item in convert_value(value).items():
            effective_key = key or sub_name.rsplit(".", 1)[-1]
            if effective_key in CORE_FIELDS:
                dumper.dump(effective_key, item)
            else:
                parts = [p for p in (module_name, sub_name, key) if p]
                dumper.dump("non_intrusive__" + ".".join(parts), item)

    for module_name, module in model.named_modules():
        found = LAYER_NAME.fullmatch(module_name)
        if found:  # dumper.py:676-677, 707-720: registered first, so it clears before the output hook
            layer = int(found.group(1))
            module.register_forward_pre_hook(lambda _m, _i, layer=layer: dumper.set_ctx(layer_id=layer))
            module.register_forward_hook(lambda _m, _i, _o: dumper.set_ctx(layer_id=None))

        def pre_hook(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = module_name) -> None:
            for i, item in enumerate(args):  # dumper.py:722-736
                dump_value(name, item, f"inputs.{i}")
            for key, item in kwargs.items():
                dump_value(name, item, f"inputs.{key}")

        def hook(_m: Any, _i: Any, output: Any, name: str = module_name) -> None:
            if output is not None:  # dumper.py:738-743
                dump_value(name, output, "output")

        module.register_forward_pre_hook(pre_hook, with_kwargs=True)
        module.register_forward_hook(hook)


def build_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(config).eval()
    for parameter in model.parameters():  # random norms too, so a doubled tile cannot hide
        torch.nn.init.normal_(parameter, std=0.3)
    return model


def scale_tail(out: torch.Tensor) -> torch.Tensor:
    patched = out.clone()
    patched[..., -TILE:] *= 2
    return patched


def install_mlp_dumps(model: Any, dumper: Dumper, faulty: Callable[[], bool]) -> None:
    """The explicit dumps in every MLP, and the fault inside the faulty layer's down projection."""
    for name, module in model.named_modules():
        if not name.endswith(".mlp"):
            continue

        def forward(x: torch.Tensor, mlp: Any = module, name: str = name) -> torch.Tensor:
            act = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
            dumper.dump("mlp_act", act, dims="b s i[tp]")
            down = mlp.down_proj(act)
            dumper.dump("mlp_down", down, dims="b s h[tp:partial]")
            return down

        module.forward = forward
        if name + ".down_proj" == FAULT_MODULE:
            down_proj = module.down_proj
            plain = down_proj.forward

            def down_forward(x: torch.Tensor, plain: Any = plain) -> torch.Tensor:
                out = plain(x)
                return scale_tail(out) if faulty() else out

            down_proj.forward = down_forward


def run(fault: bool, warmup: bool) -> tuple[list[tuple[int, Written]], Any]:
    from transformers import DynamicCache

    model = build_model()
    dumper = Dumper()
    fault_step = FAULT_STEP + (1 if warmup else 0)
    install_mlp_dumps(model, dumper, lambda: fault and dumper.step == fault_step)
    install_hooks(model, dumper)
    requests = ([WARMUP] if warmup else []) + [PROMPT]
    with torch.no_grad():
        for prompt in requests:
            cache = DynamicCache()
            ids = torch.tensor([prompt])
            steps = 1 if prompt is WARMUP else STEPS
            position = 0
            for _ in range(steps):
                positions = torch.arange(position, position + ids.shape[1]).unsqueeze(0)
                out = model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True)
                position += ids.shape[1]
                ids = out.logits[:, -1:].argmax(-1)
                dumper.step += 1  # model_runner.py:1900-1901: dumper.step() after each forward
    return dumper.written, model


# --- TP=2: what each rank of a tensor-parallel SGLang Llama holds ---------------------------------

COLUMN_OUTPUT = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.output$")
ROW_INPUT = re.compile(r"\.(o_proj|down_proj)\.inputs\.0$")
ACT = re.compile(r"\.act_fn\.(inputs\.0|output)$")
ATTN_WEIGHTS = re.compile(r"\.self_attn\.output\.1$")  # (batch, heads, q, k): heads are split


def shard(item: Written, rank: int, model: Any) -> torch.Tensor:
    name, value = item.tags["name"], item.value
    if COLUMN_OUTPUT.search(name) or ROW_INPUT.search(name) or ACT.search(name) or name == "mlp_act":
        return value.chunk(TP, dim=-1)[rank].clone()
    if ATTN_WEIGHTS.search(name):
        return value.chunk(TP, dim=1)[rank].clone()
    return value  # replicated: inputs of column-parallel layers, all-reduced outputs, norms, ids


def tp_written(written: list[tuple[int, Written]], model: Any, rank: int) -> list[tuple[int, Written]]:
    """The faulty run as rank ``rank`` of TP=2 holds it (its ``mlp_down`` a real partial product)."""
    laid_out = []
    act_of_layer: dict[int, torch.Tensor] = {}
    for step, item in written:
        name = item.tags["name"]
        if name == "mlp_act":
            act_of_layer[item.tags["layer_id"]] = item.value
        if name == "mlp_down":
            layer = item.tags["layer_id"]
            weight = model.model.layers[layer].mlp.down_proj.weight
            act = act_of_layer[layer].chunk(TP, dim=-1)[rank]
            partial = act @ weight.chunk(TP, dim=1)[rank].T
            faulty = f"model.layers.{layer}.mlp.down_proj" == FAULT_MODULE and step == FAULT_STEP
            value = scale_tail(partial) if faulty else partial
        else:
            value = shard(item, rank, model)
        laid_out.append((step, Written(item.tags, value.detach().clone(), item.dims)))
    return laid_out


def main() -> int:
    golden, _ = run(fault=False, warmup=False)
    test, _ = run(fault=True, warmup=True)
    tp_source, model = run(fault=True, warmup=False)
    with tempfile.TemporaryDirectory() as temporary:
        case = Path(temporary) / "sglang-llama"
        write_rank(case / "golden", golden, rank=0, world=1)
        write_rank(case / "test", test, rank=0, world=1)
        tp_dir = case / "test_tp2"
        for rank in range(TP):
            # every rank writes into the same experiment folder (dumper.py:598; the name is broadcast
            # from rank 0, 1174-1183); dump_index counts per process
            part = Path(temporary) / f"rank{rank}"
            write_rank(part, tp_written(tp_source, model, rank), rank=rank, world=TP)
            (tp_dir / EXP_NAME).mkdir(parents=True, exist_ok=True)
            for file in (part / EXP_NAME).iterdir():
                shutil.move(str(file), tp_dir / EXP_NAME / file.name)
        (case / "case.json").write_text(
            json.dumps(
                {
                    "fault_module": FAULT_MODULE,
                    "fault_step": FAULT_STEP,
                    "test_step_shift": 1,
                    "steps": STEPS,
                    "tp": TP,
                    "fault": f"the last {TILE} output columns come out doubled",
                    "torch": torch.__version__,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        OUT.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(OUT, "w:xz", preset=9) as archive:
            for path in sorted(case.rglob("*")):
                info = archive.gettarinfo(str(path), str(path.relative_to(case.parent)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if path.is_file():
                    with path.open("rb") as handle:
                        archive.addfile(info, handle)
                else:
                    archive.addfile(info)
    print(f"{OUT}: {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
