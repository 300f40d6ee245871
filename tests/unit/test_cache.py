"""The on-disk row cache: a second launch computes nothing; a changed file is recomputed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.metrics.cache import cache_dir


def _copy(demo_pair, tmp_path: Path) -> tuple[Path, Path]:
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.test, test)
    return golden, test


def test_second_launch_reads_rows_from_disk(demo_pair, tmp_path: Path) -> None:
    golden, test = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    rows = first.verdicts.token(3).rows
    first.engine.flush()
    assert first.engine.computed > 0 and first.engine.from_cache == 0
    assert (cache_dir() / "rows.sqlite3").is_file() and not list(
        golden.rglob("*.sqlite3*")
    )  # never in the dumps
    second = open_comparison(golden, test)
    again = second.verdicts.token(3).rows
    assert second.engine.computed == 0 and second.engine.from_cache > 0
    assert [r["cosine"] for r in again] == [r["cosine"] for r in rows]
    assert [r["label"] for r in again] == [r["label"] for r in rows]


def test_changed_file_is_recomputed_and_no_cache_bypasses(demo_pair, tmp_path: Path) -> None:
    golden, test = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    first.engine.token_rows()
    first.engine.flush()
    pair = first.pairing.logits_pair(2)
    stat = pair.test.path.stat()
    os.utime(pair.test.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = open_comparison(golden, test)
    second.engine.token_rows()
    assert second.engine.computed == 1  # only the touched file
    third = open_comparison(golden, test, CompareOptions(cache=False))
    third.engine.token_rows()
    assert third.engine.from_cache == 0 and third.engine.computed == len(third.pairing.tokens)


@pytest.mark.parametrize("value", ["1", "yes"])
def test_tui_acc_no_cache_keeps_every_command_off_the_disk(
    demo_pair, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared host: one variable, set once, is --no-cache for the view, report and hunt alike."""
    from tui_acc.cli.main import main

    monkeypatch.setenv("TUI_ACC_NO_CACHE", value)
    assert main(["report", str(demo_pair.golden), str(demo_pair.test)]) == 1
    capsys.readouterr()
    assert not (cache_dir() / "rows.sqlite3").exists()
    comparison = open_comparison(demo_pair.golden, demo_pair.test)
    comparison.engine.token_rows()
    comparison.engine.flush()
    assert comparison.engine.computed > 0 and not (cache_dir() / "rows.sqlite3").exists()
    monkeypatch.setenv("TUI_ACC_NO_CACHE", "0")  # 0 (or empty): the cache as usual
    assert main(["report", str(demo_pair.golden), str(demo_pair.test)]) == 1
    assert (cache_dir() / "rows.sqlite3").is_file()


def test_verdicts_follow_the_sessions_thresholds_not_the_cache(demo_pair, tmp_path: Path) -> None:
    from tui_acc.tolerances.thresholds import Thresholds

    golden, test = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    first.engine.token_rows()
    first.engine.flush()
    lenient = open_comparison(
        golden, test, CompareOptions(thresholds=Thresholds().with_bounds(logits={"cosine": -1.0, "kl": 10.0}))
    )
    assert all(r["passed"] for r in lenient.engine.token_rows())
    assert lenient.engine.computed == 0


def test_damaged_cache_is_ignored(demo_pair, tmp_path: Path) -> None:
    golden, test = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    first.engine.token_rows()
    first.engine.flush()
    first.engine.cache.path.write_bytes(b"not a database, not at all" * 100)
    for journal in first.engine.cache.path.parent.glob("rows.sqlite3-*"):
        journal.unlink()
    second = open_comparison(golden, test)
    rows = second.engine.token_rows()
    assert second.engine.computed == len(rows)
    assert "unreadable cache ignored" in second.engine.cache.problem


def test_statistics_entries_sharing_one_file_do_not_collide(reference: Path) -> None:
    case = reference / "msprobe-L0" / "statistics"
    uncached = open_comparison(case / "golden", case / "test", CompareOptions(cache=False))
    fresh = uncached.engine.tensors_frame(1)
    first = open_comparison(case / "golden", case / "test")
    first.engine.tensors_frame(1)
    first.engine.flush()
    second = open_comparison(case / "golden", case / "test")
    again = second.engine.tensors_frame(1)
    assert second.engine.computed == 0
    assert again["norm_diff"].to_list() == fresh["norm_diff"].to_list()


