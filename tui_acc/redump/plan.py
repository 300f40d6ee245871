"""Commands for the common dumpers, filled from what the user selected (formats.md §1.4, §2.1, §2.6, §3).

Placeholders in a template: ``{token}`` the token as tui-acc numbers it, ``{step}`` the execution
count the dumper sees for it (ATB ``-er``; MindIE's warm-up shifts it), ``{ids}`` ATB op-id chains
(``3_1,5``), ``{layers}`` the selected node names, ``{modules}`` msit ``layer_name``-style globs of
them, ``{out}`` the new dump folder, ``{exec}`` the user's inference command. Every value is also in
the environment as ``TUI_ACC_TOKEN``, ``TUI_ACC_STEP``, ``TUI_ACC_IDS``, ``TUI_ACC_LAYERS``,
``TUI_ACC_MODULES``, ``TUI_ACC_DUMP_DIR`` and ``TUI_ACC_EXEC``.

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

from tui_acc.dumps.msprobe_passes import is_module
from tui_acc.redump.settings import SideSettings

DUMPERS = ("msit-atb", "msprobe-atb", "msprobe-torch", "torch", "custom")
PLACEHOLDERS = ("token", "step", "ids", "layers", "modules", "out", "exec")

# What a node name may contain to be handed to a dumper (anything else is refused, not escaped).
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_ATB_PART = re.compile(r"^(\d+)_[A-Za-z0-9]")


class RedumpError(ValueError):
    """A re-dump that cannot be built: the message says what to change."""


@dataclass(frozen=True)
class Selection:
    """What to re-dump: one token of one side, and optionally a few nodes (their subtrees)."""

    side: str  # "golden" or "test"
    token: int
    step: int  # the execution count the dumper numbers that token by
    nodes: tuple[str, ...] = ()  # that side's node names; empty: every node
    atb: bool = False  # the nodes are ATB operations ("3_LlamaLayer/1_Attention")


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
        lines = [f"# re-dump {self.selection.side}, token {self.selection.token}, dumper {self.dumper}"]
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
    stem = f"tui-acc-redump-{selection.side}-token{selection.token}-{now:%Y%m%d-%H%M%S}"
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
        argv += ["-er", f"{selection.step},{selection.step}"]
        if values["ids"]:
            argv += ["-ids", values["ids"]]
        argv += ["-child", "True", "-stp", "2", "-o", values["out"]]
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
                "exec_range": f"{selection.step},{selection.step}",
                "ids": values["ids"],
                "op_name": "",
                "save_child": True,
                "device": "",
                # 0: every file holds its tensor (1 would write data= aliases msprobe compare cannot read)
                "filter_level": 0,
            },
            indent=2,
        )
        env["ATB_DUMP_CONFIG"] = str(config)
        env["ATB_OUTPUT_DIR"] = values["out"]
        notes.append(
            "the probe must be loaded: source msprobe/scripts/atb/load_atb_probe.sh (it sets LD_PRELOAD; "
            "tui-acc sets ATB_DUMP_CONFIG and ATB_OUTPUT_DIR, which the script would overwrite)"
        )
        argv = exec_argv
    elif dumper == "msprobe-torch":
        config = folder / "msprobe_config.json"
        names = [_msprobe_module(name) for name in selection.nodes]
        files[config] = json.dumps(
            {
                "task": "tensor",
                "dump_path": values["out"],
                "rank": [],
                "step": [],
                "level": _msprobe_level(selection.nodes),
                "async_dump": False,
                "tensor": {"scope": [], "list": names, "data_mode": ["all"], "file_format": "npy"},
            },
            indent=2,
        )
        env["TUI_ACC_MSPROBE_CONFIG"] = str(config)
        notes.append(
            "your script: PrecisionDebugger(config_path=os.environ['TUI_ACC_MSPROBE_CONFIG']) and "
            "debugger.start(model, token_range=[t, t]) with t = int(os.environ['TUI_ACC_TOKEN'])"
        )
        argv = exec_argv
    elif dumper == "torch":
        argv = exec_argv
        notes.append(
            "your script dumps token TUI_ACC_TOKEN of the modules TUI_ACC_MODULES into TUI_ACC_DUMP_DIR "
            "(tui_acc.demo.capture.MsitTorchCapture.from_env does it; msit: DumpConfig(dump_path=..., "
            "token_range=[...], layer_name=...))"
        )
    else:
        argv = _custom_argv(settings, values)
    shell = settings.shell
    if shell:
        argv = ["/bin/sh", "-c", argv[0] if dumper == "custom" else settings.exec or ""]
    return RedumpPlan(
        selection, dumper, tuple(argv), env, files, folder, out, folder / "redump.log", shell, tuple(notes)
    )


def _values(selection: Selection, settings: SideSettings, out: Path) -> dict[str, str]:
    ids = [chain for name in selection.nodes if (chain := atb_id_chain(name))] if selection.atb else []
    return {
        "token": str(selection.token),
        "step": str(selection.step),
        "ids": ",".join(ids),
        "layers": ",".join(selection.nodes),
        "modules": ",".join(f"{name}*" for name in selection.nodes),
        "out": str(out),
        "exec": settings.exec or "",
    }


def atb_id_chain(name: str) -> str | None:
    """``3_LlamaLayer/1_Attention/0_LinearOperation`` -> ``3_1_0`` (msit's ``-ids``, formats.md §2.2)."""
    parts = [_ATB_PART.match(part) for part in name.split("/")]
    if not parts or any(p is None for p in parts):
        return None
    return "_".join(p.group(1) for p in parts if p is not None)


def _msprobe_level(names: Sequence[str]) -> str:
    """L0 for modules, L1 for API calls (``Functional.linear.43.forward``), mix for both.

    msprobe's ``list`` matches by substring, so an API call's full name picks that one call.
    """
    apis = [is_module(name) for name in names]
    return "L0" if all(apis) else "L1" if not any(apis) else "mix"


def _msprobe_module(name: str) -> str:
    """``Module.model.layers.2.mlp.MLP.forward.3`` -> ``Module.model.layers.2.mlp.MLP.forward``."""
    return re.sub(r"\.\d+$", "", name)


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
