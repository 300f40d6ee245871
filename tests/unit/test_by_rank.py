"""A gathered tensor rank by rank (metrics/by_rank.py): each rank's part against the region of the
golden it stands for, so that the detail says which rank's shard is off."""

from __future__ import annotations

import re

import numpy as np

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.gather import part_regions
from tui_acc.dumps.model import AUTO, CONCAT, SUM, TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.metrics.by_rank import by_rank

_RANK = re.compile(r"rank (\d+)(?: (\[[^\]]*\]))?: cosine ([-\d.]+)")


def _ranks(text: str) -> dict[int, tuple[str | None, float]]:
    return {int(r): (where, float(cos)) for r, where, cos in _RANK.findall(text)}


def test_each_part_of_a_concatenation_has_its_slice_and_a_replicated_one_the_whole() -> None:
    columns = part_regions([(4, 2), (4, 2)], AUTO, (4, 4))
    assert columns == ([4, 4], [(slice(None), slice(0, 2)), (slice(None), slice(2, 4))])
    # the golden's leading 1 aside, as the merge does; an annotated dimension as the dump says
    assert part_regions([(3, 8), (5, 8)], AUTO, (1, 8, 8)) == ([8, 8], [(slice(0, 3),), (slice(3, 8),)])
    assert part_regions([(2, 3), (2, 3)], CONCAT + "1", (2, 6)) == (
        [2, 6],
        [(slice(None), slice(0, 3)), (slice(None), slice(3, 6))],
    )
    assert part_regions([(4, 4), (4, 4)], AUTO, (4, 4)) == ([4, 4], [(), ()])
    assert part_regions([(4, 4), (4, 4)], SUM, (4, 4)) is None  # partial sums stand for no region
    assert part_regions([(4, 3), (4, 2)], AUTO, (4, 4)) is None  # nothing they make is the golden


def test_the_rank_whose_shard_is_off_shows_in_its_slice(tmp_path) -> None:
    """A column-parallel output: rank 0's shard is the golden's columns 0-3, rank 1's columns 4-7
    shifted; rank 1's slice is named with its lower cosine, rank 0's is exact."""
    rng = np.random.default_rng(0)
    golden = rng.standard_normal((6, 8)).astype(np.float32)
    shards = [golden[:, :4], golden[:, 4:] + 1.0]
    paths = []
    for rank, shard in enumerate(shards):
        paths.append(tmp_path / f"rank{rank}.npy")
        np.save(paths[-1], np.ascontiguousarray(shard))
    ref = TensorRef("output", "output", str(paths[0]), parts=tuple(paths), merge=AUTO)
    text = by_rank(golden, ref, LoadPolicy.inside(tmp_path))
    assert text is not None
    found = _ranks(text)
    assert found[0] == ("[:, 0:4]", 1.0)
    assert found[1][0] == "[:, 4:8]" and found[1][1] < 0.9
    partial = TensorRef("input.0", "input", str(paths[0]), parts=tuple(paths), merge=SUM)
    assert by_rank(golden, partial, LoadPolicy.inside(tmp_path)) is None


def test_a_wrong_all_reduce_on_one_rank_shows_in_that_ranks_copy(ranks_demo) -> None:
    """The demo's two-rank run: after the faulty all-reduce (the demo's record: token, layer, rank),
    the layer's output every rank holds whole is off on the faulty rank alone."""
    fault = ranks_demo.fault
    comparison = open_comparison(
        ranks_demo.out / "golden", ranks_demo.out / "test", CompareOptions(cache=False)
    )
    frame = comparison.engine.tensors_frame(fault.token)
    layer = ranks_demo.fault_op.split("/")[0]
    [row] = frame.filter((frame["test_node"] == layer) & (frame["slot"] == "output")).to_dicts()
    found = _ranks(row["by_rank"])
    assert set(found) == {0, 1}  # the demo's two ranks
    assert found[fault.rank][1] < found[1 - fault.rank][1]


def test_ranks_whose_sum_the_merge_took_get_no_rank_lines(tmp_path) -> None:
    """Partial sums no collective announced (a vocabulary-parallel lookup): the merge takes their sum,
    which is the golden; each rank alone stands for no region of it."""
    golden = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    partials = [
        np.array([[1.0, 2.0], [0.0, 0.0]], np.float32),
        np.array([[0.0, 0.0], [3.0, 4.0]], np.float32),
    ]
    paths = []
    for rank, part in enumerate(partials):
        paths.append(tmp_path / f"rank{rank}.npy")
        np.save(paths[-1], part)
    ref = TensorRef("output", "output", str(paths[0]), parts=tuple(paths), merge=AUTO)
    assert by_rank(golden, ref, LoadPolicy.inside(tmp_path)) is None
    # one rank's wrong copy of a replicated tensor: still named rank by rank
    np.save(paths[1], golden * 1.5)
    np.save(paths[0], golden)
    text = by_rank(golden, ref, LoadPolicy.inside(tmp_path))
    assert text is not None and set(_ranks(text)) == {0, 1}
