"""Re-dumps of an SGLang server: msprobe through ``--msprobe-dump-config``, or SGLang's own dumper.

Facts from sglang 0.5.23 (python/sglang/srt/...):

* ``--msprobe-dump-config FILE`` (arg_groups/fields/observability.py:238) makes every model runner
  build ``PrecisionDebugger(config_path=FILE)`` (model_runner_components/misc_utils.py:52-66),
  ``start()`` it before each forward pass and ``stop()``/``step()`` after it
  (model_executor/model_runner.py:1826-1829, 1903-1905): msprobe's step N is the server's forward
  pass N, counted from 0. SGLang then turns CUDA graphs and the warm-up request off
  (arg_groups/serving_hook.py:566-575).
* The dumper reads ``DUMPER_*`` variables (debug_utils/dumper.py:137-174): ``DUMPER_ENABLE``,
  ``DUMPER_DIR``, ``DUMPER_EXP_NAME``, ``DUMPER_NON_INTRUSIVE_MODE`` (``core``: input_ids and the
  like; ``all``: every module's inputs and outputs, 745-756) and ``DUMPER_FILTER``, a Python
  expression over the file's tags (name, recompute_status, the dump() call's kwargs, layer_id;
  490-500, evaluated without builtins, 1312-1320). The step is not among the tags: from the
  environment, the dumper cannot be narrowed to one step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tui_acc.dumps.msprobe.passes import is_module

ROOT = "root"  # tui_acc.dumps.sglang.dump's tree root: the whole model
NON_INTRUSIVE = "non_intrusive__"
# Kept in every narrowed dump: what tui-acc aligns steps by (tui_acc.dumps.sglang.align)
CORE = ("input_ids", "positions")
# An msprobe API record: Functional.linear.43.forward
_API_RECORD = re.compile(r"\.\d+\.(forward|backward)$")
# An explicit dump inside a layer, as tui_acc.dumps.sglang.dump names its node: {layer module}.{name}
_IN_LAYER = re.compile(r"^(?:.+\.)?layers\.(?P<layer>\d+)\.(?P<name>[^.]+)$")


def sglang_msprobe_config(step: int, nodes: Sequence[str], out: str, notes: list[str]) -> str:
    """msprobe's config for ``--msprobe-dump-config``: the one forward pass, the selected modules."""
    names, level = msprobe_list(nodes)
    notes.append(
        "SGLang numbers msprobe's steps by forward pass from server start (CUDA graphs and warm-up off): "
        f"send the same requests in the same order; step {step} is dumped"
    )
    return json.dumps(
        {
            "task": "tensor",
            "dump_path": out,
            "rank": [],
            "step": [step],
            "level": level,
            "async_dump": False,
            "tensor": {"scope": [], "list": names, "data_mode": ["all"], "file_format": "npy"},
        },
        indent=2,
    )


def msprobe_list(nodes: Sequence[str]) -> tuple[list[str], str]:
    """msprobe's ``list`` and ``level`` for the selected nodes.

    msprobe keeps a record when a ``list`` entry is a substring of its name (msprobe
    core/dump/data_dump/scope.py:95-101). Nodes of an msprobe dump are its records: a module call
    without its counter (L0), an API call as it is (L1). Nodes of SGLang's dumper are module paths:
    ``.model.layers.1.`` picks ``Module.model.layers.1.LlamaDecoderLayer.forward.0`` and what is
    inside it, not ``model.layers.10``.
    """
    chosen = [node for node in nodes if node != ROOT]
    records = [node for node in chosen if is_module(node) or _API_RECORD.search(node)]
    if len(records) < len(chosen):  # SGLang dumper names: modules, at L0
        return [f".{node.split('#', 1)[0]}." for node in chosen if node not in records] + records, "L0"
    modules = [is_module(node) for node in chosen]
    level = "L0" if all(modules) else "L1" if not any(modules) else "mix"
    return [re.sub(r"\.\d+$", "", node) if is_module(node) else node for node in chosen], level


def sglang_dumper_env(step: int, nodes: Sequence[str], out: str, notes: list[str]) -> dict[str, str]:
    """``DUMPER_*`` variables for SGLang's dumper: every step, only the selected nodes' names."""
    env = {
        "DUMPER_ENABLE": "1",
        "DUMPER_DIR": out,
        "DUMPER_EXP_NAME": "tui-acc",
        "DUMPER_NON_INTRUSIVE_MODE": "all",
    }
    chosen = [node for node in nodes if node != ROOT]
    if chosen and len(chosen) == len(nodes):
        env["DUMPER_FILTER"] = dumper_filter(chosen)
    notes.append(
        "SGLang's dumper cannot be narrowed to a step from its environment (its filter sees names, "
        f"not steps): every step is dumped; the one selected is step {step}"
    )
    return env


def dumper_filter(nodes: Sequence[str]) -> str:
    """A ``DUMPER_FILTER`` expression keeping the nodes' files (and the ids steps are aligned by).

    Node names were checked to hold only ``[A-Za-z0-9_.-/]``, so ``repr`` quotes them exactly.
    """
    clauses = [f"name in {CORE!r}"]
    for node in nodes:
        node = node.split("#", 1)[0]  # "input_ids#2": the same name, dumped again in the step
        clauses.append(f"name.startswith({NON_INTRUSIVE + node + '.'!r})")  # the module's subtree
        inside = _IN_LAYER.match(node)
        if inside is not None:
            clauses.append(f"(name == {inside['name']!r} and layer_id == {int(inside['layer'])})")
        else:
            clauses.append(f"name == {node!r}")
    return " or ".join(clauses)
