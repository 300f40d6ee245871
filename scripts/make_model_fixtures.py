"""Real-tool dumps of other model families and msprobe levels: ``tests/data/models/*.tar.xz``.

Each case dumps a random-weight model built from a transformers config twice, golden in float32
and test in a lower precision with one injected fault, through the real dumper (msit 8.2.0's
``DumpConfig`` + ``register_hook``, or mindstudio-probe 26.2.0's ``PrecisionDebugger``), and packs
both dumps with a ``case.json`` that says where the fault is. The tests read the archives; nothing
here runs in the project's own environment.

The tools need a virtual environment of their own (docs/formats.md §0)::

    python3 -m venv ~/tools-venv && . ~/tools-venv/bin/activate
    pip install torch==2.13.0 && pip install msit mindstudio-probe transformers
    msit install llm     # builds msit's llm component; the CANN errors it prints are harmless here
    pip install "numpy<2.0" "pandas<2.3" "ml_dtypes<0.6"

then, from the repository::

    python scripts/make_model_fixtures.py [--only CASE ...]

Every side runs in a process of its own (msit's DumpConfig is a process-wide singleton).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "models"
PROMPT = [1, 37, 200, 88, 4]
NEW_TOKENS = 4
SEED = 1234
TILE = 8  # the faulty kernel leaves its last TILE output columns as they were a step before


@dataclass(frozen=True)
class Case:
    family: str  # llama | qwen2_moe | gpt2 | qwen2
    dumper: str  # msit | msprobe
    test_dtype: str  # bfloat16 | float16
    fault_module: str  # the module whose computation goes wrong (its path in the model)
    fault_token: int
    level: str = ""  # msprobe: L0 | L1 | mix
    task: str = "tensor"  # msprobe: tensor | statistics
    summary_mode: str = "statistics"  # msprobe statistics task: statistics | md5 | xor
    golden_risk_level: str = ""  # msprobe: the golden's risk_level (the test keeps the default, FOCUS)
    # msprobe: the test dumps as a serving engine does (vllm-ascend eager, SGLang's
    # --msprobe-dump-config): start() before each forward pass, stop() and step() after it; one step
    # in between belongs to another request and is not dumped, as a per-request dump skips it
    serving: bool = False
    api_fault: bool = False  # the fault is inside the module's F.linear call (an API), not after it
    # "stale": the last TILE output columns keep the previous step's values (shows in the values,
    # hardly in a norm); "scale": they come out doubled (a wrong scale: shows in the statistics too)
    fault_kind: str = "stale"


CASES: dict[str, Case] = {
    "llama-msprobe-L1": Case(
        "llama", "msprobe", "bfloat16", "model.layers.1.mlp.down_proj", 2, "L1", api_fault=True
    ),
    "llama-msprobe-L1-statistics": Case(
        "llama",
        "msprobe",
        "bfloat16",
        "model.layers.1.mlp.down_proj",
        2,
        "L1",
        "statistics",
        api_fault=True,
        fault_kind="scale",
    ),
    "llama-msprobe-mix": Case(
        "llama", "msprobe", "float16", "model.layers.1.mlp.down_proj", 2, "mix", api_fault=True
    ),
    "llama-msprobe-mix-statistics": Case(
        "llama",
        "msprobe",
        "float16",
        "model.layers.1.mlp.down_proj",
        2,
        "mix",
        "statistics",
        api_fault=True,
        fault_kind="scale",
    ),
    # msprobe's default risk_level FOCUS leaves view/reshape/transpose/to... out of the test; the
    # golden was dumped with risk_level ALL, so those records are present on one side only
    "llama-msprobe-L1-focus": Case(
        "llama",
        "msprobe",
        "bfloat16",
        "model.layers.1.mlp.down_proj",
        2,
        "L1",
        "statistics",
        api_fault=True,
        fault_kind="scale",
        golden_risk_level="ALL",
    ),
    # checksums only: both sides in float32, so every tensor before the fault has the same bits
    "llama-msprobe-L1-xor": Case(
        "llama",
        "msprobe",
        "float32",
        "model.layers.1.mlp.down_proj",
        2,
        "L1",
        "statistics",
        summary_mode="xor",
        api_fault=True,
        fault_kind="scale",
    ),
    "llama-msprobe-L0-serving": Case(
        "llama",
        "msprobe",
        "bfloat16",
        "model.layers.1.mlp.down_proj",
        2,
        "L0",
        "statistics",
        fault_kind="scale",
        serving=True,
    ),
    # single-point saves (PrecisionDebugger.save) of each MLP, each layer and the logits; step() per token
    "llama-msprobe-debug": Case("llama", "msprobe", "bfloat16", "model.layers.1.mlp.down_proj", 2, "debug"),
    "qwen2moe-msit": Case("qwen2_moe", "msit", "bfloat16", "model.layers.1.mlp.experts", 2),
    "qwen2moe-msprobe-L0": Case("qwen2_moe", "msprobe", "bfloat16", "model.layers.1.mlp.experts", 2, "L0"),
    "gpt2-msit": Case("gpt2", "msit", "float16", "transformer.h.1.mlp.c_proj", 2),
    "qwen2-msprobe-L0": Case("qwen2", "msprobe", "float16", "model.layers.1.self_attn.o_proj", 2, "L0"),
}


# --- one side, in its own process -----------------------------------------------------------


def build_model(family: str) -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    # weights at std 0.2, not transformers' 0.02: at 0.02 the residual stream is all embedding and a
    # faulty operator's error fades before the logits (cosine 0.9997); at 0.2 the logits show it
    common = {"vocab_size": 256, "attn_implementation": "eager", "initializer_range": 0.2}
    llama_like = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
        **common,
    }
    if family == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**llama_like))
    elif family == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**llama_like))
    elif family == "qwen2_moe":
        config = tf.Qwen2MoeConfig(
            **llama_like,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
        )
        model = tf.Qwen2MoeForCausalLM(config)
    elif family == "gpt2":
        config = tf.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0, **common
        )
        model = tf.GPT2LMHeadModel(config)  # tied embeddings: lm_head shares wte's weight
    else:
        raise SystemExit(f"unknown family {family!r}")
    return model.eval()


class TokenCounter:
    """Counts the model's forward passes: token k is the k-th (0 the prefill)."""

    def __init__(self, model: Any) -> None:
        self.token = -1
        model.register_forward_pre_hook(self._next)

    def _next(self, *_: Any) -> None:
        self.token += 1


