"""What a reference implementation receives and returns.

A reference is ``fn(call: Call) -> numpy.ndarray | Replayed``: it recomputes the node's first output
in float64 from ``call``'s tensors, or raises ``ReplayImpossible`` saying why it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import is_float, widened


class ReplayImpossible(Exception):
    """The node cannot be replayed; the message says why ("weights not dumped", "inputs missing: x")."""


@dataclass(frozen=True)
class Replayed:
    """A reference's result.

    ``reduction``: the length of the longest sum behind each output element (a matmul's inner
    dimension, a norm's width; 1 for elementwise operators): it widens the tolerance (judge.py).
    ``notes``: what the reference had to assume (a default epsilon where none was dumped).
    """

    values: np.ndarray
    reduction: int = 1
    notes: tuple[str, ...] = ()


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
    format: str
    positional: Mapping[int, Any] = field(default_factory=dict)
    keyword: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, np.ndarray] = field(default_factory=dict)
    output_dtype: str = ""

    def tensor(self, index: int, what: str, keyword: str | None = None) -> np.ndarray:
        """Positional argument ``index`` (or keyword ``keyword``) as float64; ReplayImpossible if absent."""
        value = self.keyword.get(keyword) if keyword is not None else None
        if value is None:
            value = self.positional.get(index)
        if not isinstance(value, np.ndarray):
            raise ReplayImpossible(f"inputs missing: {what} (argument {index}) was not dumped")
        return wide(value)

    def optional_tensor(self, index: int, keyword: str | None = None) -> np.ndarray | None:
        value = self.keyword.get(keyword) if keyword is not None else None
        if value is None:
            value = self.positional.get(index)
        return wide(value) if isinstance(value, np.ndarray) else None

    def param(self, name: str) -> np.ndarray:
        """A module parameter as float64; ReplayImpossible("weights not dumped") if the dump lacks it."""
        value = self.params.get(name)
        if value is None:
            raise ReplayImpossible(f"weights not dumped: this dump holds no '{name}' for {self.name}")
        return wide(value)

    def option(self, keyword: str, index: int | None = None, default: Any = None) -> Any:
        """A scalar argument by keyword, else by position, else ``default``."""
        if keyword in self.keyword and not isinstance(self.keyword[keyword], np.ndarray):
            return self.keyword[keyword]
        if index is not None and index in self.positional:
            value = self.positional[index]
            if not isinstance(value, np.ndarray):
                return value
        return default


def wide(values: np.ndarray) -> np.ndarray:
    """float64 for float tensors (exact: every narrower float is a subset); integers as they are."""
    if is_float(values):
        return widened(values).astype(np.float64)
    return values
