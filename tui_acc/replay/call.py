"""What a reference implementation receives and returns.

A reference is ``fn(call: Call) -> numpy.ndarray | Replayed``: it recomputes the node's first output
from ``call``'s tensors, or raises ``ReplayImpossible`` saying why it cannot. It works at
``call.precision`` (float64 for a float32 output; float32 for 16-bit outputs, whose rounding is
thousands of times coarser than float32's: the replay's own error stays negligible, at half the
memory and a fraction of the time).

Large outputs are replayed on a sample (``call.sample``): references that can compute only some
output rows (and for a linear, only some output columns) do so with ``call.data`` and
``call.columns`` and say so in ``Replayed.rows`` / ``Replayed.columns``; the others compute every
element, and the comparison takes the same sample of their result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tui_acc.dumps.dtypes import is_float, widened
from tui_acc.errors import TuiAccError
from tui_acc.replay.sampling import Sample

if TYPE_CHECKING:
    from tui_acc.dumps.model import Format

Precision = type[np.floating[Any]]  # the arithmetic's float type
# Call.keyword's key for a fused TorchAir GE op's constituents (graph_text.GraphOp, in order)
CONSTITUENTS = "_constituents"


class ReplayImpossible(TuiAccError):
    """The node cannot be replayed; the message says why ("weights not dumped", "inputs missing: x")."""


class NotSampleable(Exception):
    """The reference cannot compute only the sampled rows of this call (an operand broadcast across
    rows, a normalisation over more than the last dimension): it is replayed whole instead."""


@dataclass(frozen=True)
class ProcessGroup:
    """A collective's process group as msprobe records it: the global ranks it reduces over."""

    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Replayed:
    """A reference's result.

    ``reduction``: the length of the longest sum behind each output element (a matmul's inner
    dimension, a norm's width; 1 for elementwise operators): it widens the tolerance
    (``tolerances/rounding.py``).
    ``notes``: what the reference had to assume (a default epsilon where none was dumped).
    """

    values: np.ndarray
    reduction: int = 1
    notes: tuple[str, ...] = ()
    # which output rows (over the flattened leading dimensions) and columns (the last dimension)
    # ``values`` holds, where the reference computed a sample; None: all of them
    rows: np.ndarray | None = None
    columns: np.ndarray | None = None
    # sqrt(sum_j (sum_i |w_ij x_i|)^2) / ||y||: how much a sum cancels (1 without cancellation); the
    # accumulation's rounding grows with it. Given by references that reduce (linear, matmul).
    condition: float = 1.0
    # how many times the result is rounded to the output's dtype on its way out (an HF RMSNorm
    # rounds the normalised value, then its product with the weight: 2)
    roundings: int = 1
    # an output rounded to integers (a quantisation step): ``values`` as a correct kernel rounds them,
    # ``unrounded`` before the rounding (saturated); a dumped element may be either integer next to
    # an unrounded value within ``step_slack`` (relative: the kernel's own float arithmetic) of a tie
    unrounded: np.ndarray | None = None
    step_slack: float = 0.0
    # where the call has no output of its own (an in-place write): the dumped values the replay is
    # compared with, read back from the record that read what it wrote
    observed: np.ndarray | None = None
    # where the operands are integers (an int8 matmul): the relative rms error their own rounding to
    # integers carries into the output (replay.distance.rounding_noise), 0 otherwise. The kernel is
    # judged against its integer operands; this is what sets its output apart from a float golden's
    quantisation: float = 0.0
    # a copy without arithmetic (a gather of rows): every element must be its source's value
    # exactly, so that one row among many copied from the wrong place is not lost in a tolerance
    exact: bool = False
    # a collective of a gathered dump: the rank whose output ``observed`` is (the farthest from its share)
    rank: int | None = None


