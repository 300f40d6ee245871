"""The row cache against what it cannot trust: files rewritten behind its back with their old
size and time, and rows damaged in the database. Neither may ever decide a verdict."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import ml_dtypes
import pytest

from tests.conftest import device_dir
from tests.unit.test_bad_input import FAULT_OP, _copy
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.dumps.writers.torch_file import write_torch_file


def _first_failing_op(golden: Path, test: Path, **options: object) -> str | None:
    cmp = open_comparison(golden, test, CompareOptions(**options))  # type: ignore[arg-type]
    op = cmp.verdicts.culprit(3)
    cmp.engine.flush()
    return None if op is None else str(op["golden_node"])


def test_a_same_size_rewrite_with_the_old_time_is_recomputed(demo_pair, tmp_path: Path) -> None:
    """The faulty output replaced by a fixed one of the same size, its modification time put
    back (``cp --preserve``, ``touch -r``): a new inode and a new ctime, so a new row."""
    golden, test, device = _copy(demo_pair, tmp_path)
    assert _first_failing_op(golden, test) == FAULT_OP  # cached
    target = device / "3" / FAULT_OP / "output.pth"
    source = device_dir(golden) / "3" / FAULT_OP / "output.pth"
    fixed_values = load_tensor(source, ANYWHERE).astype(ml_dtypes.bfloat16)
    before = target.stat()
    fixed = target.with_name("fixed") / "output.pth"  # the same archive name inside: the same size
    fixed.parent.mkdir()
    write_torch_file(fixed, fixed_values)  # as the demo writes its files
    assert fixed.stat().st_size == before.st_size
    fixed.replace(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert _first_failing_op(golden, test) != FAULT_OP
    assert _first_failing_op(golden, test, cache=False) != FAULT_OP  # what a fresh look says


def _tensor_verdicts(cmp) -> dict[tuple[str, str], tuple[bool, float | None]]:  # type: ignore[no-untyped-def]
    return {
        (r["golden_node"], r["slot"]): (r["passed"], r["cosine"])
        for r in cmp.engine.tensors_frame(3).to_dicts()
    }


DAMAGE = {
    "a list": "[1, 2, 3]",
    "an empty object": "{}",
    "not JSON": "{'cosine': 1",
    "a metric of the wrong type": None,  # filled in below: a real row with cosine = "high"
    "nested past the parser": "[" * 100_000,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cached_row_is_dropped_and_recomputed(demo_pair, tmp_path: Path, damage: str) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    expected = _tensor_verdicts(first)
    first.engine.flush()
    path = first.engine.cache.path  # type: ignore[union-attr]
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key, data FROM rows").fetchall()
        for key, data in rows:
            text = DAMAGE[damage]
            if text is None:
                text = json.dumps({**json.loads(data), "cosine": "high"})
            db.execute("UPDATE rows SET data = ? WHERE key = ?", (text, key))
    db.close()
    second = open_comparison(golden, test)
    again = _tensor_verdicts(second)
    assert again == expected
    assert second.engine.from_cache == 0 and second.engine.computed > 0
    assert f"{path}: {len(rows)} damaged cached rows ignored" in str(second.engine.cache.problem)  # type: ignore[union-attr]
    assert second.verdicts.culprit(3)["golden_node"] == FAULT_OP  # type: ignore[index]
    second.engine.flush()  # the recomputed rows replace the damaged ones
    third = open_comparison(golden, test)
    third.engine.tensors_frame(3)
    assert third.engine.computed == 0 and third.engine.cache.problem is None  # type: ignore[union-attr]


def test_a_planted_database_link_is_never_written_through(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rows.sqlite3 planted as a symlink to a file outside the cache: SQLite would write there. The
    cache is not used (said), the file the link leads to is untouched, the verdict is the same."""
    cache = tmp_path / "cache"
    cache.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    (cache / "rows.sqlite3").symlink_to(outside)
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(cache))
    golden, test, _ = _copy(demo_pair, tmp_path)
    assert _first_failing_op(golden, test) == FAULT_OP
    cmp = open_comparison(golden, test)
    cmp.engine.tensors_frame(3)
    cmp.engine.flush()
    assert outside.read_text(encoding="utf-8") == "mine"
    assert "not a regular file (a symbolic link)" in str(cmp.engine.cache.problem)  # type: ignore[union-attr]


def test_a_cache_folder_others_may_write_becomes_the_users_alone(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(cache))
    golden, test, _ = _copy(demo_pair, tmp_path)
    assert _first_failing_op(golden, test) == FAULT_OP
    assert cache.stat().st_mode & 0o077 == 0 and (cache / "rows.sqlite3").is_file()
