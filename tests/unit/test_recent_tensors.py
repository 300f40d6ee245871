"""A dump's tensors read a moment ago (dumps/recent_tensors.py): a file the metrics pass read is not
read again by the replay that follows; a file rewritten since is; what is shared cannot be written
into; nothing kept travels to another process."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import loading
from tui_acc.dumps.loading import load_side
from tui_acc.dumps.model import TensorRef
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.recent_tensors import RecentTensors


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every tensor file read from here on."""
    seen: list[Path] = []
    original = loading.load_tensor

    def counted(path: Path, policy, member: str = ""):  # type: ignore[no-untyped-def]
        seen.append(path)
        return original(path, policy, member)

    monkeypatch.setattr(loading, "load_tensor", counted)
    return seen


def _ref(path: Path) -> TensorRef:
    return TensorRef("output.0", "output", path)


def test_a_file_read_a_moment_ago_is_not_read_again(tmp_path: Path, reads: list[Path]) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(12, dtype=np.float32))
    recent = RecentTensors()
    first = load_side(_ref(path), None, ANYWHERE, recent)
    again = load_side(_ref(path), None, ANYWHERE, recent)
    assert again is first and reads == [path] and recent.hits == 1
    with pytest.raises(ValueError, match="read-only"):
        again[0] = 1.0  # shared by every reader: none may change it for the others


def test_a_file_rewritten_since_is_read_again(tmp_path: Path, reads: list[Path]) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(12, dtype=np.float32))
    recent = RecentTensors()
    load_side(_ref(path), None, ANYWHERE, recent)
    np.save(path, np.arange(13, dtype=np.float32))  # in place, as torch.save rewrites a file
    assert load_side(_ref(path), None, ANYWHERE, recent).size == 13 and len(reads) == 2


def test_the_budget_keeps_the_latest_and_a_large_tensor_is_not_kept(
    tmp_path: Path, reads: list[Path]
) -> None:
    recent = RecentTensors(budget=1000)
    paths = []
    for i, size in enumerate((500, 100, 100, 100)):  # float32: 2,000 bytes (over), then 400 each
        paths.append(tmp_path / f"{i}.npy")
        np.save(paths[-1], np.zeros(size, dtype=np.float32))
        load_side(_ref(paths[-1]), None, ANYWHERE, recent)
    reads.clear()
    for path in (paths[3], paths[2], paths[1], paths[0]):
        load_side(_ref(path), None, ANYWHERE, recent)
    # 1 went when 3 came in (1,200 bytes > 1,000); 0 was never kept; 2 and 3 are
    assert reads == [paths[1], paths[0]] and recent.hits == 2


def test_the_budget_is_never_more_than_the_largest_tensor_read(tmp_path: Path, reads: list[Path]) -> None:
    """A dump of small tensors keeps as little (with the engine's own: 3x the largest pair)."""
    recent = RecentTensors(budget=1 << 30)
    paths = [tmp_path / f"{i}.npy" for i in range(2)]
    for path in paths:  # 400 bytes each: the budget 400, the first one gone when the second comes
        np.save(path, np.zeros(100, dtype=np.float32))
        load_side(_ref(path), None, ANYWHERE, recent)
    reads.clear()
    load_side(_ref(paths[1]), None, ANYWHERE, recent)
    load_side(_ref(paths[0]), None, ANYWHERE, recent)
    assert reads == [paths[0]] and recent.hits == 1


def test_nothing_kept_travels_to_another_process(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(12, dtype=np.float32))
    recent = RecentTensors(budget=5000)
    load_side(_ref(path), None, ANYWHERE, recent)
    copy = pickle.loads(pickle.dumps(recent))
    assert copy.budget == 5000 and copy.hits == 0 and not copy._held


def test_a_replay_reads_none_of_the_files_the_rows_just_read(sensitivity_case, reads: list[Path]) -> None:
    """A real msprobe mix pair: judging a token (its rows, then the replays of its operators) reads
    each tensor file once, but for the few a small budget let go (it grows with the largest tensor
    read): some 350 reads saved against 10 made twice."""
    case = sensitivity_case("mix", "linear-noise-2pct")
    comparison = open_comparison(case.golden, case.test, CompareOptions(cache=False))
    comparison.verdicts.token(2)
    assert comparison.test.recent.hits > 300
    assert len(reads) - len(set(reads)) <= len(set(reads)) // 50
