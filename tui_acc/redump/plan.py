"""Commands for the common dumpers, filled from what the user selected.

The dumpers' switches are those docs/formats.md describes: msit torch §1.4, msit ATB §2.1, msprobe's
ATB probe §2.6, msprobe §3.1, serving engines §3.5, msprobe's graph mode §3.7, SGLang's dumper §5.1.

Placeholders in a template: ``{token}`` the token as tui-acc numbers it, ``{tokens}`` the tokens
when there are several (``0-7``, ``1,4``; empty: every token; ``tui-acc hunt`` asks for them),
``{step}`` the execution count the dumper sees for it (ATB ``-er``; MindIE's warm-up shifts it),
``{ids}`` ATB op-id chains (``3_1,5``), ``{layers}`` the selected node names, ``{modules}`` msit
``layer_name``-style globs of them (their subtrees; the names alone when only they are wanted),
``{tensors}`` ``all`` or ``outputs``, ``{out}`` the new dump folder, ``{exec}`` the user's inference
command. Every value is also in the environment as ``TUI_ACC_TOKEN``, ``TUI_ACC_TOKENS``,
``TUI_ACC_STEP``, ``TUI_ACC_IDS``, ``TUI_ACC_LAYERS``, ``TUI_ACC_MODULES``, ``TUI_ACC_TENSORS``,
``TUI_ACC_DUMP_DIR`` and ``TUI_ACC_EXEC``.

Values come from dump contents (node names), so they are only ever placed as whole argv items,
environment values or JSON strings, never into a shell string: a shell template gets them from
the environment, and a ``{placeholder}`` in one is refused.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tui_acc.dumps.msprobe.passes import is_module
from tui_acc.errors import TuiAccError
from tui_acc.redump.settings import SideSettings
from tui_acc.redump.sglang import sglang_dumper_env, sglang_msprobe_config

PLACEHOLDERS = ("token", "tokens", "step", "ids", "layers", "modules", "tensors", "out", "exec")

# What a node name may contain to be handed to a dumper (anything else is refused, not escaped).
# (never a leading "-": in an argv item it would read as an option of the dumper)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_.\-/]*$")
_ATB_PART = re.compile(r"^(\d+)_[A-Za-z0-9]")


class RedumpError(TuiAccError, ValueError):
    """A re-dump that cannot be built: the message says what to change."""


@dataclass(frozen=True)
class Selection:
    """What to re-dump: one token of one side, and optionally a few nodes (their subtrees)."""

    side: str  # "golden" or "test"
    token: int
    step: int  # the execution count the dumper numbers that token by
    nodes: tuple[str, ...] = ()  # that side's node names; empty: every node
    atb: bool = False  # the nodes are ATB operations ("3_LlamaLayer/1_Attention")
    # tui-acc hunt's narrower and wider asks: several tokens (every one when ``every_token``), the
    # nodes themselves without their subtrees, their outputs only
    tokens: tuple[int, ...] = ()
    every_token: bool = False
    subtree: bool = True
    outputs_only: bool = False

    @property
    def token_list(self) -> str:
        """``{tokens}``: ``0-7``, ``1,4`` or ``3``; empty for every token."""
        return "" if self.every_token else spell_tokens(self.tokens or (self.token,))

    @property
    def step_range(self) -> tuple[int, int] | None:
        """The execution counts the tokens run at (first, last), None for every token."""
        if self.every_token:
            return None
        tokens = self.tokens or (self.token,)
        shift = self.step - self.token  # MindIE's warm-up: the same offset for every token
        return min(tokens) + shift, max(tokens) + shift

    @property
    def one_token(self) -> bool:
        """Whether exactly one token is selected."""
        return not self.every_token and len(self.tokens or (self.token,)) == 1


@dataclass(frozen=True)
class RedumpPlan:
    """Exactly what will run: argv (no shell unless ``shell``), extra environment, files written first."""

    selection: Selection
    dumper: str
    argv: tuple[str, ...]
    env: dict[str, str]
    files: dict[Path, str]
    folder: Path  # the new folder holding everything of this re-dump
    out: Path  # the dumper's output folder inside it
    log: Path
    shell: bool = False
    notes: tuple[str, ...] = field(default=())

    def command_line(self) -> str:
        """The command as a user would type it (for the confirm dialog and ``--redump-command``)."""
        return self.argv[2] if self.shell else shlex.join(self.argv)

    def describe(self) -> str:
        """The whole plan as a shell script a user could read and run: comment lines (side, tokens, dumper,
        notes), its ``export`` lines, the files it writes, then the command."""
        chosen = self.selection
        tokens = "every token" if chosen.every_token else f"token {chosen.token_list}"
        lines = [f"# re-dump {chosen.side}, {tokens}, dumper {self.dumper}"]
        lines += [f"# {note}" for note in self.notes]
        # the dumper's own variables, and ours where the command reads them (empty ones say nothing)
        ours = self.dumper in ("torch", "msprobe-torch") or self.shell
        shown = {k: v for k, v in self.env.items() if v and (ours or not k.startswith("TUI_ACC_"))}
        lines += [f"export {key}={shlex.quote(value)}" for key, value in shown.items()]
        for path, text in self.files.items():
            lines.append(f"# {path}:")
            lines += [f"#   {line}" for line in text.splitlines()]
        lines.append(self.command_line())
        return "\n".join(lines)


def new_folder(base: Path, selection: Selection, now: datetime, protected: list[Path]) -> Path:
    """A folder name that does not exist yet under ``base``, never inside the dumps being viewed."""
    base = base.expanduser().resolve()
    for root in protected:
        root = root.resolve()
        if base == root or root in base.parents:
            raise RedumpError(
                f"{base}: re-dumps are never written inside the dumps being compared ({root}); "
                "set [redump] out_dir in tui-acc.toml or start tui-acc from another folder"
            )
    return unused_name(base, f"redump-{selection.side}-token{selection.token}-{now:%Y%m%d-%H%M%S}")


def unused_name(base: Path, stem: str) -> Path:
    """``base/stem``, or ``stem-2``, ``stem-3`` ... : the first that does not exist yet."""
    candidate, n = base / stem, 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stem}-{n}"
    return candidate


def build_plan(selection: Selection, settings: SideSettings, folder: Path) -> RedumpPlan:
    """The command for ``selection`` with ``settings``; writes nothing (``files`` are written on run)."""
    for name in selection.nodes:
        if not _SAFE_NAME.match(name):
            raise RedumpError(f"node {name!r}: its name has characters tui-acc does not pass to a dumper")
    if settings.dumper != "custom" and not settings.exec:
        raise RedumpError(
            f"no inference command for the {selection.side} side: set redump.exec in tui-acc.toml"
        )
    if settings.shell and settings.dumper == "msit-atb":
        raise RedumpError("shell = true does not apply to msit-atb: msit runs --exec itself")
    out = folder / "dump"
    values = _values(selection, settings, out)
    env = {f"TUI_ACC_{key.upper()}": value for key, value in values.items() if key != "out"}
    env["TUI_ACC_DUMP_DIR"] = values["out"]
    files: dict[Path, str] = {}
    notes: list[str] = []
    exec_argv = _exec_argv(settings)
    dumper = settings.dumper
    if dumper == "msit-atb":
        argv = ["msit", "llm", "dump", "--exec", values["exec"], "--type", "model", "tensor"]
        if (steps := selection.step_range) is not None:
            argv += ["-er", f"{steps[0]},{steps[1]}"]
        if values["ids"]:
            argv += ["-ids", values["ids"]]
        # -stp: 0 inputs, 1 outputs, 2 both (docs/formats.md §2.1)
        argv += ["-child", str(selection.subtree), "-stp", "1" if selection.outputs_only else "2"]
        argv += ["-o", values["out"]]
        if selection.nodes and not values["ids"]:
            notes.append("the selected nodes have no ATB op ids: every operation of the token is dumped")
    elif dumper == "msprobe-atb":
        # msprobe's ATB probe reads the file ATB_DUMP_CONFIG names and writes below ATB_OUTPUT_DIR
        # (ccsrc/atb_probe/atb_probe.cpp:1190, 247); its keys are those of SetConfigParameters (:1149-1158)
        config = folder / "atb_dump_config.json"
        files[config] = json.dumps(
            {
                "task": "tensor",
                "dump_enable": True,
                "exec_range": _exec_range(selection),
                "ids": values["ids"],
                "op_name": "",
                "save_child": selection.subtree,
                "device": "",
                # 0: every file holds its tensor (1 would write data= aliases msprobe compare cannot read)
                "filter_level": 0,
            },
            indent=2,
        )
        env["ATB_DUMP_CONFIG"] = str(config)
        env["ATB_OUTPUT_DIR"] = values["out"]
        if selection.outputs_only:
            notes.append("msprobe's ATB probe dumps inputs and outputs: this step dumps more than it needs")
        notes.append(
            "the probe must be loaded: source msprobe/scripts/atb/load_atb_probe.sh (it sets LD_PRELOAD; "
            "tui-acc sets ATB_DUMP_CONFIG and ATB_OUTPUT_DIR, which the script would overwrite)"
        )
        argv = exec_argv
    elif dumper == "msprobe-torch":
        config = folder / "msprobe_config.json"
        level = _msprobe_level(selection.nodes)
        # level debug dumps what the script saves (debugger.save): there is no list to narrow
        names = [] if level == "debug" else [_msprobe_module(name) for name in selection.nodes]
        files[config] = json.dumps(
            {
                "task": "tensor",
                "dump_path": values["out"],
                "rank": [],
                "step": [],
                "level": level,
                "async_dump": False,
                "tensor": {
                    "scope": [],
                    "list": names,
                    "data_mode": ["output" if selection.outputs_only else "all"],
                    "file_format": "npy",
                },
            },
            indent=2,
        )
        env["TUI_ACC_MSPROBE_CONFIG"] = str(config)
        notes.append(
            "your script: PrecisionDebugger(config_path=os.environ['TUI_ACC_MSPROBE_CONFIG']) and "
            "debugger.start(model, token_range=[first, last]) from TUI_ACC_TOKENS (empty: every token)"
        )
        if not selection.subtree and level != "debug":
            notes.append("msprobe's list matches by substring: each module's submodules are dumped too")
        argv = exec_argv
    elif dumper == "vllm-ascend":
        argv = _vllm_ascend(selection, settings, values, exec_argv, env, notes)
    elif dumper == "sglang":
        config = folder / "msprobe_config.json"
        files[config] = sglang_msprobe_config(selection.step, selection.nodes, values["out"], notes)
        env["TUI_ACC_MSPROBE_CONFIG"] = str(config)
        argv = exec_argv if settings.shell else [*exec_argv, "--msprobe-dump-config", str(config)]
    elif dumper == "sglang-dumper":
        env.update(sglang_dumper_env(selection.step, selection.nodes, values["out"], notes))
        argv = exec_argv
    elif dumper == "torch":
        argv = exec_argv
        notes.append(
            "your script dumps tokens TUI_ACC_TOKENS (empty: every one) of the modules TUI_ACC_MODULES, "
            "their TUI_ACC_TENSORS (all, or outputs), into TUI_ACC_DUMP_DIR "
            "(tui_acc.demo.capture.MsitTorchCapture.from_env does it; msit: DumpConfig(dump_path=..., "
            "token_range=[...], layer_name=..., tensor_part=1 for outputs))"
        )
    else:
        argv = _custom_argv(settings, values)
        narrowing = ("{layers}", "{modules}", "{ids}")
        command = settings.command if isinstance(settings.command, str) else " ".join(settings.command or ())
        if selection.nodes and not any(p in command for p in narrowing):
            notes.append(
                "the command passes no {layers}, {modules} or {ids}: unless the script reads "
                "TUI_ACC_MODULES, it dumps every node of the tokens asked for"
            )
    shell = settings.shell
    if shell:
        argv = ["/bin/sh", "-c", argv[0] if dumper == "custom" else settings.exec or ""]
    return RedumpPlan(
        selection, dumper, tuple(argv), env, files, folder, out, folder / "redump.log", shell, tuple(notes)
    )


def _values(selection: Selection, settings: SideSettings, out: Path) -> dict[str, str]:
    ids = [chain for name in selection.nodes if (chain := atb_id_chain(name))] if selection.atb else []
    steps = selection.step_range
    glob = "*" if selection.subtree else ""
    return {
        "token": str(selection.token) if selection.one_token else "",
        "tokens": selection.token_list,
        "step": "" if steps is None else str(steps[0]) if steps[0] == steps[1] else f"{steps[0]}-{steps[1]}",
        "ids": ",".join(ids),
        "layers": ",".join(selection.nodes),
        "modules": ",".join(f"{name}{glob}" for name in selection.nodes),
        "tensors": "outputs" if selection.outputs_only else "all",
        "out": str(out),
        "exec": settings.exec or "",
    }


def _exec_range(selection: Selection) -> str:
    """An ATB probe's ``exec_range``: ``first,last`` execution count ("" for every one)."""
    steps = selection.step_range
    return "" if steps is None else f"{steps[0]},{steps[1]}"


