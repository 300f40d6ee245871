"""docs/dumping.md's checked blocks, run as written against the real dumpers, and the dumps opened
in tui-acc.

    TUI_ACC_MSIT_VENV=/path/to/tools-venv python scripts/check_dumping_docs.py [--work DIR]

The tools venv holds msit 8.2.0 with its llm component, mindstudio-probe, torch and transformers
(the route is in scripts/make_model_fixtures.py's docstring); this script runs in the project's
own environment, which has tui-acc. Without the tools venv it says so and exits 2.

For each dumper the document shows (msprobe at L0, mix and L1 from the one config, by its
``level``; msit's torch dump), the golden and the test side each run in a process of their own in
the tools venv: a tiny Hugging Face Llama (float32; the test in bfloat16, its
``model.layers.1.mlp.down_proj`` keeping its last 8 output columns from the previous token at token
2), ``inputs`` a 5-token prompt, then the document's block verbatim, in a folder holding the
document's config with ``dump_path`` the side's. ``tui-acc report`` then opens the two dumps and
must find token 2 failing and, where modules are recorded, name that module. For the ATB commands,
which need an NPU, the options the document gives are checked against ``msit llm dump --help`` and
msprobe's own ATB probe files. The document's blocks are found by their section and language
(``blocks()``; tests/unit/test_dumping_docs.py keeps the two in step).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "dumping.md"
VENV_VARIABLE = "TUI_ACC_MSIT_VENV"
FAULT_MODULE = "model.layers.1.mlp.down_proj"
FAULT_TOKEN = 2

# the model and the fault each side's block runs after (SIDE is set before it)
PRELUDE = f"""
import torch
import transformers as tf

torch.manual_seed(1234)
config = tf.LlamaConfig(
    vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, tie_word_embeddings=False, attn_implementation="eager", initializer_range=0.2,
)
model = tf.LlamaForCausalLM(config).eval()
inputs = {{"input_ids": torch.tensor([[1, 37, 200, 88, 4]])}}
if SIDE == "test":
    model = model.to(torch.bfloat16)
    passes = {{"n": -1}}
    model.register_forward_pre_hook(lambda *_: passes.update(n=passes["n"] + 1))
    module = model.get_submodule("{FAULT_MODULE}")
    forward, previous = module.forward, {{}}

    def faulty(*args, **kwargs):  # wrapped, not hooked: every dumper's hook sees the faulty output
        out = forward(*args, **kwargs)
        stale, previous["out"] = previous.get("out"), out.detach().clone()
        if passes["n"] != {FAULT_TOKEN} or stale is None:
            return out
        patched = out.clone()
        patched[..., -1:, -8:] = stale[..., -1:, -8:]
        return patched

    module.forward = faulty
