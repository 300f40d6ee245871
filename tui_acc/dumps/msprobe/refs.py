"""The tensors of msprobe's dump.json (and debug.json) records, as tensor references.

A tensor entry points at its file (``data_name``, task tensor) or holds its statistics (task
statistics: Max/Min/Mean/Norm; ``summary_mode`` md5 adds a CRC32 as ``md5``, xor writes a checksum
there instead of the statistics); task nan_check gives each record an ``is_nan`` flag. What a record
holds decides how it can be compared, and ``content_notes`` says so.

See docs/formats.md §3.3.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tui_acc.dumps.fs import folder_problem, names_a_file, not_utf8
from tui_acc.dumps.model import Problem, Role, Stats, TensorRef


def content_notes(
    rank_dir: Path, task: str, statistics_only: bool, builder: RefBuilder, data: dict[str, Any]
) -> list[str]:
    """What the user should know about how this dump's records can be compared."""
    notes = []
    if task == "nan_check":
        notes.append(
            f"{rank_dir}: msprobe task nan_check: each call says only whether it produced a NaN; "
            "a call is judged by that flag against the golden's"
        )
    elif statistics_only and builder.checksums and not builder.numbered:
        notes.append(
            f"{rank_dir}: checksums only (msprobe summary_mode xor): tensors are compared by equality, "
            "bit for bit; against a golden of another dtype or device every tensor differs"
        )
    elif statistics_only:
        what = "Max/Min/Mean/Norm" + (" and an md5 checksum (equal: a pass)" if builder.checksums else "")
        notes.append(f"msprobe task '{task}': statistics only ({what}), no tensor data")
    if builder.blank:
        notes.append(
            f"{rank_dir}: {builder.blank} tensors are recorded without statistics (NZ-format tensors "
            "on the NPU, or the task records none): they are not compared"
        )
    triton = sum(1 for name in data if name.startswith(TRITON))
    if triton:
        notes.append(
            f"{rank_dir}: {triton} Triton kernel calls: a kernel writes into its arguments, so it is "
            "judged by what fed it and by its arguments after the run"
        )
    return notes


# --- finding the data ---------------------------------------------------------------------------


TRITON = "Triton."
# what msprobe writes in a record's fields (null or absent: nothing there)
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "input_args": list,
    "input_kwargs": dict,
    "output": (list, dict),
    "parameters": dict,
}


