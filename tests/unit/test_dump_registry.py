"""Format detection is the registry's: every reader module registers itself with what it detects,
open_dump asks them in order of precedence, and the "expected" message is built from them."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from tui_acc.dumps import DumpError, DumpIndex, Node, NodeTree, open_dump, registry
from tui_acc.dumps.model import ATB_FORMATS, Format
from tui_acc.dumps.registry import DumpReader, ReadOptions, readers

TOOLS = ("msit", "msprobe", "sglang", "torchair")


def _reader_modules() -> list[str]:
    """Every module of a tool's package that defines ``claims`` and ``read`` (a reader), and single."""
    found = ["tui_acc.dumps.single"]
    for tool in TOOLS:
        package = importlib.import_module(f"tui_acc.dumps.{tool}")
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            if hasattr(module, "claims") and hasattr(module, "read"):
                found.append(info.name)
    return found


def test_every_reader_module_registers_itself() -> None:
    """A reader module left out of its package's imports (or not registering) would never be asked."""
    registered = {reader.claims for reader in readers()}
    modules = _reader_modules()
    assert len(modules) == len(readers()) == 11
    for name in modules:
        assert importlib.import_module(name).claims in registered, name


def test_the_expected_message_names_every_reader(tmp_path: Path) -> None:
    (tmp_path / "something").mkdir()
    with pytest.raises(DumpError, match="not a dump tui-acc can read; expected ") as refused:
        open_dump(tmp_path)
    message = str(refused.value)
    for reader in readers():
        assert f"{reader.name} ({reader.marks})" in message
    assert message.endswith(f", or {readers()[-1].described}")


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> list[DumpReader]:
    """The registered readers, on a copy the test may extend."""
    copy = list(registry._READERS)
    monkeypatch.setattr(registry, "_READERS", copy)
    return copy


def _marked(mark: str, precedence: int = 5) -> DumpReader:
    """A reader claiming a root that holds ``{mark}.marker``; its index says who read it, and the rank."""

    def read(root: Path, options: ReadOptions) -> DumpIndex:
        tree = NodeTree(root="model", nodes={"model": Node("model", "model", None, 0)})
        return DumpIndex(
            root, root, "tensor", tree, {}, f"{mark}, rank {options.rank}", order_is_execution=True
        )

    return DumpReader(
        name=f"a {mark} dump",
        marks=f"{mark}.marker",
        claims=lambda root: (root / f"{mark}.marker").is_file(),
        read=read,
        precedence=precedence,
        pick=f"{mark}/",
    )


def test_a_registered_reader_is_asked_with_the_options_and_named_when_missing(
    own_registry: list[DumpReader], tmp_path: Path
) -> None:
    registry.register(_marked("new"))
    (tmp_path / "new.marker").write_text("")
    assert open_dump(tmp_path, rank=3).order_source == "new, rank 3"
    (tmp_path / "new.marker").unlink()
    (tmp_path / "other").mkdir()
    with pytest.raises(DumpError, match=r"a new dump \(new.marker\)"):
        open_dump(tmp_path)


def test_readers_of_one_precedence_exclude_each_other(own_registry: list[DumpReader], tmp_path: Path) -> None:
    registry.register(_marked("left"))
    registry.register(_marked("right"))
    (tmp_path / "left.marker").write_text("")
    assert open_dump(tmp_path).order_source.startswith("left")  # one claims it: it reads
    (tmp_path / "right.marker").write_text("")
    with pytest.raises(
        DumpError, match="holds both a left dump and a right dump; pass the left/ or the right/"
    ):
        open_dump(tmp_path)


def test_a_lower_precedence_is_asked_first(own_registry: list[DumpReader], tmp_path: Path) -> None:
    registry.register(_marked("late", precedence=7))
    (tmp_path / "late.marker").write_text("")
    (tmp_path / "early.marker").write_text("")
    assert open_dump(tmp_path).order_source.startswith("late")
    registry.register(_marked("early", precedence=6))  # registered after, asked before
    assert open_dump(tmp_path).order_source.startswith("early")


def test_importing_the_dumps_package_registers_every_reader_without_numpy() -> None:
    """The registry is filled on the way to the TUI's first frame, which must not import numpy."""
    code = "import sys; import tui_acc.dumps.registry as r; print(len(r.readers()), 'numpy' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["11", "False"]


def test_the_format_literal_is_what_the_readers_produce() -> None:
    """DumpIndex.format is a Literal (mypy's strict equality checks every comparison with it): no
    reader writes a format outside it, and it names none that no reader writes."""
    written = set()
    for name in _reader_modules():
        module = importlib.import_module(name)
        written |= {getattr(module, attr) for attr in ("FORMAT", "STATS_FORMAT") if hasattr(module, attr)}
    assert written == set(get_args(Format))
    assert written >= ATB_FORMATS