"""


def blocks(text: str) -> dict[str, str]:
    """The document's blocks the checks run, by name: ``msprobe-config`` (JSON), ``msprobe`` and
    ``msit-torch`` (Python), ``msit-atb`` (the command), ``atb-probe-config`` (JSON)."""
    found: dict[str, str] = {}
    section = ""
    wanted = {
        ("msprobe", "json"): "msprobe-config",
        ("msprobe", "python"): "msprobe",
        ("msit torch", "python"): "msit-torch",
        ("atb and mindie", "bash"): "msit-atb",
        ("atb and mindie", "json"): "atb-probe-config",
    }
    for match in re.finditer(r"^## ([^\n]+)$|^```(\w+)\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            section = match.group(1).lower()
            continue
        for (title, language), name in wanted.items():
            if section.startswith(title) and match.group(2) == language and name not in found:
                found[name] = match.group(3)
    return found


def run_side(tools_python: Path, case_dir: Path, side: str, code: str, config: str | None) -> None:
    side_code = code.replace("./dump-golden", f"./dump-{side}")
    if config is not None:
        (case_dir / "msprobe_config.json").write_text(config.replace("./dump-golden", f"./dump-{side}"))
    script = case_dir / f"{side}.py"
    script.write_text(f"SIDE = {side!r}\n{PRELUDE}\n{side_code}", encoding="utf-8")
    done = subprocess.run(
        [str(tools_python), script.name], cwd=case_dir, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"{case_dir.name} {side}: the document's block failed:\n{done.stderr[-3000:]}")


def report(case_dir: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tui_acc", "report", "--json", "--no-cache", "dump-golden", "dump-test"],
        cwd=case_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"{case_dir.name}: tui-acc report failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def check_case(tools_python: Path, work: Path, name: str, code: str, config: str | None) -> str:
    case_dir = work / name
    case_dir.mkdir()
    for side in ("golden", "test"):
        run_side(tools_python, case_dir, side, code, config)
    result = report(case_dir)
    problems = []
    if result["first_failing_token"] != FAULT_TOKEN:
        problems.append(f"first failing token {result['first_failing_token']}, not {FAULT_TOKEN}")
    op = result["first_failing_op"]
    modules = name != "msprobe-L1"  # L1 records API calls only: no module to name
    if modules and (op is None or FAULT_MODULE not in op["golden"]):
        problems.append(f"first failing op {op and op['golden']}, not {FAULT_MODULE}")
    if result["errors"] or not result["pairs"]:
        problems.append(f"{len(result['errors'])} errors, {result['pairs']} pairs")
    if problems:
        raise SystemExit(f"{name}: {'; '.join(problems)}")
    named = op["golden"] if op else "(L1: no module records)"
    return (
        f"{name}: {result['golden']['format']} vs {result['test']['format']}, "
        f"{len(result['tokens'])} tokens, {result['pairs']} tensor pairs; "
        f"first failing token {result['first_failing_token']}, op {named}"
    )


def check_atb(venv: Path, found: dict[str, str]) -> list[str]:
    """The ATB commands need an NPU: their options are checked against the installed tools."""
    lines = []
    command = shlex.split(found["msit-atb"].strip())
    assert command[:3] == ["msit", "llm", "dump"], command
    help_text = subprocess.run(
        [str(venv / "bin" / "msit"), "llm", "dump", "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    options = [word for word in command if word.startswith("-")]
    unknown = [o for o in options if not re.search(rf"(^|[\s\[,]){re.escape(o)}[\s,\]]", help_text)]
    if unknown:
        raise SystemExit(f"msit llm dump does not know {unknown}")
    types = command[command.index("--type") + 1 : command.index("--type") + 3]
    if not all(re.search(rf"\b{t}\b", help_text) for t in types):
        raise SystemExit(f"msit llm dump --type {types}: not among its choices")
    lines.append(f"msit-atb: msit llm dump knows {' '.join(options)} (--type {' '.join(types)})")
    probe_config = json.loads(found["atb-probe-config"])
    site = next((venv / "lib").glob("python3*/site-packages/msprobe"))
    example = json.loads((site / "scripts" / "atb" / "config_example.json").read_text())
    if set(probe_config) != set(example):
        raise SystemExit(
            f"the ATB probe config's keys {sorted(probe_config)} are not msprobe's {sorted(example)}"
        )
    loader = (site / "scripts" / "atb" / "load_atb_probe.sh").read_text()
    if "--output=" not in loader or "--config=" not in loader or "ATB_DUMP_CONFIG" not in loader:
        raise SystemExit("load_atb_probe.sh takes no --output=/--config= here")
    lines.append(
        "atb-probe: the config has the keys of msprobe's config_example.json; load_atb_probe.sh takes them"
    )
    return lines


def versions(tools_python: Path) -> str:
    tools = ("mindstudio-probe", "msit", "torch", "transformers")
    code = f"import importlib.metadata as m; print(', '.join(f'{{d}} {{m.version(d)}}' for d in {tools!r}))"
    return subprocess.run([str(tools_python), "-c", code], capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, help="where the dumps go (default: a temporary folder, removed)")
    args = parser.parse_args()
    venv = Path(os.environ.get(VENV_VARIABLE, ""))
    tools_python = venv / "bin" / "python"
    if not os.environ.get(VENV_VARIABLE) or not tools_python.exists():
        print(
            f"set {VENV_VARIABLE} to a venv with msit and mindstudio-probe (see the docstring)",
            file=sys.stderr,
        )
        return 2
    found = blocks(DOC.read_text(encoding="utf-8"))
    config = found["msprobe-config"]
    cases = {
        "msprobe-L0": (found["msprobe"], config),
        "msprobe-mix": (found["msprobe"], config.replace('"level": "L0"', '"level": "mix"')),
        "msprobe-L1": (found["msprobe"], config.replace('"level": "L0"', '"level": "L1"')),
        "msit-torch": (found["msit-torch"], None),
    }
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        print(f"tools: {versions(tools_python)}")
        for name, (code, case_config) in cases.items():
            print(check_case(tools_python, work, name, code, case_config), flush=True)
        for line in check_atb(venv, found):
            print(line)
    print("every checked block of docs/dumping.md ran, and tui-acc opened its dumps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
