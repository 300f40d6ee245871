"""Commands for the common dumpers, filled from what the user selected.

The dumpers' switches are those docs/formats.md describes: msit torch §1.4, msit ATB §2.1, msprobe's
ATB probe §2.6, msprobe §3.1, serving engines §3.5, msprobe's graph mode §3.7, SGLang's dumper §5.1,
TorchAir §7.6.

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
import string
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tui_acc.redump.selection import RedumpError, Selection, atb_id_chain, msprobe_level, msprobe_module
from tui_acc.redump.settings import SideSettings
from tui_acc.redump.sglang import sglang_dumper_env, sglang_msprobe_config
from tui_acc.redump.torchair import CONFIG_VARIABLE, fx_dump_config, ge_dump_config
from tui_acc.redump.vllm_ascend import vllm_ascend_argv

PLACEHOLDERS = ("token", "tokens", "step", "ids", "layers", "modules", "tensors", "out", "exec")

# What a node name may contain to be handed to a dumper (anything else is refused, not escaped).
# (never a leading "-": in an argv item it would read as an option of the dumper)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_.\-/]*$")


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
        ours = self.dumper in ("torch", "msprobe-torch", "torchair-ge", "torchair-fx") or self.shell
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
        level = msprobe_level(selection.nodes)
        # level debug dumps what the script saves (debugger.save): there is no list to narrow
        names = [] if level == "debug" else [msprobe_module(name) for name in selection.nodes]
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
        argv = vllm_ascend_argv(selection, settings, values, exec_argv, env, notes)
    elif dumper == "sglang":
        config = folder / "msprobe_config.json"
        files[config] = sglang_msprobe_config(selection.step, selection.nodes, values["out"], notes)
        env["TUI_ACC_MSPROBE_CONFIG"] = str(config)
        argv = exec_argv if settings.shell else [*exec_argv, "--msprobe-dump-config", str(config)]
    elif dumper == "sglang-dumper":
        env.update(sglang_dumper_env(selection.step, selection.nodes, values["out"], notes))
        argv = exec_argv
    elif dumper in ("torchair-ge", "torchair-fx"):
        config = folder / "torchair_dump_config.json"
        if dumper == "torchair-ge":
            tokens = None if selection.every_token else selection.tokens or (selection.token,)
            nodes, outputs = selection.nodes, selection.outputs_only
            files[config] = ge_dump_config(selection.runs, tokens, nodes, outputs, values["out"], notes)
        else:
            files[config] = fx_dump_config(selection.nodes, values["out"], notes)
        env[CONFIG_VARIABLE] = str(config)
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
    known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    for item in command:
        try:
            fields = list(string.Formatter().parse(item))
        except ValueError as exc:  # a lone "{" or "}"
            raise RedumpError(f"redump command item {item!r}: {exc}; known placeholders: {known}") from exc
        for _, name, spec, conversion in fields:
            # a placeholder is a name alone: no attribute or index ({token.x}), no format spec
            # ({token:>999999999} would build a gigabyte argument), no conversion
            if name is not None and name not in PLACEHOLDERS:
                problem = f"unknown placeholder {name[:60]!r}"
                raise RedumpError(f"redump command item {item[:80]!r}: {problem}; known: {known}")
            if name is not None and (spec or conversion):
                problem = f"{{{name}}} takes no format spec or conversion"
                raise RedumpError(f"redump command item {item[:80]!r}: {problem}; known: {known}")
        argv.append(item.format_map(_Strict(values)))
    return argv


class _Strict(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)
