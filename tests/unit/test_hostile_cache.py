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
from tui_acc.metrics.cache_seal import cache_secret, seal


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
    "megabytes long": None,  # filled in below: a real row whose operator name runs to 1.1 M characters
}
MAC_CHARS = 64  # the seal in front of each stored row's JSON (cache_seal.py)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cached_row_is_dropped_and_recomputed(demo_pair, tmp_path: Path, damage: str) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    expected = _tensor_verdicts(first)
    first.engine.flush()
    path = first.engine.cache.path  # type: ignore[union-attr]
    secret = cache_secret(path.parent)
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT pair, key, data FROM rows").fetchall()
        for pair, key, data in rows:
            text = DAMAGE[damage]
            if damage == "a metric of the wrong type":
                text = json.dumps({**json.loads(data[MAC_CHARS:]), "cosine": "high"})
            elif text is None:  # well formed and sealed, only far too long for a row
                text = json.dumps({**json.loads(data[MAC_CHARS:]), "golden_node": "x" * 1_100_000})
            # sealed with the cache's own secret: the damage reaches the parser, not just the seal
            db.execute("UPDATE rows SET data = ? WHERE key = ?", (seal(secret, pair, key, text), key))
    db.close()
    second = open_comparison(golden, test)
    again = _tensor_verdicts(second)
    assert again == expected
    assert second.engine.from_cache == 0 and second.engine.computed > 0
    said = f"{path}: {len(rows)} cached rows ignored (damaged, edited, or not sealed"
    assert said in str(second.engine.cache.problem)  # type: ignore[union-attr]
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


@pytest.mark.parametrize("planted", ["rows.sqlite3", "rows.sqlite3-wal", "rows.sqlite3-shm"])
def test_a_planted_hard_link_is_never_written_through(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """The database or its journal files planted as a hard link to a file elsewhere: a regular file
    of the user's, but SQLite's writes would change the other file. Refused as the symlink is."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    os.link(outside, cache / planted)
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(cache))
    golden, test, _ = _copy(demo_pair, tmp_path)
    cmp = open_comparison(golden, test)
    cmp.engine.tensors_frame(3)
    cmp.engine.flush()
    assert outside.read_text(encoding="utf-8") == "mine"
    assert "2 hard links" in str(cmp.engine.cache.problem)  # type: ignore[union-attr]


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


def _cached(golden: Path, test: Path) -> tuple[Path, dict[str, str]]:
    """The comparison run once with the cache: the database, and each stored row's text by key."""
    first = open_comparison(golden, test)
    first.engine.tensors_frame(3)
    first.engine.flush()
    path = first.engine.cache.path  # type: ignore[union-attr]
    with sqlite3.connect(path) as db:
        rows = dict(db.execute("SELECT key, data FROM rows").fetchall())
    db.close()
    return path, rows


def _faulty_output_key(rows: dict[str, str]) -> str:
    (key,) = [k for k in rows if f"/3/{FAULT_OP}/output.pth" in k]
    return key


def _stored_instead(path: Path, key: str, text: str) -> None:
    """The stored text of ``key``'s row replaced by hand."""
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rows SET data = ? WHERE key = ?", (text, key))
    db.close()


def _assert_one_row_ignored_and_the_fault_named(golden: Path, test: Path) -> None:
    second = open_comparison(golden, test)
    assert second.verdicts.culprit(3)["golden_node"] == FAULT_OP  # type: ignore[index]
    assert "1 cached rows ignored" in str(second.engine.cache.problem)  # type: ignore[union-attr]


def test_a_row_edited_to_pass_is_not_believed(demo_pair, tmp_path: Path) -> None:
    """The faulty operator's row made perfect by hand (cosine 1.0, no error), its seal kept: the seal no
    longer matches, the row is recomputed and the culprit is still named."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    path, rows = _cached(golden, test)
    key = _faulty_output_key(rows)
    stored = rows[key]
    row = json.loads(stored[MAC_CHARS:])
    forged = {
        k: (1.0 if k == "cosine" else 0.0 if "err" in k and isinstance(v, float) else v)
        for k, v in row.items()
    }
    _stored_instead(path, key, stored[:MAC_CHARS] + json.dumps(forged))
    _assert_one_row_ignored_and_the_fault_named(golden, test)


def test_a_seal_edited_into_other_characters_is_not_believed(demo_pair, tmp_path: Path) -> None:
    """Non-ASCII text where the seal stands (compare_digest refuses such strings): dropped, no crash."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    path, rows = _cached(golden, test)
    key = _faulty_output_key(rows)
    _stored_instead(path, key, "é" + rows[key][1:])
    _assert_one_row_ignored_and_the_fault_named(golden, test)


def test_a_passing_row_moved_onto_the_faulty_tensors_key_is_not_believed(demo_pair, tmp_path: Path) -> None:
    """A row sealed for one tensor is not that of another: the seal covers its key and its pair."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    path, rows = _cached(golden, test)
    key = _faulty_output_key(rows)
    passing = next(
        text for k, text in rows.items() if json.loads(text[MAC_CHARS:])["cosine"] == 1.0 and k != key
    )
    _stored_instead(path, key, passing)
    _assert_one_row_ignored_and_the_fault_named(golden, test)


def test_a_database_copied_from_another_cache_is_recomputed(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another cache's secret: none of its rows is believed here (a colleague's, another machine's)."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    path, rows = _cached(golden, test)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / path.name).write_bytes(path.read_bytes())
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(elsewhere))
    second = open_comparison(golden, test)
    second.engine.tensors_frame(3)
    assert second.engine.from_cache == 0 and second.engine.computed > 0
    assert f"{len(rows)} cached rows ignored" in str(second.engine.cache.problem)  # type: ignore[union-attr]
    assert (elsewhere / "secret").stat().st_mode & 0o777 == 0o600


def test_a_secret_others_can_read_is_not_used(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "secret").write_bytes(bytes(32))
    (cache / "secret").chmod(0o644)
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(cache))
    golden, test, _ = _copy(demo_pair, tmp_path)
    cmp = open_comparison(golden, test)
    assert cmp.verdicts.culprit(3)["golden_node"] == FAULT_OP  # type: ignore[index]
    cmp.engine.flush()
    assert f"{cache / 'secret'} can be read by others (mode 644)" in str(cmp.engine.cache.problem)  # type: ignore[union-attr]


def test_the_seal_binds_a_rows_pair_key_and_values_and_only_the_secret_can_make_it(tmp_path: Path) -> None:
    from tui_acc.metrics.cache_seal import unsealed

    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    secret = cache_secret(folder)
    assert cache_secret(folder) == secret and len(secret) == 32  # made once, then read
    stored = seal(secret, "pair", "key", '{"cosine": 0.5}')
    assert unsealed(secret, "pair", "key", stored) == '{"cosine": 0.5}'
    assert unsealed(secret, "pair", "other key", stored) is None
    assert unsealed(secret, "other pair", "key", stored) is None
    assert unsealed(secret, "pair", "key", stored.replace("0.5", "1.0")) is None
    assert unsealed(bytes(32), "pair", "key", stored) is None
    assert unsealed(secret, "pair", "key", None) is None
    # what it cannot stop: whoever reads the user's secret seals what they like (docs/bad-input.md)
    assert (
        unsealed(secret, "pair", "key", seal(secret, "pair", "key", '{"cosine": 1.0}')) == '{"cosine": 1.0}'
    )
