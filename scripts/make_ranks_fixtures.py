"""Real msprobe dumps of a tensor-parallel run on 2 and 4 ranks: ``tests/data/ranks/*.tar.xz``.

Each rank is a process (``torch.multiprocessing.spawn``) joined by torch.distributed's gloo backend
on the CPU, and mindstudio-probe 26.2.0's ``PrecisionDebugger`` (task tensor, level mix) hooks a
tiny row-parallel model that calls ``dist.all_reduce`` (sum, and max on a statistic),
``dist.reduce_scatter_tensor`` and ``dist.all_gather_into_tensor``, in bfloat16, on 2 ranks, 4 ranks,
and 4 ranks as two tensor-parallel groups of 2 (``dist.new_group``: msprobe records each call's
group as ``{"type": "torch.ProcessGroup", "group_ranks": [...]}``). msprobe writes the
layout itself (``step0/rank{R}/dump.json``, ``construct.json``, ``dump_tensor_data/*.pt``).

The fault: on the last rank, at one token, one all-reduce leaves the peers' contributions out (its
output is its own partial sum). It is injected below msprobe, in the function msprobe wraps
(``torch.distributed.all_reduce`` is replaced before msprobe records the originals,
core/dump/api_dump/api_registry.py ``store_ori_attr``): msprobe records the input before the call
and the arguments after it as the output (core/dump/data_dump/data_processor/base.py,
``analyze_forward_output``: ``update_output_with_args_and_kwargs``), as it would a faulty
communication library's.

Run in the tools venv (docs/formats.md §0; scripts/make_model_fixtures.py's docstring)::

    python scripts/make_ranks_fixtures.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "ranks"
HIDDEN, INNER, LAYERS, TOKENS = 16, 32, 2, 3
FAULT_TOKEN, FAULT_LAYER = 1, 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, world: int, tp: int, out: str, port: int, record: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_grad_enabled(False)
    # tensor-parallel groups of tp consecutive ranks (every rank creates every group, as torch asks)
    groups = [dist.new_group(list(range(start, start + tp))) for start in range(0, world, tp)]
    group = groups[rank // tp] if tp < world else None  # the whole world: the default group
    calls = {"all_reduce": 0}
    faulty_call = FAULT_TOKEN * (LAYERS + 1) + FAULT_LAYER  # each token: LAYERS sums, then one max
    original = dist.all_reduce

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):  # type: ignore[no-untyped-def]
        """torch's, but on the last rank one call keeps only its own contribution (the fault)."""
        index = calls["all_reduce"]
        calls["all_reduce"] += 1
        own = tensor.clone()
        work = original(tensor, op=op, group=group, async_op=async_op)
        if rank == world - 1 and index == faulty_call:
            tensor.copy_(own)
        return work

    # before msprobe is imported: it wraps whatever these are when it registers its hooks
    dist.all_reduce = all_reduce
    dist.distributed_c10d.all_reduce = all_reduce
    from msprobe.pytorch import PrecisionDebugger

    generator = torch.Generator().manual_seed(1234)  # the same full weights on every rank
    local = INNER // tp
    columns = slice((rank % tp) * local, (rank % tp + 1) * local)

    class RowParallelMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            up = torch.randn(INNER, HIDDEN, generator=generator) / HIDDEN**0.5
            down = torch.randn(HIDDEN, INNER, generator=generator) / INNER**0.5
            self.up_proj = nn.Linear(HIDDEN, local, bias=False)
            self.down_proj = nn.Linear(local, HIDDEN, bias=False)
            self.up_proj.weight.copy_(up[columns])  # column-parallel: rank r's rows of up
            self.down_proj.weight.copy_(down[:, columns])  # row-parallel: its columns of down

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            partial = self.down_proj(torch.relu(self.up_proj(x)))
            dist.all_reduce(partial, group=group)  # the group's partial sums -> the layer's output
            return x + partial

    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(RowParallelMLP() for _ in range(LAYERS))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            peak = x.abs().amax(dim=-1)
            dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)  # a statistic the group agrees on
            chunk = x.new_empty(x.shape[0] // tp, HIDDEN)
            dist.reduce_scatter_tensor(chunk, x, group=group)
            gathered = x.new_empty(x.shape)
            dist.all_gather_into_tensor(gathered, chunk, group=group)
            return gathered * (1 / peak.max())

    class Model(nn.Module):  # its child is the top-level record: one call of it is one token
        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

    model = Model().to(torch.bfloat16)
    config = Path(out) / f"config{rank}.json"
    settings: dict[str, Any] = {
        "task": "tensor",
        "dump_path": out,
        "rank": [],
        "step": [],
        "level": "mix",
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    config.write_text(json.dumps(settings), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model)
    inputs = torch.Generator().manual_seed(99)
    for _ in range(TOKENS):
        model(torch.randn(2 * tp, HIDDEN, generator=inputs).to(torch.bfloat16))
    debugger.stop()
    debugger.step()
    config.unlink()
    if rank == world - 1:
        Path(record).write_text(
            json.dumps(
                {
                    "world": world,
                    "tp": tp,
                    "fault": {
                        "token": FAULT_TOKEN,
                        "op": f"Distributed.all_reduce.{faulty_call}.forward",
                        "rank": rank,
                    },
                }
            ),
            encoding="utf-8",
        )
    dist.destroy_process_group()


def make(world: int, tp: int) -> Path:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        dump.mkdir()
        record = Path(tmp) / "case.json"
        mp.spawn(_rank_main, args=(world, tp, str(dump), _free_port(), str(record)), nprocs=world)
        name = f"msprobe-tp{tp}" + (f"x{world // tp}" if tp < world else "")
        target = OUT / f"{name}.tar.xz"
        OUT.mkdir(parents=True, exist_ok=True)
        with tarfile.open(target, "w:xz") as archive:
            for path in sorted(dump.rglob("*")):
                if path.is_file():
                    archive.add(path, arcname=f"{name}/{path.relative_to(dump)}")
            body = record.read_bytes()
            info = tarfile.TarInfo(f"{name}/case.json")
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
        shutil.rmtree(dump, ignore_errors=True)
    return target


def main() -> None:
    # one group of 2 and of 4; and 4 ranks in two groups of 2 (each all-reduce sums its own pair)
    for world, tp in ((2, 2), (4, 4), (4, 2)):
        written = make(world, tp)
        print(f"{written}: {written.stat().st_size} bytes")


if __name__ == "__main__":
    sys.exit(main())
