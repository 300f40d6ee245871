"""The demo's inference run, as a user's script would be: ``python -m tui_acc.demo.infer --side test``.

It re-runs one side of a ``tui-acc demo`` pair (same seed, prompt and fault, from ``demo.json``)
under our capture hook, which honours tui-acc's re-dump variables (``TUI_ACC_TOKEN``,
``TUI_ACC_MODULES``, ``TUI_ACC_DUMP_DIR``). ``tui-acc demo`` writes a ``tui-acc.toml`` that points
the ``r`` key at it, and the tests use it as a real dumper (``--delay`` paces it, ``--fail`` makes
it exit with an error after its first token, ``--gate`` lets a test release it token by token).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Re-run one side of the demo in ``--demo`` under the capture hook; returns the exit status (0, or 2
    for an unreadable ``demo.json``; ``--fail`` exits with 3)."""
    parser = argparse.ArgumentParser(prog="python -m tui_acc.demo.infer", description=__doc__)
    parser.add_argument("--side", choices=("golden", "test"), required=True)
    parser.add_argument("--demo", type=Path, default=Path.cwd(), help="the demo folder (with demo.json)")
    parser.add_argument(
        "--layout",
        choices=("torch", "atb", "mindie"),
        default="torch",
        help="the test dump's layout (as `tui-acc demo --atb/--mindie`): atb and mindie re-encode the run",
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait after each token")
    parser.add_argument("--fail", action="store_true", help="exit with status 3 after the first token")
    parser.add_argument(
        "--gate",
        type=Path,
        help="a named pipe: wait until something opens it for writing, then, before each token, for "
        "one byte from it; once it is closed, run to the end (tests hold the run at a known point "
        "this way, with no timing)",
    )
    args = parser.parse_args(argv)
    try:
        manifest = json.loads((args.demo / "demo.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"infer: {args.demo / 'demo.json'}: cannot read the demo manifest ({exc})", file=sys.stderr)
        return 2

    from tui_acc.demo import LAYERS
    from tui_acc.demo.capture import MsitTorchCapture
    from tui_acc.demo.faults import StaleTailTile
    from tui_acc.demo.model import BFLOAT16, TinyConfig, build_model, generate

    seed, prompt = manifest["seed"], manifest["prompt"]
    model = build_model(seed, TinyConfig(num_layers=manifest.get("layers", LAYERS)))
    if args.side == "test":
        model = model.to(BFLOAT16)
    print(f"infer: {args.side} run, seed {seed}, prompt of {len(prompt)} tokens", flush=True)
    new_tokens = len(manifest["golden_ids"])
    gate = _Gate(args.gate)
    # weights as the demo's own dumps hold them, so that `p` replays in the re-dump too
    capture_here = MsitTorchCapture.from_env(model, args.demo / f"{args.side}-rerun", dump_weight=True)
    atb_out = None
    if args.layout != "torch":
        # captured in msit's torch layout, then re-encoded (as the demo's own ATB run is); the selected
        # nodes are ATB names the module hook cannot match, so the whole token is captured
        atb_out = capture_here.data_dir.parents[2]  # the dump_path: msit_dump_*/torch_tensors/{device} below
        staging = atb_out.parent / f"{atb_out.name}.torch"
        capture_here = MsitTorchCapture(model, staging, capture_here.token_range)
        if capture_here.module_glob is None and os.environ.get("TUI_ACC_MODULES"):
            print(
                "infer: the ATB layout cannot narrow to modules: every operation of the tokens is dumped",
                flush=True,
            )
    with capture_here as capture:
        print(f"infer: dumping into {capture.data_dir}", flush=True)
        handle = None
        if args.side == "test":
            fault = StaleTailTile(manifest["fault"]["module"], manifest["fault"]["token"])
            handle = fault.install(model, lambda: capture.token)

        def each_token(token: int) -> None:
            print(f"infer: token {token} done", flush=True)
            if args.fail:
                print("infer: simulated device error (--fail)", file=sys.stderr, flush=True)
                raise SystemExit(3)
            if args.delay:
                time.sleep(args.delay)
            if token + 1 < new_tokens:
                gate.wait()

        try:
            gate.wait()
            ids = generate(model, prompt, new_tokens, on_token=each_token)
        finally:
            if handle is not None:
                handle.remove()
    if atb_out is not None:
        import shutil

        from tui_acc.demo.atb_export import export_atb

        written = export_atb(staging, atb_out, mindie=args.layout == "mindie")
        shutil.rmtree(staging)
        print(f"infer: re-encoded as an {args.layout} dump in {written}", flush=True)
    print(f"infer: generated {ids}", flush=True)
    return 0


class _Gate:
    """``--gate``: one byte from the pipe lets one token through; its end lets every token through."""

    def __init__(self, path: Path | None) -> None:
        self._pipe = None if path is None else path.open("rb", buffering=0)  # waits for a writer
        self._token = 0

    def wait(self) -> None:
        if self._pipe is None:
            return
        print(f"infer: token {self._token} waits at the gate", flush=True)
        self._token += 1
        if not self._pipe.read(1):
            self._pipe.close()
            self._pipe = None


if __name__ == "__main__":
    raise SystemExit(main())