class RefBuilder:
    """Tensor references of dump.json records, and what they could not hold (``problems``, for the
    index's problems once the records are built)."""

    def __init__(self, tensor_dir: Path, dump_json: Path, null_is_non_finite: bool = False) -> None:
        self.null_is_non_finite = null_is_non_finite
        self.tensor_dir = tensor_dir
        self.dump_json = dump_json
        self.problems: list[Problem] = []
        self.blank = 0  # tensors recorded with nothing to compare (NZ format, nan_check's entries)
        self.checksums = 0  # tensors with a checksum (summary_mode md5 or xor)
        self.numbered = 0  # tensors with a statistic (xor writes none)
        self._tensor_dir_problem: bool | None = None  # whether the tensor folder cannot be listed
        self.record = ""  # the record being read: what a problem with one of its values names

    def _tensor_dir_readable(self) -> bool:
        """Whether the tensor folder can be listed; one that cannot is named once, and its
        tensors are compared by their dump.json statistics."""
        if self._tensor_dir_problem is None:
            why = folder_problem(self.tensor_dir, "its tensors are compared by their dump.json statistics")
            if why and self.tensor_dir.exists():
                self.problems.append(Problem(str(self.tensor_dir), why))
            self._tensor_dir_problem = bool(why and self.tensor_dir.exists())
        return not self._tensor_dir_problem

    def refs(self, name: str, entry: Any) -> list[TensorRef]:
        """The tensors of the record ``name`` of dump.json: its inputs (``input.0``, ``input.{kwarg}``),
        outputs (``output.0``), parameters (``parameters.weight``) and nan_check's ``is_nan`` flag; a
        Triton kernel's arguments before the run are left out. An entry that is not as msprobe writes
        it adds a problem to ``problems`` and gives no tensor."""
        refs: list[TensorRef] = []
        self.record = name
        if not isinstance(entry, dict):
            self.problems.append(Problem(str(self.dump_json), f"{name}: entry is not an object; skipped"))
            return refs
        wrong = [
            f"{key} is {type(entry[key]).__name__}"
            for key, kinds in _FIELD_TYPES.items()
            if entry.get(key) is not None and not isinstance(entry[key], kinds)
        ]
        if wrong:
            message = f"{name}: {', '.join(wrong)}, not what msprobe writes (a list or object); skipped"
            self.problems.append(Problem(str(self.dump_json), message))
            return refs
        # A Triton kernel writes into its arguments and msprobe records them before and after the
        # run (output = the arguments): the "inputs" include buffers not yet written, so the kernel
        # is judged by what fed it, and its arguments after the run as outputs.
        if not name.startswith(TRITON):
            for index, arg in enumerate(entry.get("input_args") or []):
                self.collect(refs, f"input.{index}", "input", arg)
            for key, arg in (entry.get("input_kwargs") or {}).items():
                self.collect(refs, f"input.{key}", "input", arg)
        output = entry.get("output")
        if isinstance(output, dict) and "type" not in output:
            # an object of outputs ({"0": tensor}): msprobe's compare names each by its key, as it
            # names a list's items by their index (core/compare/utils.py op_item_parse), so that
            # {"0": t} on one side pairs with [t] on the other
            for key, arg in output.items():
                self.collect(refs, f"output.{key}", "output", arg)
        else:
            for index, arg in enumerate(output if isinstance(output, list) else [output] if output else []):
                self.collect(refs, f"output.{index}", "output", arg)
        for key, arg in (entry.get("parameters") or {}).items():
            self.collect(refs, f"parameters.{key}", "param", arg)
        flag = entry.get("is_nan")
        if isinstance(flag, bool):  # nan_check: the call's own verdict (null: the check failed)
            stats = Stats(None, None, None, None, is_nan=flag)
            refs.append(TensorRef(slot="is_nan", role="output", location=str(self.dump_json), stats=stats))
        return refs

    def collect(self, refs: list[TensorRef], slot: str, role: Role, arg: Any) -> None:
        """Append the tensors found in ``arg`` (a tensor entry, or lists and dicts of them)."""
        if isinstance(arg, list):
            for index, item in enumerate(arg):
                self.collect(refs, f"{slot}.{index}", role, item)
            return
        if not isinstance(arg, dict):
            # msprobe writes a value as an object ({"type": "int", "value": 5}), None as null
            if arg is not None:
                message = (
                    f"{self.record}: {slot}: a bare {type(arg).__name__}, not what msprobe writes; skipped"
                )
                self.problems.append(Problem(str(self.dump_json), message))
            return
        if arg.get("type") != "torch.Tensor":
            if "type" not in arg:  # a dict output such as a ModelOutput: {field: tensor}
                for key, item in arg.items():
                    self.collect(refs, f"{slot}.{key}", role, item)
            return
        shape = arg.get("shape")
        if shape is not None and not (isinstance(shape, list) and all(_is_int(d) for d in shape)):
            message = f"{self.record}: {slot}: shape {str(shape)[:80]} is not a list of integers; skipped"
            self.problems.append(Problem(str(self.dump_json), message))
            return
        data_name = arg.get("data_name")
        unnamable = _no_file_name(str(data_name)) if data_name else None
        if unnamable:  # the OS refuses such a name: no file holds it
            said = f"data_name {str(data_name)[:80]!r} {unnamable}; compared by its statistics"
            message = f"{self.record}: {slot}: {said}"
            self.problems.append(Problem(str(self.dump_json), message))
            data_name = None
        if data_name and self._tensor_dir_readable():
            path = self.tensor_dir / str(data_name)
            if names_a_file(path):  # a FIFO too: its reader names it
                declared = str(arg.get("dtype") or "").removeprefix("torch.")
                recorded = _extremes(arg)
                refs.append(TensorRef(slot, role, str(path), declared=declared, recorded=recorded))
                return
            self.problems.append(
                Problem(str(path), "listed in dump.json but missing; compared by its statistics")
            )
        stats = stats_of_entry(arg, self.null_is_non_finite)
        if not stats.comparable():
            self.blank += 1
            return
        self.checksums += stats.checksum is not None
        self.numbered += any(v is not None for v in (stats.max, stats.min, stats.mean, stats.norm))
        refs.append(TensorRef(slot=slot, role=role, location=str(self.dump_json), stats=stats))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def stats_of_entry(arg: dict[str, Any], null_is_non_finite: bool = False) -> Stats:
    """A dump.json tensor entry's statistics (None where msprobe wrote null or nothing).

    ``null_is_non_finite``: msprobe's graph mode writes null for a statistic that is not finite
    (ccsrc/aclgraph_dump/aclgraph_dump.cpp, build_stat_record_dict): it becomes inf, so a test
    that turns non-finite where the golden did not fails, and two non-finite statistics agree.
    """

    def number(key: str) -> float | None:
        value = arg.get(key)
        if value is None and null_is_non_finite and key in arg:
            return math.inf
        if isinstance(value, bool):
            return float(value)
        return float(value) if isinstance(value, (int, float)) else None

    shape = arg.get("shape")
    checksum = arg.get("md5")
    return Stats(
        number("Max"),
        number("Min"),
        number("Mean"),
        number("Norm"),
        str(arg.get("dtype", "")).removeprefix("torch.") or None,
        tuple(int(d) for d in shape) if isinstance(shape, list) else None,
        checksum=str(checksum) if isinstance(checksum, (str, int)) else None,
    )


def _no_file_name(name: str) -> str | None:
    """Why no file of dump_tensor_data/ can be named ``name`` (a NUL byte; a lone surrogate: none in
    what msprobe writes, and the escapes of bytes that are not UTF-8 (U+DC80-U+DCFF) name a file whose
    path no frame, JSON reader or terminal takes; a path: msprobe writes the file's own name, so
    ``../`` or ``/`` is a forged way out of the dump, not followed even under --follow-links), or
    None."""
    if "\x00" in name:
        return "holds a NUL byte"
    if "/" in name or name in (".", ".."):
        return "is a path, not the name of a file in dump_tensor_data/"
    if not_utf8(name):
        return "holds an unpaired surrogate (no UTF-8 file name has one)"
    return None


def _extremes(arg: dict[str, Any]) -> tuple[float, float] | None:
    """The record's Max and Min where both are finite numbers (not a bool tensor's true / false)."""
    found = arg.get("Max"), arg.get("Min")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in found):
        return None
    try:
        high, low = float(found[0]), float(found[1])  # type: ignore[arg-type]
    except OverflowError:  # an integer of 400 digits
        return None
    return (high, low) if math.isfinite(high) and math.isfinite(low) else None
