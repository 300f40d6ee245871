"""LoadPolicy: where a dump's files may lead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui_acc.dumps.policy import LoadPolicy


def test_a_relative_folder_is_resolved_against_the_working_directory_of_each_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder cache must not answer for ``dump/`` in one directory what it found in another."""
    for name in ("first", "second"):
        (tmp_path / name / "dump").mkdir(parents=True)
        (tmp_path / name / "dump" / "t.pth").write_bytes(b"x")
    for name in ("first", "second"):
        monkeypatch.chdir(tmp_path / name)
        policy = LoadPolicy.inside(Path("dump").resolve())
        assert policy.check(Path("dump") / "t.pth") == Path("dump") / "t.pth"
