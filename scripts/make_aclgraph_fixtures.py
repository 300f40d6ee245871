"""msprobe graph-mode (ACLGraph) dumps of a tiny Llama: ``tests/data/aclgraph/*.tar.xz``.

msprobe's ``AclGraphDumper`` (``from msprobe.pytorch import AclGraphDumper``) needs an NPU: its
collection ops live in a C++ extension built against torch_npu (``msprobe.lib.aclgraph_dump_ext``,
source ``ccsrc/aclgraph_dump/aclgraph_dump.cpp``). Here the real dumper's Python
(``msprobe/pytorch/aclgraph_dumper.py`` of mindstudio-probe 26.2.0, as installed) runs on the CPU,
and only the three C++ ops it calls are replaced by a line-for-line Python port of the extension's
CPU path (``_Extension`` below). Every file and folder name therefore comes from msprobe's own code;
the rules, with the line of msprobe's repository (Ascend/msprobe, August 2026) each comes from:

* folders: ``{dump_path}/step{step_id}/{rank{R} | pid{os.getpid()}}`` (aclgraph_dumper.py:311-318);
  without torch.distributed it is ``pid{P}`` (aclgraph_dumper.py:301-309).
* tensor task: the replay writes into ``{dump_path}/dump_tensor_data/{pid|rank}`` (aclgraph_dumper.py:
  320-328); ``step()`` moves the files into ``step{N}/{pid|rank}/dump_tensor_data/`` and advances the
  step (aclgraph_dumper.py:330-342, 740-748); no dump.json is written for it (docs/en/dump/
  aclgraph_dump_instruct.md "A tensor task does not generate dump.json").
* a tensor file's tag is ``{scope}.{input|input_kwargs|output}[.{suffix}]`` (aclgraph_dumper.py:569-578)
  with the suffix from ``_iter_tensors`` (aclgraph_dumper.py:53-75): ``input.{i}`` for the positional
  tuple, ``input_kwargs.{name}[.{j}]``, ``output`` alone for a single tensor, ``output.{i}`` for a
  tuple; characters outside ``[A-Za-z0-9._-]`` become ``_`` (aclgraph_dumper.py:344-350).
* scope: ``Module.{path|__root__}.{Class}`` for modules at L0/mix (aclgraph_dumper.py:352-359),
  ``Aten.{op}[.{overload}]``, ``NPU.{op}``, ``Torch.{ns}.{op}`` for dispatched ops at L1/mix
  (aclgraph_dumper.py:388-415), seen only inside the root module's forward (aclgraph_dumper.py:639-645).
* the call index goes in after the scope: ``{scope}.{call}.{io}...pt`` (aclgraph_dump.cpp:170-189);
  one counter per scope, advanced by the first tensor of each call (aclgraph_dump.cpp:151-162,
  aclgraph_dumper.py:579-584) and never reset by the tensor task's ``step()`` (only
  ``get_acl_stat_dict(clear=True)`` clears it, aclgraph_dump.cpp:745-749).
* statistics task: key ``{scope}.{call}.forward.{io}[.{suffix}]`` (aclgraph_dump.cpp:228-268), the
  call advanced by the forward-start marker (aclgraph_dumper.py:574-576); stats of the tensor cast to
  float32 (aclgraph_dump.cpp:441-459), non-finite values as null (aclgraph_dump.cpp:697-729), keys in
  first-seen order (aclgraph_dump.cpp:491-502, 731-743), counters cleared at every ``step()``
  (aclgraph_dump.cpp:745-749); ``step()`` writes ``step{N}/{pid|rank}/dump.json`` with task, level,
  framework, ``dump_data_dir: null`` and data (aclgraph_dumper.py:749-762), op names
  ``{scope}.{call}.forward`` and modules renamed ``Module.{path}.{Class}.forward.{call}``
  (aclgraph_dumper.py:503-559); no construct.json, no stack.json.

A graph replay is one forward pass; here each forward pass (the prefill, then one decode step per
new token, with a KV cache) is followed by ``dumper.step()``, as the docs' quick start does after
each ``graph.replay()``. Golden runs in float32, test in bfloat16 with one fault: at token 2 the
``aten.mm`` inside ``model.layers.1.mlp.down_proj`` returns its last 8 columns doubled. The fault sits
below msprobe's dispatch mode (a mode entered before the dumper's), so the dumper records the faulty
output as the op's own, as it would record a faulty NPU kernel.

File times: msprobe writes each file from a host callback on the stream, in execution order
(aclgraph_dump.cpp:595-610); this script sets them 1 ms apart in the order written, so archives are
reproducible and keep that order.

Run in the tools venv (docs/formats.md §0; see make_model_fixtures.py)::

    python scripts/make_aclgraph_fixtures.py
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "aclgraph"
FAULT_MODULE = "model.layers.1.mlp.down_proj"
FAULT_TOKEN = 2
NEW_TOKENS = 4  # forward passes: the prefill and three decode steps
TILE = 8
PROMPT = [1, 37, 90, 88, 4]
EPOCH_NS = 1_780_000_000 * 10**9

# case -> (msprobe task, level, keyword list)
CASES: dict[str, tuple[str, str, list[str]]] = {
    # the docs: "Use level and list to narrow the collection scope" (each file costs its zip overhead)
    "llama-aclgraph-L1-tensor": ("tensor", "L1", ["mm", "embedding", "rsqrt", "silu", "softmax", "add"]),
    "llama-aclgraph-mix-tensor": ("tensor", "mix", ["mlp", "Aten.silu", "Aten.mul"]),
    "llama-aclgraph-mix-statistics": ("statistics", "mix", []),
}


def _load_model_fixtures() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_model_fixtures", REPO / "scripts" / "make_model_fixtures.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


class _Extension:
    """The CPU path of ``msprobe.lib.aclgraph_dump_ext`` (aclgraph_dump.cpp), in Python."""

    def __init__(self) -> None:
        self.call_indices: dict[str, int] = {}  # g_call_indices (aclgraph_dump.cpp:122)
        self.stats: dict[str, dict[str, Any]] = {}  # g_stat_entries + g_stat_entry_order (:123-124)
        self.written: list[str] = []  # files in the order written, for their times

    def get_call_index(self, key: str, is_call_start: bool) -> int:  # aclgraph_dump.cpp:151-162
        if is_call_start or key not in self.call_indices:
            self.call_indices[key] = self.call_indices[key] + 1 if key in self.call_indices else 0
        return self.call_indices[key]

    @staticmethod
    def indexed_path(path: str, api_name: str, call_idx: int) -> str:  # aclgraph_dump.cpp:170-189
        directory, _, filename = path.rpartition("/")
        stem = filename.rsplit(".", 1)[0] if "." in filename else filename
        at = stem.find(api_name)
        if at >= 0:
            name = f"{stem[: at + len(api_name)]}.{call_idx}{stem[at + len(api_name) :]}"
        else:
            name = f"{stem}.{call_idx}"
        return f"{directory}/{name}.pt" if directory else f"{name}.pt"

    @staticmethod
    def _enabled(switch: Any) -> bool:  # is_switch_enabled_on_host, aclgraph_dump.cpp:461-489
        return switch is None or switch.numel() == 0 or int(switch.reshape(-1)[0]) != 0

    def acl_tensor_save(
        self, x: Any, path: str, api_name: str, is_call_start: bool = False, switch: Any = None
    ) -> Any:
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # the extension's own work is not a model op
            if not self._enabled(switch):  # aclgraph_dump.cpp:618
                return x
            call_idx = self.get_call_index(api_name, is_call_start)  # :619
            final = self.indexed_path(path, api_name, call_idx)  # :620
            torch.save(x.detach().to("cpu").contiguous().clone(), final)  # :622-623 (torch::pickle_save)
            self.written.append(final)
        return x

    def acl_stat(self, x: Any, tag: str, switch: Any = None) -> Any:
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            if not self._enabled(switch):  # aclgraph_dump.cpp:653
                return x
            stat = x.detach().to("cpu")
            if stat.numel() == 0:  # compute_stats_tensor, aclgraph_dump.cpp:441-459
                values = [0.0, 0.0, 0.0, 0.0]
            else:
                if stat.is_complex():
                    stat = stat.abs()
                stat = stat.to(torch.float32)
                values = [float(v) for v in (stat.amin(), stat.amax(), stat.mean(), stat.norm())]
            dtype = _C10_NAMES.get(str(x.dtype), str(x.dtype))  # c10::toString, aclgraph_dump.cpp:395
            key = self.stat_key(tag)  # update_stats_map, aclgraph_dump.cpp:491-502
            self.stats[key] = {"dtype": dtype, "shape": list(x.shape), "values": values}
        return x

    def stat_key(self, tag: str) -> str:  # build_stat_key, aclgraph_dump.cpp:198-268
        best_pos, best_type, best_suffix = -1, "", ""
        for io in ("input_kwargs", "input", "output"):
            mid = tag.rfind(f".{io}.")
            if mid >= 0 and (best_pos < 0 or mid > best_pos):
                best_pos, best_type, best_suffix = mid, io, tag[mid + len(io) + 2 :]
            tail = tag.rfind(f".{io}")
            if tail >= 0 and tail + len(io) + 1 == len(tag) and (best_pos < 0 or tail > best_pos):
                best_pos, best_type, best_suffix = tail, io, ""
        if best_pos < 0:
            return tag
        module, suffix, start = tag[:best_pos], best_suffix, False
        marker = "__msprobe_fwd_start__"
        if suffix == marker:
            start, suffix = True, ""
        elif suffix.startswith(marker + "."):
            start, suffix = True, suffix[len(marker) + 1 :]
        call_idx = self.get_call_index(module, start)
        return f"{module}.{call_idx}.forward.{best_type}" + (f".{suffix}" if suffix else "")

    def get_acl_stat_dict(self, clear: bool = False) -> dict[str, Any]:  # aclgraph_dump.cpp:697-752
        result = {}
        for key, record in self.stats.items():
            lo, hi, mean, norm = record["values"]
            result[key] = {
                "min": lo if math.isfinite(lo) else None,
                "max": hi if math.isfinite(hi) else None,
                "mean": mean if math.isfinite(mean) else None,
                "norm": norm if math.isfinite(norm) else None,
                "dtype": record["dtype"],
                "shape": record["shape"],
            }
        if clear:
            self.stats.clear()
            self.call_indices.clear()
        return result


# c10::toString(ScalarType), which aclgraph_dumper.py:447-463 maps back to torch.* names
_C10_NAMES = {
    "torch.float32": "Float",
    "torch.bfloat16": "BFloat16",
    "torch.float16": "Half",
    "torch.int64": "Long",
    "torch.int32": "Int",
    "torch.bool": "Bool",
    "torch.float64": "Double",
    "torch.int8": "Char",
    "torch.uint8": "Byte",
}


def build_model() -> Any:
    """make_model_fixtures.py's Llama, narrower: every matmul's weight is dumped at every step."""
    import torch
    import transformers as tf

    torch.manual_seed(1234)
    config = tf.LlamaConfig(
        vocab_size=112,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        attn_implementation="eager",
        initializer_range=0.2,  # as make_model_fixtures.py: the fault must reach the logits
    )
    return tf.LlamaForCausalLM(config).eval()


def _install_extension() -> _Extension:
    """Put the port where ``aclgraph_dumper.py`` imports it from (``msprobe.pytorch.aclgraph_dump``)."""
    ext = _Extension()
    stand_in = types.ModuleType("msprobe.pytorch.aclgraph_dump")
    stand_in.acl_stat = ext.acl_stat  # type: ignore[attr-defined]
    stand_in.acl_tensor_save = ext.acl_tensor_save  # type: ignore[attr-defined]
    stand_in.get_acl_stat_dict = ext.get_acl_stat_dict  # type: ignore[attr-defined]
    stand_in.set_acl_stat_switch = lambda switch, enabled: None  # type: ignore[attr-defined]  # NPU only
    sys.modules["msprobe.pytorch.aclgraph_dump"] = stand_in
    return ext


def _fault_mode(tokens: Any, inside: dict[str, bool], record: dict[str, Any]) -> Any:
    """A dispatch mode entered before msprobe's: the dumper sees its faulty mm as the op's output.

    ``record`` gets the faulty call's index among every ``aten.mm`` call of the run and of its
    step: msprobe's tensor task numbers ``Aten.mm.{n}`` the first way, its statistics task the second.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = {"run": 0, "step": 0, "token": -1}

    class FaultyKernel(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func is not torch.ops.aten.mm.default:
                return out
            if calls["token"] != tokens.token:
                calls.update(step=0, token=tokens.token)
            run, step = calls["run"], calls["step"]
            calls.update(run=run + 1, step=step + 1)
            if inside["on"] and tokens.token == FAULT_TOKEN:
                record.update(mm_call=run, mm_call_in_step=step)
                out = out.clone()
                out[..., -TILE:] *= 2
            return out

    return FaultyKernel()


def dump_side(name: str, side: str, out: Path) -> None:
    import torch

    task, level, keywords = CASES[name]
    ext = _install_extension()
    from msprobe.pytorch.aclgraph_dumper import AclGraphDumper

    fixtures = _load_model_fixtures()
    model = build_model()
    if side == "test":
        model = model.to(torch.bfloat16)
    tokens = fixtures.TokenCounter(model)
    inside = {"on": False}
    faulty = model.get_submodule(FAULT_MODULE)
    faulty.register_forward_pre_hook(lambda *_: inside.update(on=side == "test"))
    faulty.register_forward_hook(lambda *_: inside.update(on=False))
    out.mkdir(parents=True)
    config = out.parent / f"{side}_config.json"
    config.write_text(
        json.dumps(
            {"task": task, "dump_path": str(out), "rank": [], "level": level, task: {"list": keywords}}
        ),
        encoding="utf-8",
    )
    dumper = AclGraphDumper(str(config))
    dumper.start(model)
    ids = torch.tensor([PROMPT])
    cache = None
    generated = []
    record: dict[str, Any] = {}
    with torch.no_grad(), _fault_mode(tokens, inside, record):
        for _ in range(NEW_TOKENS):
            result = model(input_ids=ids, past_key_values=cache, use_cache=True)
            dumper.step()  # after each replay (aclgraph_dump_instruct.md, Quick Start)
            cache = result.past_key_values
            ids = result.logits[:, -1:].argmax(-1)
            generated.append(int(ids))
    for position, path in enumerate(ext.written):  # written in execution order: keep it in the times
        moved = _archived(Path(path), out)
        if moved is not None:
            os.utime(moved, ns=(EPOCH_NS, EPOCH_NS + position * 1_000_000))
    data = json.loads(config.read_text(encoding="utf-8"))
    data["dump_path"] = out.name
    config.write_text(json.dumps(data, indent=1), encoding="utf-8")
    (out.parent / f"{side}_run.json").write_text(
        json.dumps({"generated": generated, **record}), encoding="utf-8"
    )


def _archived(written: Path, out: Path) -> Path | None:
    """Where ``step()`` moved a file: ``step*/{pid|rank}/dump_tensor_data/{name}``."""
    found = list(out.glob(f"step*/{written.parent.name}/dump_tensor_data/{written.name}"))
    return found[0] if len(found) == 1 else None


def make_case(name: str, work: Path) -> Path:
    fixtures = _load_model_fixtures()
    case_dir = work / name
    for side in ("golden", "test"):
        subprocess.run([sys.executable, __file__, "--side", name, side, str(case_dir / side)], check=True)
    task, level, keywords = CASES[name]
    runs = {side: json.loads((case_dir / f"{side}_run.json").read_text()) for side in ("golden", "test")}
    for side in runs:
        (case_dir / f"{side}_run.json").unlink()
    leftover = [p for p in case_dir.glob("*/dump_tensor_data") if p.is_dir()]
    for folder in leftover:  # the replay folder step() empties: nothing left in it
        for rank in folder.iterdir():
            rank.rmdir()
        folder.rmdir()
    fault = runs["test"]
    if "Aten.mm" in keywords or (level == "L1" and "mm" in keywords):  # the faulty aten.mm is recorded
        call = fault["mm_call"] if task == "tensor" else fault["mm_call_in_step"]
        fault_record = f"Aten.mm.{call}.forward"
    else:  # its module: one call per step, counted on across steps by the tensor task only
        call = FAULT_TOKEN if task == "tensor" else 0
        fault_record = f"Module.{FAULT_MODULE}.Linear.forward.{call}"
    description = {
        "case": name,
        "task": task,
        "level": level,
        "list": keywords,
        "family": "llama",
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "golden_dtype": "float32",
        "test_dtype": "bfloat16",
        "fault_module": FAULT_MODULE,
        "fault_token": FAULT_TOKEN,
        "fault_record": fault_record,  # msprobe's name for the faulty call, in the dump's naming
        "fault_stable": f"Aten.mm#{fault['mm_call_in_step']}" if fault_record.startswith("Aten") else None,
        "fault": f"{FAULT_MODULE} at token {FAULT_TOKEN}: its aten.mm doubles its last {TILE} columns",
        "generated": {side: runs[side]["generated"] for side in runs},
        "tools": fixtures._versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = OUT / f"{name}.tar.xz"
    fixtures.OUT = OUT
    fixtures._pack(case_dir, archive)
    return archive


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--side"]:
        dump_side(argv[1], argv[2], Path(argv[3]))
        return 0
    with tempfile.TemporaryDirectory(prefix="tui-acc-aclgraph-") as work:
        for name in argv or sorted(CASES):
            archive = make_case(name, Path(work))
            print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
