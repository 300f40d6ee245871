"""Re-encode msit ATB dumps (the demo's, atb_export.py) in msprobe's ATB probe layout.

The probe needs an NPU, so its layout is written here by converting a dump, file by file, exactly
as msprobe's source names and fills them. Every rule cites msprobe (repository Ascend/msprobe,
August 2026) as ``ccsrc/atb_probe/atb_probe.cpp:LINE`` (``cpp``), ``.../utils/bin_file.cpp`` or
``.../utils/Statistics.h``. ``scripts/make_atb_probe_fixture.py`` runs it from the command line;
the tests run it on the demo's dumps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tui_acc.dumps.atb.bin import ACL_DTYPES, END_LINE, read_header

PID = 4242
TASKS = ("tensor", "statistics", "all")  # cpp:587-593
# Mki dtype and format names for statistic.csv (atb_probe.h:175-222); others are "undefined(code)"
_DTYPE_NAMES = {
    0: "float", 1: "float16", 2: "int8", 3: "int32", 4: "uint8", 6: "int16", 9: "int64", 27: "bf16"
}  # fmt: skip
_FORMAT_NAMES = {0: "nchw", 1: "nhwc", 2: "nd", 29: "fractal_nz"}
# Parameter names some CANN versions append (intensor0_x.bin). The probe takes the file name as ATB
# passes it (cpp:1688), so any name does; these are illustrative.
_PARAM_NAMES = {"intensor": ("x", "weight", "bias"), "outtensor": ("y", "y1", "y2")}


@dataclass(frozen=True)
class ProbeOptions:
    task: str = "tensor"  # cpp:1050-1063: tensor files, statistics, or both
    param_names: bool = False  # intensor0_x.bin instead of intensor0.bin
    filter_level: int = 1  # cpp:1133-1147 (with save_child): 1 saves a tensor once, later ones alias it
    host_dir: str = "/home/npu-user/run"  # ATB_OUTPUT_DIR on the NPU host (cpp:247), for Tensor Path


def export_probe(msit_roots: Sequence[Path], out: Path, options: ProbeOptions | None = None) -> Path:
    """Write ``out/atb_dump_data`` from msit ATB dumps, the i-th as device i; return it."""
    options = options or ProbeOptions()
    if options.task not in TASKS:
        raise ValueError(f"task {options.task!r}: expected one of {', '.join(TASKS)}")
    atb = out / "atb_dump_data"  # cpp:254
    for device, msit_root in enumerate(msit_roots):
        (source,) = (msit_root / "tensors").iterdir()
        dev_pid = f"{device}_{PID + device}"  # "{device_id}_{pid}" (cpp:1334, 1893-1896)
        _write_info(msit_root, atb / "info", dev_pid)
        for execution in sorted((p for p in source.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            _write_execution(execution, atb, dev_pid, options)
    return atb


def _write_execution(source: Path, atb: Path, dev_pid: str, options: ProbeOptions) -> None:
    # data/{dev}_{pid}/{exec}/...: TENSOR_AND_STATS_DATA_DIR + the path ATB passes (cpp:31, 1543)
    relative = Path(dev_pid, source.name)
    rows: list[str] = []
    for layer in _node_dirs(source):
        saved: dict[tuple[bytes, str, str], str] = {}  # one layer's tensors already written (cpp:1598-1627)
        _write_op(layer, atb, relative / layer.name, (_op_id(layer),), options, rows, saved)
    stats = atb / "data" / relative / "statistic.csv"  # cpp:1703-1717
    # the header is written when the file is first created (cpp:927-929), rows appended (cpp:939-945)
    header = (
        "Device and PID,Execution Count,Op Name,Op Type,Op Id,"
        "Input/Output,Index,Dtype,Format,Shape,Max,Min,Mean,Norm,Tensor Path"
    )
    stats.parent.mkdir(parents=True, exist_ok=True)
    stats.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


def _write_op(
    source: Path,
    atb: Path,
    relative: Path,
    ids: tuple[int, ...],
    options: ProbeOptions,
    rows: list[str],
    saved: dict[tuple[bytes, str, str], str],
) -> None:
    folder = atb / "data" / relative
    # SaveParam writes op_param.json and creates the folder whatever the task (cpp:1998-2028)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "op_param.json").write_text("{}", encoding="utf-8")
    # the probe saves inputs before the op runs, then its children run, then outputs after it
    # (only before+intensor and after+outtensor are written: cpp:1570-1575)
    _write_tensors(source / "before", atb, relative / "before", ids, options, rows, saved)
    for child in _node_dirs(source):
        _write_op(child, atb, relative / child.name, (*ids, _op_id(child)), options, rows, saved)
    _write_tensors(source / "after", atb, relative / "after", ids, options, rows, saved)


def _write_tensors(
    source: Path,
    atb: Path,
    relative: Path,
    ids: tuple[int, ...],
    options: ProbeOptions,
    rows: list[str],
    saved: dict[tuple[bytes, str, str], str],
) -> None:
    if not source.is_dir():
        return
    for file in sorted(source.glob("*.bin")):
        kind = "intensor" if file.name.startswith("intensor") else "outtensor"
        index = int(file.stem.removeprefix(kind))
        name = file.name
        if options.param_names:
            names = _PARAM_NAMES[kind]
            name = f"{kind}{index}_{names[index] if index < len(names) else f'p{index}'}.bin"
        header = read_header(file)
        payload = file.read_bytes()[header.header_bytes :]
        format_code, dtype_code, dims = (
            str(header.format_code),
            str(header.dtype_code),
            ",".join(str(d) for d in header.dims),
        )
        target = atb / "data" / relative / name
        op_id = "_".join(str(i) for i in ids)  # GetOpIdFromDataPath joins ids by "_" (cpp:794-810)
        if options.task in ("tensor", "all"):
            key = (payload, dtype_code, dims)
            # filter_level 1 (with save_child): a tensor already saved in this layer is written as a
            # data= alias to the first file, named {opId}_{file} (cpp:763-768, 1609-1624). Graph-identical
            # tensors are byte-identical; the converter finds them by their bytes. The alias key carries
            # no parameter name, so files named with one never match it (cpp:1609-1610).
            alias = saved.get(key) if options.filter_level >= 1 and not options.param_names else None
            target.parent.mkdir(parents=True, exist_ok=True)
            if alias is not None:
                _write_bin(target, format_code, dtype_code, dims, None, alias)
            else:
                _write_bin(target, format_code, dtype_code, dims, payload, None)
                saved.setdefault(key, f"{op_id}_{name}")
        rows.append(_row(relative / name, ids, header.dtype_code, header.format_code, dims, payload, options))


def _write_bin(
    path: Path, format_code: str, dtype_code: str, dims: str, payload: bytes | None, alias: str | None
) -> None:
    """bin_file.cpp:43-80: $Version, $Object.Count, $Object.Length, the attributes in the order added
    (format, dtype, dims, then data for an alias: cpp:1589-1591, 1623), one $Object.{name}=offset,length
    per object, $End=1, then the objects' bytes."""
    lines = [
        "$Version=1.0",
        f"$Object.Count={0 if payload is None else 1}",
        f"$Object.Length={0 if payload is None else len(payload)}",
        f"format={format_code}",
        f"dtype={dtype_code}",
        f"dims={dims}",
    ]
    if alias is not None:
        lines.append(f"data={alias}")
    if payload is not None:
        lines.append(f"$Object.data=0,{len(payload)}")  # AddObject("data", ...) (cpp:1594)
    path.write_bytes(("\n".join(lines) + "\n").encode() + END_LINE + (payload or b""))