def spell_tokens(tokens: Sequence[int]) -> str:
    """``0-7`` for a run of tokens, ``1,4,6`` otherwise (``TUI_ACC_TOKENS``)."""
    ordered = sorted(set(tokens))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(t) for t in ordered)


def parse_tokens(text: str) -> list[int] | None:
    """``TUI_ACC_TOKENS`` read back: ``0-7``, ``1,4``, ``0-2,5`` -> the tokens; empty -> None (every
    token). For a dumper script honouring the contract.

    Raises:
        ValueError: the text is not such a list.
    """
    if not text.strip():
        return None
    tokens: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"TUI_ACC_TOKENS={text!r}: expected tokens such as 3, 0-7 or 1,4")
        tokens += range(int(first), int(last) + 1) if dash else [int(first)]
    return tokens


def atb_id_chain(name: str) -> str | None:
    """``3_LlamaLayer/1_Attention/0_LinearOperation`` -> ``3_1_0`` (msit's ``-ids``, docs/formats.md §2.2)."""
    parts = [_ATB_PART.match(part) for part in name.split("/")]
    if not parts or any(p is None for p in parts):
        return None
    return "_".join(p.group(1) for p in parts if p is not None)


def _msprobe_level(names: Sequence[str]) -> str:
    """L0 for modules, L1 for API calls (``Functional.linear.43.forward``), mix for both; debug for
    single-point saves (``mlp1.0.debug``).

    msprobe's ``list`` matches by substring, so an API call's full name picks that one call.
    """
    if names and all(name.endswith(".debug") for name in names):
        return "debug"
    apis = [is_module(name) for name in names]
    return "L0" if all(apis) else "L1" if not any(apis) else "mix"


