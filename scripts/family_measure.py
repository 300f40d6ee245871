"""What ``make_family_fixtures.py`` measures in the dumps it made, with numpy (never with tui-acc): the
error of the faulty operator's output in the test and in the clean run against the golden, and that
the fault added or dropped no record. Runs in the tools' environment (torch reads the files)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

MEASURES = {
    "tensor": "relative L2 error of the record's first output, ||x - golden|| / ||golden||, float64",
    "statistics": "relative difference of the record's first output's Norm, |n - golden| / golden",
}


def errors_at(case_dir: Path, dumper: str, records: dict[str, str], statistics: bool) -> dict[str, Any]:
    """Per token of ``records`` (token -> record name), the test's and the clean run's error there."""
    found: dict[str, Any] = {"measure": MEASURES["statistics" if statistics else "tensor"]}
    for side in ("test", "clean"):
        found[side] = {}
        for token, name in records.items():
            golden = _output(case_dir / "golden", dumper, name, int(token), statistics)
            other = _output(case_dir / side, dumper, name, int(token), statistics)
            found[side][token] = float(np.linalg.norm(other - golden) / np.linalg.norm(golden))
    return found


def check_same_records(case_dir: Path, dumper: str) -> None:
    """The test holds exactly the clean run's records: the fault changed values, not what was dumped."""
    test, clean = _names(case_dir / "test", dumper), _names(case_dir / "clean", dumper)
    if test != clean:
        raise SystemExit(f"{case_dir.name}: test and clean differ in records: {sorted(test ^ clean)[:10]}")


def _names(side: Path, dumper: str) -> set[str]:
    if dumper == "msprobe":
        return set(_dump_json(side)["data"])
    if dumper == "msit":
        return {str(p.relative_to(p.parents[1])) for p in side.glob("msit_dump_*/torch_tensors/*/*/*")}
    # SGLang: a file's step and name, without its dump_index (which counts every file before it)
    return {re.sub(r"___dump_index=\d+", "", p.name) for p in side.glob("*/*.pt")}


def _dump_json(side: Path) -> dict[str, Any]:
    (path,) = side.rglob("dump.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _output(side: Path, dumper: str, name: str, token: int, statistics: bool) -> np.ndarray:
    """The record's first output as float64 (its Norm alone, as a 1-element array, where statistics)."""
    import torch

    if dumper == "msprobe":
        entry = _dump_json(side)["data"][name]["output"]
        while isinstance(entry, list):
            entry = entry[0]
        if statistics:
            return np.array([entry["Norm"]], dtype=np.float64)
        (path,) = side.rglob(entry["data_name"])
        tensor = torch.load(path, weights_only=True)
    elif dumper == "msit":
        folder = next(side.glob(f"msit_dump_*/torch_tensors/*/{token}/{name}"))
        path = next(p for p in (folder / "output.pth", folder / "output_0.pth") if p.is_file())
        tensor = torch.load(path, weights_only=True)
    else:
        (path,) = (
            p
            for p in side.glob("*/*.pt")
            if p.name.startswith(f"step={token}___") and f"___name={name}___" in p.name
        )
        tensor = torch.load(path, weights_only=True)["value"]
    return tensor.detach().to(torch.float64).numpy()
