"""Writing ATB ``.bin`` tensor files (the layout ``atb_bin`` reads), for the demo and for tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tui_acc.dumps.atb.bin import ACL_DTYPES, END_LINE
from tui_acc.dumps.dtypes import dtype_name

if TYPE_CHECKING:
    import torch

_CODE_OF = {name: code for code, (name, _) in ACL_DTYPES.items()}


def write_bin(
    path: Path,
    tensor: np.ndarray | torch.Tensor,
    *,
    dtype_code: int | None = None,
    format_code: int = 2,
    payload: bytes | None = None,
    external: str | None = None,
) -> Path:
    """Write ``tensor`` as the ATB probe does: header lines, ``$End=1``, raw little-endian bytes.

    ``payload`` overrides the bytes (for packed types such as int4); ``external`` writes the bytes
    to that file (relative to ``path``) and points a ``data=`` attribute at it.
    """
    if not isinstance(tensor, np.ndarray):
        from tui_acc.dumps.torchfile.arrays import from_torch

        tensor = from_torch(tensor)
    code = dtype_code if dtype_code is not None else _CODE_OF[dtype_name(tensor)]
    raw = payload if payload is not None else _raw_bytes(tensor)
    dims = ",".join(str(d) for d in tensor.shape)
    lines = [
        "$Version=1.0",
        "$Object.Count=1",
        f"$Object.Length={len(raw)}",
        f"format={format_code}",
        f"dtype={code}",
    ]
    lines.append(f"dims={dims}")
    if external is not None:
        lines.append(f"data={external}")
        (path.parent / external).write_bytes(raw)
        body = b""
    else:
        lines.append(f"$Object.data=0,{len(raw)}")
        body = raw
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode() + END_LINE + body)
    return path


def _raw_bytes(values: np.ndarray) -> bytes:
    # The elements' own bytes (bf16 stays its raw 16-bit words), little-endian as on Ascend hosts.
    return np.ascontiguousarray(values).tobytes()
