"""Writing ATB ``.bin`` tensor files (the layout ``atb_bin`` reads), for the demo and for tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tui_acc.dumps.atb_bin import ACL_DTYPES, END_LINE

_CODE_OF = {name: code for code, (name, _) in ACL_DTYPES.items()}


def write_bin(
    path: Path,
    tensor: torch.Tensor,
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
    code = dtype_code if dtype_code is not None else _CODE_OF[str(tensor.dtype).removeprefix("torch.")]
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


def _raw_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.element_size() == 0 or flat.numel() == 0:
        return b""
    # Reinterpret as bytes (bf16 stays its raw 16-bit words), little-endian as on Ascend hosts.
    return bytes(flat.view(torch.uint8).numpy().astype(np.uint8).tobytes())
