"""The compact reference set in tests/data/reference: made by scripts/make_test_data.py, and small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import COMPACT_REFERENCE, REPO

SIZE_LIMIT = 10_000_000  # bytes, summed over files: the repository carries its test data, kept small


SCRIPT = REPO / "scripts" / "make_test_data.py"


def _make(source: Path, output: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), "--source", str(source), "--output", str(output)]
    return subprocess.run(command, capture_output=True, text=True, cwd=output.parent.parent)


def _tree(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_script_reproduces_the_compact_set_byte_for_byte(reference: Path, tmp_path: Path) -> None:
    """From the full set this keeps the committed data and the script in step; from the compact set
    itself it shows the cut is a projection (cutting a cut changes nothing, MANIFEST.md included)."""
    out = tmp_path / "data" / "reference"
    result = _make(reference, out)
    assert result.returncode == 0, result.stderr
    made, committed = _tree(out), _tree(COMPACT_REFERENCE)
    assert sorted(made) == sorted(committed)
    differing = [name for name in made if made[name].read_bytes() != committed[name].read_bytes()]
    assert differing == [], "re-run scripts/make_test_data.py and commit tests/data/reference"
    assert {p.stat().st_mode & 0o777 for p in made.values()} == {0o644}
    assert {p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_dir()} == {0o755}
    assert sorted(p.name for p in out.parent.iterdir()) == ["reference"]  # no temporary left beside it


def test_the_script_replaces_an_old_set_only_when_the_new_one_is_complete(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    out.mkdir()
    (out / "old.txt").write_text("kept until a complete set replaces it")
    bad_source = tmp_path / "not-a-reference"
    bad_source.mkdir()
    (bad_source / "MANIFEST.md").write_text("# a reference set without its cases\n")
    result = _make(bad_source, out)
    assert result.returncode == 1 and "make_test_data:" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-reference", "reference"]


def test_the_compact_set_is_at_most_10_mb() -> None:
    files = _tree(COMPACT_REFERENCE)
    assert "MANIFEST.md" in files
    assert sum(p.stat().st_size for p in files.values()) <= SIZE_LIMIT