def test_a_row_cached_without_kl_is_not_taken_for_one_that_needs_it(demo_pair, tmp_path: Path) -> None:
    """KL is computed for the logits only: moving the logits (--logits-node) must not reuse a row
    cached without it, or a token would pass from the cache and fail without it."""
    golden, test = _copy(demo_pair, tmp_path)
    first = open_comparison(golden, test)
    first.engine.node_rows(0)  # rows cached, KL only for the last module's outputs
    first.engine.flush()
    inner = "root.model.layers.1"
    moved = open_comparison(golden, test, CompareOptions(logits_node=inner))
    row = moved.engine.token_row(0)
    assert row["kl"] is not None
    fresh = open_comparison(golden, test, CompareOptions(logits_node=inner, cache=False)).engine.token_row(0)
    assert row["passed"] == fresh["passed"]


def test_rows_with_an_error_are_never_cached(demo_pair, tmp_path: Path) -> None:
    """A link refused today is followed with --follow-links tomorrow: the error must not stick."""
    golden, test = _copy(demo_pair, tmp_path)
    target = next(test.rglob("2/root.model.norm/output*.pth"))
    outside = tmp_path / "elsewhere.pth"
    shutil.move(target, outside)
    target.symlink_to(outside)
    refused = open_comparison(golden, test)
    rows = refused.engine.node_rows(2)
    refused.engine.flush()
    assert any(r["error"] and "outside the dump" in r["error"] for r in rows)
    allowed = open_comparison(golden, test, CompareOptions(follow_links=True))
    again = {r["golden_node"]: r for r in allowed.engine.node_rows(2)}
    assert again["root.model.norm"]["error"] is None


def test_two_processes_on_the_same_dumps_keep_each_others_rows(tmp_path: Path) -> None:
    from tui_acc.metrics.cache import RowCache

    golden, test = tmp_path / "g", tmp_path / "t"
    first, second = RowCache(golden, test, tmp_path), RowCache(golden, test, tmp_path)
    assert first.get("warm") is None and second.get("warm") is None  # both have read the database
    first.put("a", {"cosine": 0.5})
    second.put("b", {"cosine": 0.25})
    first.flush()
    second.flush()  # a snapshot written whole would drop "a" here
    third = RowCache(golden, test, tmp_path)
    assert third.get("a")["cosine"] == 0.5 and third.get("b")["cosine"] == 0.25


_WRITER = """
import sys
from pathlib import Path

import pytest
from tui_acc.metrics.cache import RowCache

root, name = Path(sys.argv[1]), sys.argv[2]
cache = RowCache(root / "g", root / "t", root)
assert cache.get("warm") is None  # each has read the database before either writes
print("ready", flush=True)
sys.stdin.readline()  # both write at once
for i in range(300):
    cache.put(f"{name}{i}", {"cosine": i / 300})
cache.flush()
print(cache.problem or "done", flush=True)
"""


def test_two_processes_writing_at_once_keep_every_row(tmp_path: Path) -> None:
    """Two tui-acc processes flush into one cache at the same moment (released together through
    their stdin, no sleeping): every row of both is there afterwards."""
    import subprocess
    import sys

    from tui_acc.metrics.cache import RowCache

    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    outcomes = [writer.communicate(timeout=120)[0].strip() for writer in writers]
    assert outcomes == ["done", "done"]
    merged = RowCache(tmp_path / "g", tmp_path / "t", tmp_path)
    assert all(merged.get(f"{name}{i}") is not None for name in "ab" for i in range(300))


def test_rows_of_dumps_not_looked_at_for_a_month_are_pruned(tmp_path: Path) -> None:
    import sqlite3
    import time

    from tui_acc.metrics.cache import KEEP_DAYS, RowCache

    old = RowCache(tmp_path / "g1", tmp_path / "t1", tmp_path)
    old.put("a", {"cosine": 1.0})
    old.flush()
    with sqlite3.connect(old.path) as db:
        db.execute("UPDATE pairs SET used = ?", (time.time() - (KEEP_DAYS + 1) * 86400,))
    db.close()
    RowCache(tmp_path / "g2", tmp_path / "t2", tmp_path).get("anything")  # any later launch prunes
    with sqlite3.connect(old.path) as db:
        left = db.execute("SELECT count(*) FROM rows").fetchone()[0]
    db.close()
    assert left == 0
    assert RowCache(tmp_path / "g1", tmp_path / "t1", tmp_path).get("a") is None


def test_a_cache_that_cannot_be_written_says_so(demo_pair, tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    from tui_acc.cli.main import main

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(blocked))
    main(["report", str(demo_pair.golden), str(demo_pair.test), "--token", "0", "--json"])
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("cache not written" in note for note in notes)


