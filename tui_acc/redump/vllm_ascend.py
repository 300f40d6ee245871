"""vllm-ascend re-dumps: msprobe's ``dump_config`` in ``--additional-config`` (docs/formats.md §3.5, §3.7)."""

from __future__ import annotations

import json
import re
import shlex

from tui_acc.redump.selection import RedumpError, Selection, msprobe_level, msprobe_module
from tui_acc.redump.settings import SideSettings


def vllm_ascend_argv(
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
    eager = runs_eagerly(settings.exec or "")
    level = msprobe_level(selection.nodes)
    if eager:
        section: dict[str, object] = {
            "scope": [],
            "list": [msprobe_module(name) for name in selection.nodes],
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
            "tensor": {"list": list(dict.fromkeys(graph_keyword(name) for name in selection.nodes))},
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
    return with_additional_config(exec_argv, config)


def runs_eagerly(command: str) -> bool:
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


def graph_keyword(name: str) -> str:
    """What AclGraphDumper's ``list`` matches a node by: a module's dotted path (its submodules too),
    an API without its call counter (``Aten.mm.43.forward`` -> ``Aten.mm``: every call of it)."""
    module = re.match(r"^Module\.(.+)\.[^.]+\.forward(\.\d+)?$", name)
    if module:
        return module.group(1)
    return re.sub(r"\.\d+\.(forward|backward)$", "", name)


def with_additional_config(argv: list[str], dump_config: dict[str, object]) -> list[str]:
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