def _row(
    relative: Path,
    ids: tuple[int, ...],
    dtype: int,
    fmt: int,
    dims: str,
    payload: bytes,
    options: ProbeOptions,
) -> str:
    """One statistic.csv line, GenLineStrforStatsCsv (cpp:841-904) after CreateTensorStats (cpp:1630-1668)."""
    parts = relative.parts  # {dev}_{pid}, {exec}, {id}_{name}..., before|after, file
    names = [p.split("_", 1)[1] for p in parts[2:-2]]  # GetFullOpNameFromDataPath (cpp:814-839)
    file = parts[-1]
    kind = "intensor" if file.startswith("intensor") else "outtensor"
    index = file[len(kind) : file.find(".")]  # up to the first "." (cpp:854-864): "0" or "0_x"
    stats = ["N/A"] * 4
    if options.task in ("statistics", "all"):
        stats = _statistics(payload, dtype)
    tensor_path = "N/A"  # statistics task (cpp:877-884)
    if options.task != "statistics":
        tensor_path = f"{options.host_dir}/atb_dump_data/data/{relative.as_posix()}"
    return ",".join(
        [
            parts[0],
            parts[1],
            "/".join(names),
            names[-1],  # the op type column is the last name (cpp:870-874)
            "_".join(str(i) for i in ids),
            "input" if kind == "intensor" else "output",  # cpp:858, 863
            index,
            _DTYPE_NAMES.get(dtype, f"undefined({dtype})"),  # cpp:1632-1645
            _FORMAT_NAMES.get(fmt, f"undefined({fmt})"),
            dims.replace(",", "x"),  # cpp:1646-1652
            *stats,
            tensor_path,
        ]
    )