def install_module_fault(model: Any, case: Case, tokens: TokenCounter) -> None:
    """The module's own computation goes wrong at one token: its output keeps a stale tail tile.

    The module's ``forward`` is wrapped (not hooked), so every dumper's hook sees the faulty output.
    """
    module = model.get_submodule(case.fault_module)
    forward = module.forward
    previous: dict[str, Any] = {}

    def faulty(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        stale = previous.get("out")
        previous["out"] = out.detach().clone()
        if tokens.token != case.fault_token or stale is None:
            return out
        return _faulty_output(case, out, stale)

    module.forward = faulty


def install_api_fault(model: Any, case: Case, tokens: TokenCounter, record: dict[str, Any]) -> None:
    """The ``F.linear`` call inside the module goes wrong at one token (before msprobe wraps F.linear).

    ``record`` gets the call's index among all ``F.linear`` calls: msprobe numbers
    ``Functional.linear.{n}.forward`` the same way, so the faulty record's name is known.
    """
    import torch.nn.functional as F

    module = model.get_submodule(case.fault_module)
    linear = F.linear
    inside = {"on": False, "calls": 0}
    previous: dict[str, Any] = {}
    module.register_forward_pre_hook(lambda *_: inside.update(on=True))
    module.register_forward_hook(lambda *_: inside.update(on=False))

    def faulty_linear(*args: Any, **kwargs: Any) -> Any:
        n = inside["calls"]
        inside["calls"] += 1
        out = linear(*args, **kwargs)
        if not inside["on"]:
            return out
        stale = previous.get("out")
        previous["out"] = out.detach().clone()
        if tokens.token != case.fault_token or stale is None:
            return out
        record["fault_record"] = f"Functional.linear.{n}.forward"
        return _faulty_output(case, out, stale)

    F.linear = faulty_linear


def install_saves(model: Any, debugger: Any, case: Case, record: dict[str, Any]) -> None:
    """Level debug: save each layer's MLP output and output, and the logits; a step per token.

    The saves run in forward hooks, so an MLP's save comes before its layer's; the logits' hook
    ends the forward pass, and ``step()`` there makes each token a step folder of its own.
    """
    layers = model.model.layers
    for index, layer in enumerate(layers):
        layer.mlp.register_forward_hook(
            lambda _m, _i, out, name=f"mlp{index}": debugger.save(out, name, save_backward=False)
        )
        layer.register_forward_hook(
            lambda _m, _i, out, name=f"layer{index}": debugger.save(
                out[0] if isinstance(out, tuple) else out, name, save_backward=False
            )
        )

    def end_of_pass(_module: Any, _inputs: Any, out: Any) -> None:
        debugger.save(out, "logits", save_backward=False)
        debugger.step()

    model.lm_head.register_forward_hook(end_of_pass)
    fault_layer = case.fault_module.split(".")[2]  # model.layers.{i}.mlp...
    record["fault_record"] = f"mlp{fault_layer}.0.debug"  # a save's count starts at 0 every step


def _faulty_output(case: Case, out: Any, stale: Any) -> Any:
    patched = out.clone()
    if case.fault_kind == "scale":
        patched[..., -TILE:] *= 2
        return patched
    rows = min(stale.shape[-2], patched.shape[-2])
    patched[..., -rows:, -TILE:] = stale[..., -rows:, -TILE:]
    return patched


def dump_side(name: str, side: str, out: Path) -> None:
    """Run one side of a case and dump it into ``out`` (which must not exist)."""
    import torch

    case = CASES[name]
    model = build_model(case.family)
    if side == "test":
        model = model.to(getattr(torch, case.test_dtype))
    tokens = TokenCounter(model)
    record: dict[str, Any] = {}
    if side == "test":
        if case.api_fault:
            install_api_fault(model, case, tokens, record)
        else:
            install_module_fault(model, case, tokens)
    out.mkdir(parents=True)
    if case.dumper == "msit":
        from msit_llm import DumpConfig, register_hook

        config = DumpConfig(dump_path=str(out), token_range=list(range(NEW_TOKENS)))
        register_hook(model, config)
        ids = _generate(model)
    else:
        from msprobe.pytorch import PrecisionDebugger

        config = out / f"{side}_config.json"
        settings = _msprobe_config(case, out)
        if side == "golden" and case.golden_risk_level:
            settings["risk_level"] = case.golden_risk_level
        config.write_text(json.dumps(settings), encoding="utf-8")
        debugger = PrecisionDebugger(config_path=str(config))
        if case.level == "debug":
            install_saves(model, debugger, case, record)
            ids = _generate(model)
        elif case.serving:
            ids = _serve(model, debugger if side == "test" else None, debugger)
        else:
            debugger.start(model)
            ids = _generate(model)
            debugger.stop()
            debugger.step()
        config.rename(out.parent / config.name)
    record["generated"] = ids
    (out.parent / f"{side}_run.json").write_text(json.dumps(record), encoding="utf-8")


def _msprobe_config(case: Case, out: Path) -> dict[str, Any]:
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    config: dict[str, Any] = {
        "task": case.task,
        "dump_path": str(out),
        "rank": [],
        "step": [],
        "level": case.level,
    }
    if case.task == "statistics":
        config["statistics"] = {**section, "summary_mode": case.summary_mode}
    else:
        config["tensor"] = section
    return config


def _serve(model: Any, per_step: Any, whole: Any) -> list[int]:
    """Greedy decoding one forward pass at a time, with the KV cache, as a serving engine runs it.

    ``per_step``: the debugger to start and step around each forward pass (the test side), with a
    step of another request (not dumped) after the first decode; else ``whole`` dumps the whole
    loop as one step (the golden side, as a script dumping generate() would).
    """
    import torch
    from transformers import DynamicCache

    ids = torch.tensor([PROMPT])
    cache = DynamicCache()
    generated: list[int] = []
    if per_step is None:
        whole.start(model)
    with torch.no_grad():
        for token in range(NEW_TOKENS):
            if per_step is not None:
                per_step.start(model)
            logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits
            if per_step is not None:
                per_step.stop()
                per_step.step()
                if token == 1:
                    per_step.step()  # another request's step: a per-request dump writes nothing for it
            ids = logits[:, -1:].argmax(-1)
            generated.append(int(ids[0, 0]))
    if per_step is None:
        whole.stop()
        whole.step()
    return generated


def _generate(model: Any) -> list[int]:
    import torch

    with torch.no_grad():
        ids = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return [int(i) for i in ids[0, len(PROMPT) :]]


# --- a whole case ---------------------------------------------------------------------------


def make_case(name: str, work: Path) -> Path:
    """Dump both sides, take out the generating machine's paths, pack them; returns the archive."""
    case_dir = work / name
    for side in ("golden", "test"):
        command = [sys.executable, __file__, "--side", name, side, str(case_dir / side)]
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    _relativise(case_dir)
    case = CASES[name]
    runs = {side: json.loads((case_dir / f"{side}_run.json").read_text()) for side in ("golden", "test")}
    description = {
        "case": name,
        **asdict(case),
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "golden_dtype": "float32",
        "fault": f"{case.fault_module} at token {case.fault_token}: its last {TILE} output columns "
        + ("come out doubled" if case.fault_kind == "scale" else "keep the previous step's values")
        + (" (inside its F.linear call)" if case.api_fault else ""),
        "fault_record": runs["test"].get("fault_record"),
        "generated": {side: runs[side]["generated"] for side in runs},
        "tools": _versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    for side in ("golden", "test"):
        (case_dir / f"{side}_run.json").unlink()
    archive = OUT / f"{name}.tar.xz"
    _pack(case_dir, archive)
    return archive


def _relativise(case_dir: Path) -> None:
    """No absolute path of this machine stays in the dumps: dump.json's data dir, stack.json's files."""
    site = re.escape(sys.prefix)  # the venv running the tools, activated or not
    for dump_json in [*case_dir.rglob("dump.json"), *case_dir.rglob("debug.json")]:
        data = json.loads(dump_json.read_text(encoding="utf-8"))
        if data.get("dump_data_dir"):
            data["dump_data_dir"] = "dump_tensor_data"
        dump_json.write_text(json.dumps(data, indent=1), encoding="utf-8")
    for stack in case_dir.rglob("stack.json"):
        text = stack.read_text(encoding="utf-8")
        text = re.sub(site + r"/lib/python[0-9.]+/site-packages/", "site-packages/", text)
        text = text.replace(str(REPO) + "/", "").replace(str(case_dir) + "/", "")
        stack.write_text(text, encoding="utf-8")
    for config in case_dir.glob("*_config.json"):
        data = json.loads(config.read_text(encoding="utf-8"))
        data["dump_path"] = Path(data["dump_path"]).name
        config.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _pack(case_dir: Path, archive: Path) -> None:
    """A tar.xz of the case, members sorted, owner-neutral; file times kept (msit orders by them)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, "w:xz", preset=9) as tar:
        for path in sorted(case_dir.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(case_dir.parent)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, io.BytesIO(handle.read()))
            else:
                tar.addfile(info)
    partial.replace(archive)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("msit", "mindstudio-probe", "torch", "transformers")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="make only these cases")
    parser.add_argument("--side", nargs=3, metavar=("CASE", "SIDE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        name, side, out = args.side
        dump_side(name, side, Path(out))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-models-") as work:
        for name in args.only or sorted(CASES):
            archive = make_case(name, Path(work))
            print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
