"""A sampled replay always computes the element where the two sides differ most (the metrics'
``worst_index``): an error confined to a few columns of a wide linear (a kernel's last eight
output columns wrong) was missed by a random draw of columns four times in five, on a 7B-shaped
pair, and no operator was named (replay/sampling.py).

The fault here is put in columns the seeded draw does not take, so the replay without the focus
misses it, as it did; with the focus (an element of a faulty column, as the worst golden-vs-test
difference is) it is found."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tui_acc.replay.call import Call
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.sampling import linear_columns, output_focus, plan
from tui_acc.replay.torch_ops import linear
from tui_acc.verdicts.replay_check import _judged

NAME = "Functional.linear.13.forward"
ROWS, REDUCTION, COLUMNS, FAULTY = 256, 4096, 1024, 8


def _call(x: np.ndarray, weight: np.ndarray, shape: tuple[int, ...], focus: int | None) -> Call:
    return Call(
        NAME,
        "linear",
        "msprobe",
        positional={0: x, 1: weight},
        output_dtype="bfloat16",
        output_shape=shape,
        precision=np.float32,
        sample=plan(shape, NAME, focus),
        focus=focus,
    )


def test_a_fault_in_columns_the_draw_leaves_out_is_found_through_the_focus() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((ROWS, REDUCTION), dtype=np.float32).astype(ml_dtypes.bfloat16)
    weight = (rng.standard_normal((COLUMNS, REDUCTION), dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    exact = x.astype(np.float64) @ weight.astype(np.float64).T
    shape = (ROWS, COLUMNS)
    sample = plan(shape, NAME)
    assert sample is not None
    drawn = linear_columns(COLUMNS, len(sample.rows), REDUCTION, NAME)
    assert drawn is not None and len(drawn) < COLUMNS // 4  # the columns are sampled
    faulty = np.setdiff1d(np.arange(COLUMNS), drawn)[-FAULTY:]
    wrong = exact.copy()
    wrong[:, faulty] *= 2.0  # the kernel's last eight columns doubled
    dumped = wrong.astype(ml_dtypes.bfloat16)

    def judged(focus: int | None) -> object:
        call = _call(x, weight, shape, focus)
        return _judged("test", NAME, "linear", Gathered(call, dumped, "output.0"), linear(call), "built-in")

    assert judged(None).verdict == "consistent"  # the miss this fixes
    golden = exact.astype(np.float32)
    worst = int(np.argmax(np.abs(dumped.astype(np.float64) - golden)))
    assert worst % COLUMNS in faulty
    found = judged(worst)
    assert found.verdict == "disagrees" and found.sampled is not None
    # and a correct output stays consistent with the focus on its worst rounding
    correct = exact.astype(ml_dtypes.bfloat16)
    call = _call(x, weight, shape, int(np.argmax(np.abs(correct.astype(np.float64) - golden))))
    gathered = Gathered(call, correct, "output.0")
    assert _judged("test", NAME, "linear", gathered, linear(call), "built-in").verdict == "consistent"


def test_the_sample_holds_the_focus_row_and_column() -> None:
    shape = (4096, 512)
    sample = plan(shape, "node", focus=4095 * 512 + 7)
    assert sample is not None and 4095 in sample.rows
    assert list(sample.rows) == sorted(set(sample.rows))
    columns = linear_columns(4096, 16, 11008, "node", focus=4095)
    assert columns is not None and 4095 in columns
    # out of range or absent: the seeded draw alone
    assert np.array_equal(plan(shape, "node", focus=10**12).rows, plan(shape, "node").rows)  # type: ignore[union-attr]


def test_the_focus_is_the_first_outputs_worst_element() -> None:
    rows = [
        {"role": "input", "worst_index": 3},
        {"role": "output", "slot": "output.0", "worst_index": 41},
        {"role": "output", "slot": "output.1", "worst_index": 7},
    ]
    assert output_focus(rows) == 41
    assert output_focus([{"role": "output", "worst_index": None}]) is None
    assert output_focus([{"role": "output", "worst_index": True}]) is None