def _msprobe_module(name: str) -> str:
    """``Module.model.layers.2.mlp.MLP.forward.3`` -> ``Module.model.layers.2.mlp.MLP.forward``."""
    return re.sub(r"\.\d+$", "", name)


def _vllm_ascend(
    selection: Selection,
    settings: SideSettings,
    values: dict[str, str],
    exec_argv: list[str],
    env: dict[str, str],
    notes: list[str],
) -> list[str]:
    """``vllm serve ... --additional-config '{"dump_config": {...}}'``: one argv item of JSON.

    vllm-ascend hands ``dump_config`` to msprobe's PrecisionDebugger when the run is eager
    (``--enforce-eager``: cudagraph mode NONE) and to its AclGraphDumper otherwise
    (vllm_ascend/worker/model_runner_v1.py:347-365; ascend_config.py:462-478 writes the dict to a file).
    """
    eager = _runs_eagerly(settings.exec or "")
    level = _msprobe_level(selection.nodes)
    if eager:
        section: dict[str, object] = {
            "scope": [],
            "list": [_msprobe_module(name) for name in selection.nodes],
            "data_mode": ["all"],
        }
        if settings.request_id:  # msprobe >= 26.2.0: that request's rows of every tensor (dim 0)
            section["request_id"] = settings.request_id
        config: dict[str, object] = {
            "task": "tensor",
            "dump_path": values["out"],
            "rank": [],
            "step": [] if (steps := selection.step_range) is None else list(range(steps[0], steps[1] + 1)),
            "level": level,
            "async_dump": False,
            "tensor": section,
        }
    else:
        # AclGraphDumper: task, dump_path, rank, level, list only; no step, no request_id
        # (msprobe aclgraph_dumper.py:212-234); its list matches names by substring
        config = {
            "task": "tensor",
            "dump_path": values["out"],
            "rank": [],
            "level": level,
            "tensor": {"list": list(dict.fromkeys(_graph_keyword(name) for name in selection.nodes))},
        }
        notes.append(
            "graph mode (vllm-ascend's default): msprobe's AclGraphDumper dumps every replay (it has no "
            f"step option), one step folder each; token {selection.token} is step{selection.step} "
            "when the runs match"
        )
        if settings.request_id:
            notes.append("request_id applies to eager runs only (add --enforce-eager): graph mode dumps all")
    additional = json.dumps({"dump_config": config}, separators=(",", ":"))
    env["TUI_ACC_ADDITIONAL_CONFIG"] = additional
    if settings.shell:
        notes.append('your command passes --additional-config "$TUI_ACC_ADDITIONAL_CONFIG" to vllm')
        return exec_argv
    return _with_additional_config(exec_argv, config)