def test_asking_again_for_rows_not_computed_touches_no_file(demo_pair, tmp_path: Path, monkeypatch) -> None:
    """The views ask for every token's logits row after each computed token: a row that is neither
    in memory nor on disk must not cost a stat of its files every time it is asked for."""
    from tui_acc.metrics import tensor_rows as tensor_rows_module

    golden, test = _copy(demo_pair, tmp_path)
    cmp = open_comparison(golden, test)
    for token in cmp.pairing.tokens:
        cmp.pairing.node_pairs(token)  # paired (the token list pairs them), not computed
    calls = []
    real = tensor_rows_module.identity
    monkeypatch.setattr(tensor_rows_module, "identity", lambda ref: calls.append(ref) or real(ref))
    assert all(cmp.engine.cached_token_row(t) is None for t in cmp.pairing.tokens)
    first = len(calls)
    assert first > 0
    assert all(cmp.engine.cached_token_row(t) is None for t in cmp.pairing.tokens)
    assert len(calls) == first


def test_a_cache_another_process_holds_too_long_is_skipped_not_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked past the wait is not damage: the shared file stays where it is, for the next launch; and
    it is waited for once: the rows computed meanwhile are written only if it is free at once (a
    second wait doubled the stall), and are written once the other process lets go."""
    import sqlite3

    from tui_acc.metrics import cache
    from tui_acc.metrics.cache import RowCache

    first = RowCache(tmp_path / "g", tmp_path / "t", tmp_path)
    first.put("a", {"cosine": 0.5})
    first.flush()
    monkeypatch.setattr(cache, "_BUSY_SECONDS", 0.05)
    holder = sqlite3.connect(first.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than we wait
    try:
        second = RowCache(tmp_path / "g", tmp_path / "t", tmp_path)
        assert second.get("a") is None
        assert second.problem is not None and "cache not read (database is locked)" in second.problem
        waits = []
        connect = sqlite3.connect
        monkeypatch.setattr(
            cache.sqlite3, "connect", lambda *a, **k: waits.append(k["timeout"]) or connect(*a, **k)
        )
        second.put("b", {"cosine": 0.25})
        second.flush()
        assert waits == [0] and "cache not written (database is locked)" in second.problem
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not first.path.with_name(f"{first.path.name}.damaged").exists()
    second.put("c", {"cosine": 0.75})
    second.flush()  # the other process let go: written, without waiting
    third = RowCache(tmp_path / "g", tmp_path / "t", tmp_path)
    assert third.get("a")["cosine"] == 0.5 and third.get("c")["cosine"] == 0.75


@pytest.mark.parametrize(
    ("planted", "named"),
    [
        # a recursive view under the name of a table: unbounded, it grew memory for ever
        (
            "CREATE VIEW pairs AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n "
            "WHERE x < 50) SELECT 'p' || x AS pair, 1.0 AS used FROM n",
            "view pairs",
        ),
        ("CREATE TABLE pairs (pair TEXT PRIMARY KEY, used REAL NOT NULL, extra TEXT)", "other columns"),
        ("CREATE TRIGGER t AFTER INSERT ON rows BEGIN DELETE FROM rows; END", "trigger t"),
    ],
    ids=["view", "columns", "trigger"],
)
def test_a_database_that_is_not_the_caches_schema_is_set_aside(
    tmp_path: Path, planted: str, named: str
) -> None:
    """The cache runs its own queries on what the file holds: a file whose tables are views,
    triggers or other columns is not the cache's, and is set aside as damage is, never queried."""
    import sqlite3

    from tui_acc.metrics.cache import RowCache

    path = tmp_path / "rows.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE rows (pair TEXT NOT NULL, key TEXT NOT NULL, data TEXT NOT NULL, "
        "PRIMARY KEY (pair, key))"
    )
    db.execute(planted)
    db.commit()
    db.close()
    cache = RowCache(tmp_path / "g", tmp_path / "t", tmp_path)
    assert cache.get("a") is None
    assert cache.problem is not None and "unreadable cache ignored" in cache.problem, cache.problem
    assert f"not tui-acc's row cache ({named}" in cache.problem
    assert path.with_name("rows.sqlite3.damaged").is_file() and not path.exists()
    cache.put("a", {"cosine": 0.5})
    cache.flush()
    assert RowCache(tmp_path / "g", tmp_path / "t", tmp_path).get("a")["cosine"] == 0.5