def _statistics(payload: bytes, dtype: int) -> list[str]:
    """Max, min, mean, L2 norm as the probe computes and prints them (Statistics.h:69-101, cpp:1375-1477).

    Half types are widened to float (cpp:1392-1415); sums are kept in double; std::to_string
    prints six decimals.
    """
    name = ACL_DTYPES[dtype][0]
    if name == "bfloat16":
        words = np.frombuffer(payload, dtype=np.uint16).astype(np.uint32) << 16
        values = words.view(np.float32)
    else:
        values = np.frombuffer(payload, dtype=np.dtype(name)).astype(np.float32)
    as_double = values.astype(np.float64)
    mean = float(as_double.sum()) / len(values)
    norm = math.sqrt(float((as_double * as_double).sum()))
    return [f"{float(values.max()):f}", f"{float(values.min()):f}", f"{mean:f}", f"{norm:f}"]


def _write_info(msit_root: Path, info: Path, dev_pid: str) -> None:
    """info/model/{dev}_{pid}/{Model}.json (cpp:2116-2141) and info/layer/{dev}_{pid}/{opName}.json
    (cpp:1892-1917), from msit's topology, which holds the same merged graph (docs/formats.md §2.4, §2.8)."""
    for model_file in sorted(msit_root.glob("model/*/*.json")):
        model = json.loads(model_file.read_text(encoding="utf-8"))
        target = info / "model" / dev_pid / f"{model['modelName']}.json"  # cpp:2133
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(model), encoding="utf-8")
        for node in model.get("nodes", []):
            if node.get("nodes"):
                # a layer graph: opName, opType, param, its tensors' names, then its nodes (cpp:1849-1881)
                layer = {
                    "opName": node["opName"],
                    "opType": node["opType"],
                    "param": node.get("param", {}),
                    "inTensors": [f"{node['opName']}_input_0"],  # cpp:1753-1758
                    "outTensors": [f"{node['opName']}_output_0"],  # cpp:1759-1764
                    "nodes": node["nodes"],
                }
                path = info / "layer" / dev_pid / f"{node['opName']}.json"  # cpp:1909
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(layer), encoding="utf-8")


def _node_dirs(folder: Path) -> list[Path]:
    found = [p for p in folder.iterdir() if p.is_dir() and p.name.split("_", 1)[0].isdigit()]
    return sorted(found, key=_op_id)


def _op_id(folder: Path) -> int:
    return int(folder.name.split("_", 1)[0])