@dataclass(frozen=True)
class Call:
    """One node's call at one token on one side, as dumped.

    ``positional``: the call's positional arguments by index, tensors (numpy arrays as dumped) and
    scalars alike (msprobe records both; msit and ATB dump tensors only: ``input_i``, ``intensor_i``).
    ``keyword``: keyword arguments (msprobe's ``input_kwargs``) or an ATB operation's parameters
    (``op_param.json``). ``params``: module parameters where the dump holds them (``weight``, ``bias``).
    """

    name: str
    type: str
    format: Format
    positional: Mapping[int, Any] = field(default_factory=dict)
    keyword: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, np.ndarray] = field(default_factory=dict)
    output_dtype: str = ""
    output_shape: tuple[int, ...] = ()
    precision: Precision = np.float64
    sample: Sample | None = None
    # the flat output index where the two sides differ most: a sample holds its row and column
    focus: int | None = None
    # an in-place write that returns nothing (a KV-cache write): what the next record that reads the
    # written tensors took in (``key``, ``value``: its arguments 1 and 2), and that record's name
    after: Mapping[str, np.ndarray] = field(default_factory=dict)
    after_by: str = ""
    # every dumped output by index, for the references that check more than the first
    # (dumped_call.MULTI_OUTPUT: a rope that returns the query and the key); empty for the rest
    outputs: Mapping[int, np.ndarray] = field(default_factory=dict)
    # a collective of a gathered (sharded) dump: its first input and first output on every rank, in
    # rank order ("input", "output"); empty for the rest
    ranks: Mapping[str, tuple[np.ndarray, ...]] = field(default_factory=dict)
    # an all-to-all of a gathered dump: what each rank's dump records of its call, by name (ATB's
    # op_param.json; msprobe's arguments), for how each rank split its input; empty for the rest
    rank_params: tuple[Mapping[str, Any], ...] = ()

    def whole(self) -> Call:
        """The same call without a sample: every output element is replayed."""
        return replace(self, sample=None)

    def raw(self, index: int, keyword: str | None = None) -> np.ndarray | None:
        """Argument ``index`` (or keyword ``keyword``) as dumped, or None."""
        value = self.keyword.get(keyword) if keyword is not None else None
        if value is None:
            value = self.positional.get(index)
        return value if isinstance(value, np.ndarray) else None

    def tensor(self, index: int, what: str, keyword: str | None = None) -> np.ndarray:
        """Positional argument ``index`` (or keyword ``keyword``) at the call's precision, whole;
        ReplayImpossible if absent."""
        value = self.raw(index, keyword)
        if value is None:
            raise ReplayImpossible(f"inputs missing: {what} (argument {index}) was not dumped")
        return self.wide(value)

    def data(self, index: int, what: str, keyword: str | None = None) -> np.ndarray:
        """Like ``tensor``, but only the sampled rows where the argument has the output's leading
        shape (an activation that each output row is computed from, row by row)."""
        value = self.raw(index, keyword)
        if value is None:
            raise ReplayImpossible(f"inputs missing: {what} (argument {index}) was not dumped")
        return self.wide(self.sampled_rows(value))

    def operand(self, index: int, what: str, keyword: str | None = None) -> np.ndarray:
        """An elementwise operand: the sampled rows where it is row-aligned with the output, as it is
        where it is the same for every row (a vector, a scalar tensor); NotSampleable otherwise."""
        value = self.raw(index, keyword)
        if value is None:
            raise ReplayImpossible(f"inputs missing: {what} (argument {index}) was not dumped")
        if self.sample is None or self.row_aligned(value) or value.ndim <= 1:
            return self.data(index, what, keyword)
        if all(d == 1 for d in value.shape[:-1]):
            return self.wide(value.reshape(1, value.shape[-1]))
        raise NotSampleable(f"{what} {list(value.shape)} is broadcast across the output's rows")

    def elementwise(self, values: np.ndarray | float) -> Replayed:
        """The result of an elementwise operation on ``operand``s: with a sample, its rows (an operand
        the same for every row gives a result the same for every row, broadcast to the sample)."""
        out = np.asarray(values)
        if self.sample is not None:
            width = self.output_shape[-1] if self.output_shape else 1
            out = np.broadcast_to(
                out.reshape(-1, out.shape[-1]) if out.ndim else out, (len(self.sample.rows), width)
            )
        return Replayed(out, rows=self.rows)

    def sampled_rows(self, value: np.ndarray) -> np.ndarray:
        """``value``'s sampled rows, flattened to 2-d, where it is row-aligned with the output;
        else ``value`` itself."""
        if self.sample is None or not self.row_aligned(value):
            return value
        return value.reshape(-1, value.shape[-1])[self.sample.rows]

    def row_aligned(self, value: np.ndarray) -> bool:
        """Whether ``value``'s leading dimensions are the output's (one input row per output row)."""
        return bool(value.ndim) and value.shape[:-1] == self.output_shape[:-1] and len(self.output_shape) > 0

    def optional_tensor(self, index: int, keyword: str | None = None) -> np.ndarray | None:
        """Argument ``index`` (or keyword ``keyword``) at the call's precision, whole; None where it was
        not dumped (an optional input: a weight, a bias)."""
        value = self.raw(index, keyword)
        return self.wide(value) if value is not None else None

    def param(self, name: str) -> np.ndarray:
        """A module parameter at the call's precision; ReplayImpossible("weights not dumped") if the
        dump lacks it."""
        return self.wide(self.raw_param(name))

    def raw_param(self, name: str) -> np.ndarray:
        """Module parameter ``name`` as dumped; ReplayImpossible("weights not dumped") if the dump lacks
        it."""
        value = self.params.get(name)
        if value is None:
            raise ReplayImpossible(f"weights not dumped: this dump holds no '{name}' for {self.name}")
        return value

    @property
    def columns(self) -> np.ndarray | None:
        """The output columns to compute (a reference that can compute some only), or None: all."""
        return self.sample.columns if self.sample is not None else None

    @property
    def focus_column(self) -> int | None:
        """The output column ``focus`` lies in (a linear's sampled columns hold it), or None."""
        if self.focus is None or not self.output_shape or self.output_shape[-1] <= 0:
            return None
        return self.focus % self.output_shape[-1]

    @property
    def rows(self) -> np.ndarray | None:
        """The sampled output rows (indices over the flattened leading dimensions), or None: all of them."""
        return self.sample.rows if self.sample is not None else None

    def wide(self, values: np.ndarray) -> np.ndarray:
        """Float tensors at the call's precision (exact: every narrower float is a subset of
        float32); integers as they are."""
        if is_float(values):
            return widened(values).astype(self.precision, copy=False)
        return values

    def option(self, keyword: str, index: int | None = None, default: Any = None) -> Any:
        """A scalar argument by keyword, else by position, else ``default``."""
        if keyword in self.keyword and not isinstance(self.keyword[keyword], np.ndarray):
            return self.keyword[keyword]
        if index is not None and index in self.positional:
            value = self.positional[index]
            if not isinstance(value, np.ndarray):
                return value
        return default
