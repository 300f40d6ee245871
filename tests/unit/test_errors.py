"""One base for tui-acc's errors: every error class a user can meet is a TuiAccError, no two share a
name, and the command line says any of them as ``tui-acc: error: MESSAGE`` with exit 2."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import tui_acc
from tui_acc.errors import TuiAccError

# Raised and caught inside one package, never shown to a user as such: a control-flow signal, or a
# reader's refusal that dumps/tensors.py says as the TensorLoadError naming the file.
INTERNAL = {
    "tui_acc.metrics.engine.Cancelled",  # the caller has gone: stop computing
    "tui_acc.replay.call.NotSampleable",  # replay the whole output instead of a sample
    "tui_acc.dumps.torchfile.refusals.NeedsTorch",  # fall back to torch.load
    "tui_acc.dumps.torchfile.refusals.RefusedGlobal",
    "tui_acc.dumps.torchfile.refusals.TorchFileError",
    "tui_acc.dumps.torchfile.fallback.FallbackRefused",
    "tui_acc.dumps.atb.bin.BinFileError",
    "tui_acc.dumps.atb.tiled.TilingError",  # said as the BinFileError of the file it was read from
    "tui_acc.dumps.fs.NotRegularFile",  # OSErrors by design: every reader handles an unreadable file
    "tui_acc.dumps.policy.OutsideDump",
    # ranks that cannot be merged: the session compares rank 0 alone and says why in a note
    "tui_acc.dumps.rank_alignment.NotAlignable",
    # a node --replay or the replay dialog names: the CLI says it as the UsageError "--replay: ...", the
    # TUI on its status line
    "tui_acc.verdicts.replay_check.UnknownNode",
    # a call to a Ray node's worker that failed: said in the rows of the ranks it held (not compared)
    "tui_acc.cluster.workers.CallFailed",
}


def _error_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in tui_acc (its modules imported; the TUI's and __main__ left
    out: the one imports textual, the other runs the command line)."""
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(tui_acc.__path__, "tui_acc."):
        if module.name == "tui_acc.__main__" or module.name.startswith("tui_acc.tui"):
            continue
        imported = importlib.import_module(module.name)
        for value in vars(imported).values():
            mine = isinstance(value, type) and value.__module__ == module.name
            if mine and issubclass(value, BaseException):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_error_a_user_can_meet_is_a_tui_acc_error() -> None:
    classes = _error_classes()
    assert len(classes) > len(INTERNAL) + 15  # the walk found the package's errors, not nothing
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, TuiAccError))
    assert stray == sorted(name for name in INTERNAL if name in classes)
    assert set(INTERNAL) <= set(classes), "an internal error was renamed or moved: update INTERNAL"


def test_no_two_error_classes_share_a_name() -> None:
    names: dict[str, list[str]] = {}
    for qualified, cls in _error_classes().items():
        names.setdefault(cls.__name__, []).append(qualified)
    assert {name: where for name, where in names.items() if len(where) > 1} == {}


def test_the_builtin_bases_stay() -> None:
    """``except ValueError`` around a parser, ``except ImportError`` around torch go on catching."""
    from tui_acc.config import ConfigError
    from tui_acc.dumps.torchfile.arrays import TorchMissing
    from tui_acc.metrics.fastkernel import KernelUnavailable

    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, TuiAccError)
    assert issubclass(TorchMissing, ImportError) and issubclass(KernelUnavailable, RuntimeError)


def test_the_command_line_says_any_of_them_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error no command catches itself (a tensor file, while the ranks are opened) is said, not a
    traceback: the one handler around every command."""
    from tui_acc.cli.main import main
    from tui_acc.collectives import rank_set
    from tui_acc.dumps.tensors import TensorLoadError

    def damaged(*_args: object, **_kwargs: object) -> None:
        raise TensorLoadError(tmp_path / "x.bin", "truncated")

    monkeypatch.setattr(rank_set, "open_ranks", damaged)
    assert main(["ranks", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"tui-acc: error: {tmp_path / 'x.bin'}: truncated\n"
