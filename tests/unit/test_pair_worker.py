"""A pair's Ray worker (cluster/pair_worker.py), run in this process (a plain class: no Ray here), on
the real msprobe tensor-parallel run of tests/data/tp: a file it surveys is read once, whether the
sums of its slices follow or the row does, and it says how many bytes it read."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tui_acc import CompareOptions, Comparison, open_comparison
from tui_acc.cluster.pair_worker import PairWorker
from tui_acc.dumps.loading import load_side
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.metrics.region_sums import golden_regions, split_plan
from tui_acc.pairing import TensorPair


def _split_pairs(tp: Path) -> tuple[list[TensorPair], Comparison]:
    """``column``'s gathered tensors whose ranks hold slices of the golden's, and the comparison."""
    cmp = open_comparison(tp / "golden", tp / "column", CompareOptions(cache=False, gather=True))
    pairs = [t for n in cmp.pairing.node_pairs(0) for t in n.tensors if len(t.test.parts) == 2]
    return pairs, cmp


def _file_bytes(worker_read: list[np.ndarray]) -> int:
    return sum(values.nbytes for values in worker_read)


def test_a_surveyed_part_is_read_once_for_its_sums(tp_case) -> None:
    tp = tp_case("llama-tp2-msprobe")
    pairs, cmp = _split_pairs(tp)
    worker = PairWorker("node", str(tp / "column"))
    checked = 0
    for pair in pairs:
        if checked == 5:
            break
        golden = load_side(pair.golden, None, cmp.golden.load_policy)
        paths = [str(p) for p in pair.test.parts]
        survey = worker.survey(pair, paths)
        split = split_plan(
            [s.shape for s in survey], [s.dtype for s in survey], pair.test.merge, golden, False
        )
        if split is None:
            continue
        before = worker.read_bytes
        sums, error, _ = worker.region_sums(pair, paths, golden_regions(golden, split), False)
        assert error is None and len(sums) == 2
        assert worker.read_bytes == before  # the survey's reads, taken again
        checked += 1
    assert checked == 5 and worker.read_bytes > 0


def test_a_surveyed_part_is_read_once_when_it_is_sent(tp_case) -> None:
    tp = tp_case("llama-tp2-msprobe")
    pairs, _cmp = _split_pairs(tp)
    worker = PairWorker("node", str(tp / "column"))
    pair = pairs[0]
    paths = [str(p) for p in pair.test.parts]
    worker.survey(pair, paths)
    surveyed = worker.read_bytes
    sent = worker.parts(pair, paths)
    assert worker.read_bytes == surveyed == _file_bytes(sent)
    worker.parts(pair, paths)  # taken once: asked again, read again
    assert worker.read_bytes == 2 * surveyed


def test_a_part_rewritten_after_its_survey_is_read_again(tp_case, tmp_path: Path) -> None:
    tp = tp_case("llama-tp2-msprobe")
    pairs, _cmp = _split_pairs(tp)
    pair = pairs[0]
    folder = tmp_path / "column"
    shutil.copytree(tp / "column", folder)
    paths = [str(folder / p.relative_to(tp / "column")) for p in pair.test.parts]
    worker = PairWorker("node", str(folder))
    worker.survey(pair, paths)
    other = pairs[1].test.parts[0]  # another tensor's file written in place of the first part
    Path(paths[0]).write_bytes(other.read_bytes())
    sent = worker.parts(pair, paths)
    assert sent[0].tobytes() == load_tensor(other, ANYWHERE).tobytes()  # not what the survey read


def test_what_a_survey_keeps_stays_within_its_budget(tp_case, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A budget of one part: the survey's first part goes when its second comes, and is read again."""
    from tui_acc.cluster import pair_worker

    tp = tp_case("llama-tp2-msprobe")
    pairs, _cmp = _split_pairs(tp)
    pair = pairs[0]
    paths = [str(p) for p in pair.test.parts]
    worker = PairWorker("node", str(tp / "column"))
    sizes = [load_tensor(Path(p), ANYWHERE).nbytes for p in paths]
    monkeypatch.setattr(pair_worker, "HELD_BYTES", max(sizes))
    worker.survey(pair, paths)
    surveyed = worker.read_bytes
    worker.parts(pair, paths)
    assert worker.read_bytes == surveyed + sizes[0]  # the first read again, the second taken
    assert worker._held_bytes == 0 and not worker._held
