"""The shapes of the metric rows, declared once each as a ``TypedDict``, shared by every front end.

Every field may be None: a row that could not be computed carries its ``error`` and no metrics.
Nothing here imports polars: the screens that only read rows (the token list first of all) need
these names before the first frame, and polars takes about 0.2 s to import. ``schema.py`` derives
the frames' polars types from these declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class Metrics(TypedDict, total=False):
    """How far the test tensor is from the golden one."""

    cosine: float | None
    max_abs_err: float | None
    mean_abs_err: float | None
    max_rel_err: float | None
    mean_rel_err: float | None
    rel_euclidean: float | None
    abs_euclidean: float | None
    rmse: float | None
    kl: float | None
    thousandth_ratio: float | None
    five_thousandths_ratio: float | None


class Sufficient(TypedDict, total=False):
    """Per-tensor sums from which any aggregate (a layer, a token) is exact without re-reading data."""

    n: int | None
    sum_gg: float | None
    sum_tt: float | None
    sum_gt: float | None
    sum_dd: float | None


class _TensorKey(TypedDict, total=False):
    token: int
    golden_node: str
    test_node: str
    slot: str
    role: str
    passed: bool


class _TensorFacts(TypedDict, total=False):
    numel: int | None
    golden_dtype: str | None
    test_dtype: str | None
    golden_shape: str | None
    test_shape: str | None
    golden_nan: int | None
    golden_inf: int | None
    test_nan: int | None
    test_inf: int | None
    golden_max: float | None
    golden_min: float | None
    golden_mean: float | None
    test_max: float | None
    test_min: float | None
    test_mean: float | None
    golden_norm: float | None
    test_norm: float | None
    golden_top1: int | None
    test_top1: int | None
    topk_overlap: float | None
    top1_logprob_gap: float | None
    top1_mutual: bool | None
    worst_index: int | None
    worst_golden: float | None
    worst_test: float | None


class _StatisticsDiffs(TypedDict, total=False):
    """Statistics-only dumps: what was recorded instead of the data, and how far apart it is."""

    stats_only: bool | None
    golden_checksum: str | None
    test_checksum: str | None
    golden_is_nan: bool | None
    test_is_nan: bool | None
    max_diff: float | None
    min_diff: float | None
    mean_diff: float | None
    norm_diff: float | None
    max_rel_diff: float | None
    min_rel_diff: float | None
    mean_rel_diff: float | None
    norm_rel_diff: float | None


class NoiseFloor(TypedDict, total=False):
    """With ``--baseline``: how far a clean run at the test's dtype is from the golden at the same
    tensor, and the test's error over it (``noise_ratio``: RMSE over the baseline's RMSE; for
    statistics-only rows, the norms' relative differences). Never kept in the disk cache: they
    depend on which baseline was given."""

    noise_ratio: float | None
    baseline_cosine: float | None
    baseline_rel_euclidean: float | None
    baseline_rmse: float | None


NOISE_FIELDS = tuple(NoiseFloor.__annotations__)


class Anomaly(TypedDict, total=False):
    """A single dump's check (anomalies/rules.py): what is wrong with the tensor on its own, and its
    figure (a count, the value at float16's limit, a jump's ratio)."""

    anomaly: str | None
    anomaly_figure: float | None


ANOMALY_FIELDS = tuple(Anomaly.__annotations__)


class _TensorTail(TypedDict, total=False):
    error: str | None
    # a gathered tensor: each rank's part against its region of the golden (metrics/by_rank.py)
    by_rank: str | None
    golden_path: str
    test_path: str


class TensorRow(
    _TensorKey,
    Metrics,
    _TensorFacts,
    Sufficient,
    _StatisticsDiffs,
    _TensorTail,
    NoiseFloor,
    Anomaly,
    total=False,
):
    """One golden/test tensor pair of one node and token."""


class TokenRow(TypedDict, total=False):
    """A token's logits verdict: ``verdict`` is pass, fail, near-tie (the argmax flipped between
    near-equal candidates) or error."""

    token: int | None
    passed: bool | None
    verdict: str | None
    top1_logprob_gap: float | None
    cosine: float | None
    kl: float | None
    max_abs_err: float | None
    rel_euclidean: float | None
    golden_top1: int | None
    test_top1: int | None
    topk_overlap: float | None
    golden_dtype: str | None
    test_dtype: str | None
    # the dtype the test computed its logits in where a Cast to a wider one carried them (TorchAir's
    # Cast of the logits to float32): the logits' bounds are that dtype's
    computed_in: str | None
    shape: str | None
    node: str | None
    test_node: str | None
    stats_only: bool | None
    norm_rel_diff: float | None
    max_diff: float | None
    mean_diff: float | None
    error: str | None
    noise_ratio: float | None
    baseline_cosine: float | None
    baseline_rel_euclidean: float | None
    baseline_rmse: float | None
    # every token's operators judged (--all-tokens): how many are local, and the first of them
    local_ops: int | None
    first_local: str | None
    # a single dump's check: how many operators an anomaly starts at, the first, and what it is
    anomalies: int | None
    first_anomaly: str | None
    anomaly: str | None


class NodeMeta(TypedDict, total=False):
    """What a node is, before any of its tensors is compared (from the pairing)."""

    token: int
    order: int
    depth: int
    golden_node: str
    test_node: str
    golden_type: str
    test_type: str


class _NodeVerdicts(TypedDict, total=False):
    inputs_passed: bool | None
    inputs_effective: bool | None  # what fed it, where its inputs were not dumped or overwritten
    inputs_from: str | None  # "files", or the node whose outputs judged its inputs
    outputs_passed: bool | None
    # its outputs fail only because a file could not be read: no evidence either way
    outputs_unknown: bool | None
    params_passed: bool | None
    suspect: bool | None  # the error starts here (label "local")
    label: str | None  # local, inherited or contains
    # which rule judged it (verdicts/rules.py: replay, weights, error model, baseline, threshold),
    # the error it measured, the most it allows, and why, in words
    rule: str | None
    local_error: float | None
    expected_error: float | None
    reason: str | None
    # a record only the test has inside it (a port's fused operator) whose replay disagrees: the
    # operator the verdict names
    operator: str | None
    input_error: float | None  # the largest relative error among its inputs (or what fed it)
    output_error: float | None  # the largest among its outputs
    input_cosine: float | None
    worst_output: str | None
    in_place: str | None


class _NodeWorstOutput(TypedDict, total=False):
    """Copied from the node's worst output."""

    golden_dtype: str | None
    test_dtype: str | None
    shape: str | None
    stats_only: bool | None
    norm_rel_diff: float | None
    max_diff: float | None
    min_diff: float | None
    mean_diff: float | None
    error: str | None  # the first error among its tensors


class _NodeWithin(TypedDict, total=False):
    """A module's aggregate of every output inside it, as one flat tensor (metrics/aggregate.py)."""

    tensors_within: int | None
    cosine_within: float | None
    rel_euclidean_within: float | None
    rmse_within: float | None


class NodeRow(
    NodeMeta, _NodeVerdicts, Metrics, _NodeWorstOutput, _NodeWithin, NoiseFloor, Anomaly, total=False
):
    """One node pair of a token, judged (unless ``provisional``)."""

    # an early row, sent while the nodes before it are computed: metrics and output verdict only
    # (a state of the row on its way to the screen, not a column of its frame)
    provisional: bool


# A row of any of the shapes above, read by column name (the tables, exports and the cache).
Row = Mapping[str, Any]

# What identifies the same data on one side of a tensor row (``golden_max``, ``test_norm``...): equal
# shape, dtype, max, min, mean and L2 norm, on a tensor that is not constant (equal by coincidence
# too often). It finds an in-place op's input saved after the op, and a module's output in an op inside.
SAME_DATA_FIELDS = ("shape", "dtype", "max", "min", "mean", "norm")
