"""The test's files the head reads itself in a pair's Ray run (cluster/node_files.py), with the nodes'
workers in this process (``PairWorker`` is a plain class; no Ray here): a file another node holds is
read from a copy fetched once through that node's worker, and nothing a dump names can make a copy
land outside the copies' folder, stand for another file, or let the head read its own files."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from tui_acc.cluster import node_files
from tui_acc.cluster.node_files import NodeFiles, ReadThroughNodes
from tui_acc.cluster.pair_worker import PairWorker
from tui_acc.dumps.policy import OutsideDump


class _Remote:
    """``actor.method.remote(...)`` calling the worker here, its result the call itself."""

    def __init__(self, worker: PairWorker, before: Any = None) -> None:
        self.worker, self.before = worker, before

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.worker, name)

        def remote(*args: Any) -> Any:
            if self.before is not None:
                self.before(*args)
            return method(*args)

        return types.SimpleNamespace(remote=remote)


def _files(places: dict[str, Path], head: str = "head", before: Any = None) -> NodeFiles:
    """NodeFiles over one place per node (``{node id: its folder}``), the head's node ``head``."""
    labels = list(places)
    workers = types.SimpleNamespace(
        places=[
            types.SimpleNamespace(node=types.SimpleNamespace(node_id=n), path=str(p))
            for n, p in places.items()
        ],
        connection=types.SimpleNamespace(head=head),
        lost={},
        states=[types.SimpleNamespace(label=n) for n in labels],
        actors=[_Remote(PairWorker(n, str(p)), before) for n, p in places.items()],
        result=lambda place, call: call,
    )

    def owner(path: Path) -> int | None:
        return next((i for i, root in enumerate(places.values()) if path.is_relative_to(root)), None)

    return NodeFiles(workers, owner)  # type: ignore[arg-type]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """Another node's folder: rank1/op/before/x.bin, and a file outside it."""
    root = tmp_path / "node" / "rank1"
    (root / "op" / "before").mkdir(parents=True)
    (root / "op" / "before" / "x.bin").write_bytes(b"the node's bytes")
    (tmp_path / "node" / "secret").write_bytes(b"outside the rank folder")
    return root


def test_a_file_on_another_node_is_read_from_a_copy_fetched_once(node: Path) -> None:
    files = _files({"head": node.parent / "nothing-here", "other": node})
    policy = ReadThroughNodes(node, files=files)
    path = node / "op" / "before" / "x.bin"
    copy = policy.check(path)
    assert copy != path and copy.is_relative_to(files.folder) and copy.read_bytes() == b"the node's bytes"
    assert copy.stat().st_mtime_ns == path.stat().st_mtime_ns  # settled there, settled here
    assert policy.check(path) == copy and files.fetched == 1 and files.fetched_bytes == 16
    files.close()
    assert not files.folder.exists()


def test_a_path_through_dot_dot_beside_a_copy_is_refused(node: Path, tmp_path: Path) -> None:
    """An ATB header's ``data=`` is read beside its file: beside a copy, ``..`` leads nowhere the
    node's folder is, and the head's policy refuses it (never the head's own file of that name)."""
    files = _files({"head": tmp_path / "nothing-here", "other": node})
    policy = ReadThroughNodes(node, files=files)
    copy = policy.check(node / "op" / "before" / "x.bin")
    climbing = copy.parent / ("../" * len(copy.parent.parts) + str(tmp_path / "node" / "secret"))
    with pytest.raises(OutsideDump):
        policy.check(climbing)
    beside = copy.parent / "y.data"
    with pytest.raises(FileNotFoundError):  # found back as the node's own path, asked of the node
        policy.check(beside)
    assert policy.is_file(beside) is False and policy.is_file(node / "op" / "before" / "x.bin")


def test_the_node_refuses_what_leads_out_of_its_folder(node: Path, tmp_path: Path) -> None:
    files = _files({"head": tmp_path / "nothing-here", "other": node})
    policy = ReadThroughNodes(node, files=files)
    (node / "op" / "link").symlink_to(tmp_path / "node" / "secret")
    with pytest.raises(OSError, match="outside the dump"):
        policy.check(node / "op" / "link")
    assert list(files.folder.rglob("*link*")) == []


def test_two_paths_of_one_name_are_two_copies(node: Path, tmp_path: Path) -> None:
    """``op/link/../c.data`` (the link leading to ``op/before``) is the node's ``op/c.data`` as its
    file system resolves it; ``op/c.data`` itself is another file: each gets its own copy."""
    (node / "op" / "before" / "c.data").write_bytes(b"beside x")
    (node / "op" / "c.data").write_bytes(b"one folder up")
    (node / "op" / "link").symlink_to(node / "op" / "before" / "inner", target_is_directory=True)
    (node / "op" / "before" / "inner").mkdir()
    files = _files({"head": tmp_path / "nothing-here", "other": node})
    policy = ReadThroughNodes(node, files=files)
    through = policy.check(node / "op" / "link" / ".." / "c.data")
    plain = policy.check(node / "op" / "c.data")
    assert through != plain
    assert (through.read_bytes(), plain.read_bytes()) == (b"beside x", b"one folder up")


def test_the_head_s_own_rank_folder_is_read_in_place(node: Path, tmp_path: Path) -> None:
    """A rank folder on the head's node, at another path than the others' (HOST:PATH): read where it
    is, confined to its own folder, though the policy's root is another node's."""
    mine = tmp_path / "head" / "rank0"
    mine.mkdir(parents=True)
    (mine / "t.pt").write_bytes(b"here")
    files = _files({"head": mine, "other": node})
    policy = ReadThroughNodes(node, files=files)
    assert policy.check(mine / "t.pt") == mine / "t.pt" and files.fetched == 0
    (mine / "out").symlink_to(tmp_path / "node" / "secret")
    with pytest.raises(OutsideDump):
        policy.check(mine / "out")


def test_a_file_that_changes_while_it_is_fetched_is_refused(
    node: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_files, "PART_BYTES", 4)
    path = node / "op" / "before" / "x.bin"

    def rewrite_after_the_first_part(asked: str, offset: int, length: int) -> None:
        if offset == 4:
            path.write_bytes(b"another tensor, longer than the first")

    files = _files({"head": tmp_path / "nothing-here", "other": node}, before=rewrite_after_the_first_part)
    with pytest.raises(OSError, match="changed while being read"):
        ReadThroughNodes(node, files=files).check(path)
    assert [p for p in files.folder.rglob("*") if p.is_file()] == []
