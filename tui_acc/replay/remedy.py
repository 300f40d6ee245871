"""What to dump so that a replay said impossible becomes possible: by what is missing and by the
dumper that wrote the dump (its format). Each switch is the tool's own, as its source names it:

- msit torch: ``msit_llm/dump/torch_dump/dump_config.py`` (``DumpConfig``: ``dump_weight``,
  ``tensor_part`` 0 inputs, 1 outputs, 2 both; ``dump_statistics_mode`` 1 is statistics only) and
  ``dump_hook.py`` (``_dump_module_weight`` writes ``weights/{module}.{parameter}.pth``); msit dumps a
  module's positional inputs only, never its keyword arguments (docs/formats.md §1.1).
- msit ATB: ``msit_llm/__main__.py`` (``msit llm dump``: ``-stp`` 0 intensors, 1 outtensors, 2 both;
  ``-time 3`` intensors before and outtensors after the run, the default); ATB passes weights as
  intensors, so they are dumped with the intensors; ``op_param.json`` is the probe's
  ``Probe::SaveParam``, written beside each operation's tensors (docs/formats.md §2.2).
- msprobe (PyTorch): ``msprobe/config.json`` (``task``: tensor or statistics; ``data_mode``: all,
  input, output); at level L0 and mix a module's record holds its ``parameters``
  (``pytorch/dump/api_dump/pt_hook_manager.py`` ``_get_params_dict``, any task but structure).
- msprobe's ATB probe: ``ATB_DUMP_CONFIG``'s ``task`` (tensor, statistics, all); it dumps every
  intensor (``ccsrc/atb_probe/atb_probe.cpp``, as redump/plan.py cites it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui_acc.dumps.model import Format

_WEIGHTS: dict[Format, str] = {
    "msit-torch": "msit: DumpConfig(..., dump_weight=True) also writes weights/{module}.{parameter}.pth",
    "msprobe": "msprobe: task tensor at level L0 or mix records each module's parameters "
    "(parameters.weight); at L1 a call such as Functional.linear gets its weight as an argument",
    "msit-atb": "msit llm dump -stp 2 (intensors and outtensors, the default): ATB passes weights as "
    "intensors",
    "msprobe-atb": "msprobe's ATB probe, task tensor or all: it dumps every intensor, weights included",
}
_INPUTS: dict[Format, str] = {
    "msit-torch": "msit: DumpConfig(tensor_part=2) dumps inputs and outputs (1 is outputs only); msit never "
    "dumps keyword arguments: msprobe at level L0 records them",
    "msprobe": 'msprobe: data_mode ["all"] in the config\'s tensor section (["output"] drops the inputs)',
    "msit-atb": "msit llm dump -stp 2 -time 3 (intensors before the run, outtensors after: the defaults)",
    "msprobe-atb": "msprobe's ATB probe, task tensor or all: it dumps every intensor",
}
_OUTPUTS: dict[Format, str] = {
    "msit-torch": "msit: DumpConfig(tensor_part=2) (or 1: outputs only)",
    "msprobe": 'msprobe: data_mode ["all"] (or ["output"]) in the config\'s tensor section',
    "msit-atb": "msit llm dump -stp 2 (or 1: outtensors only)",
    "msprobe-atb": "msprobe's ATB probe, task tensor or all",
}
_TENSORS: dict[Format, str] = {
    "msit-stats": "msit: DumpConfig(dump_statistics_mode=0 or 2) writes the tensors (1 writes statistics "
    "only)",
    "msprobe": 'msprobe: task "tensor" (task "statistics" records statistics only)',
    "msit-atb": "msit llm dump --type tensor, without -sd (which saves tensor descriptions only)",
    "msprobe-atb": 'msprobe\'s ATB probe: task "tensor" or "all" in ATB_DUMP_CONFIG',
}
_PARAMETERS = (
    "the operation's op_param.json holds it: msit llm dump and msprobe's ATB probe write one beside each "
    "operation's tensors; re-dump, or copy the whole dump folder"
)


def remedy(dump_format: Format, reason: str) -> str | None:
    """How to dump what ``reason`` (a ReplayImpossible's, or run.py's) says is missing, for a dump
    of ``dump_format`` (``DumpIndex.format``); None where no dump switch helps (a type without a
    reference says its own remedy; a shape mismatch or a random operator has none)."""
    if reason.startswith("weights not dumped"):
        return _WEIGHTS.get(dump_format)
    if "statistics-only" in reason:
        return _TENSORS.get(dump_format)
    if reason.startswith("inputs missing"):
        return _INPUTS.get(dump_format)
    if reason.startswith("output not dumped"):
        return _OUTPUTS.get(dump_format)
    if reason.startswith("type unknown") and "op_param.json" in reason:
        return _PARAMETERS
    return None