def _runs_eagerly(command: str) -> bool:
    """Whether a vllm command runs without graphs: ``--enforce-eager`` (``=true`` too), or a
    compilation config whose cudagraph mode is NONE. Looked for in the words of the command, also
    when it is a shell string."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for position, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in ("--enforce-eager", "-enforce-eager") and value.lower() not in ("false", "0"):
            return True
        config = value if flag in ("--compilation-config", "-O") else ""
        if not config and word in ("--compilation-config", "-O") and position + 1 < len(words):
            config = words[position + 1]
        if re.search(r'"?cudagraph_mode"?\s*:\s*"?NONE"?', config):
            return True
    return False


def _graph_keyword(name: str) -> str:
    """What AclGraphDumper's ``list`` matches a node by: a module's dotted path (its submodules too),
    an API without its call counter (``Aten.mm.43.forward`` -> ``Aten.mm``: every call of it)."""
    module = re.match(r"^Module\.(.+)\.[^.]+\.forward(\.\d+)?$", name)
    if module:
        return module.group(1)
    return re.sub(r"\.\d+\.(forward|backward)$", "", name)


def _with_additional_config(argv: list[str], dump_config: dict[str, object]) -> list[str]:
    """``argv`` with ``dump_config`` in its ``--additional-config`` JSON (added when absent)."""
    flag = "--additional-config"
    for at, item in enumerate(argv):
        inline = item.startswith(flag + "=")
        if item != flag and not inline:
            continue
        if not inline and at + 1 >= len(argv):
            raise RedumpError(f"redump exec: {flag} has no value")
        text = item[len(flag) + 1 :] if inline else argv[at + 1]
        try:
            existing = json.loads(text)
        except ValueError as exc:
            raise RedumpError(f"redump exec: {flag} {text!r} is not JSON ({exc})") from exc
        if not isinstance(existing, dict):
            raise RedumpError(f"redump exec: {flag} must be a JSON object")
        existing.pop("dump_config_path", None)  # vllm-ascend refuses both (ascend_config.py:465-468)
        merged = json.dumps({**existing, "dump_config": dump_config}, separators=(",", ":"))
        rest = argv[at + 1 :] if inline else argv[at + 2 :]
        return [*argv[:at], flag, merged, *rest]
    return [*argv, flag, json.dumps({"dump_config": dump_config}, separators=(",", ":"))]


def _exec_argv(settings: SideSettings) -> list[str]:
    if settings.shell or not settings.exec:
        return [settings.exec or ""]
    try:
        return shlex.split(settings.exec)
    except ValueError as exc:
        raise RedumpError(f"redump exec {settings.exec!r}: {exc}") from exc


def _custom_argv(settings: SideSettings, values: dict[str, str]) -> list[str]:
    command = settings.command
    if isinstance(command, str):  # a shell string: its values come from the environment only
        found = [p for p in PLACEHOLDERS if "{" + p + "}" in command]
        if found:
            raise RedumpError(
                f"redump command {command!r}: a shell command gets its values from the environment; "
                f'write "$TUI_ACC_{found[0].upper()}" instead of {{{found[0]}}}'
            )
        return [command]
    if not command:
        raise RedumpError('dumper = "custom" needs a command')
    argv = []
    for item in command:
        try:
            argv.append(item.format_map(_Strict(values)))
        except (KeyError, ValueError, IndexError) as exc:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            problem = f"redump command item {item!r}: unknown placeholder {exc}; known: {known}"
            raise RedumpError(problem) from exc
    return argv


class _Strict(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)
