"""What a re-dump asks for (Selection, RedumpError) and how dumpers spell it: tokens, ATB op ids, msprobe."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tui_acc.dumps.model import DumpIndex
from tui_acc.dumps.msprobe.passes import is_module
from tui_acc.errors import TuiAccError

_ATB_PART = re.compile(r"^(\d+)_[A-Za-z0-9]")


class RedumpError(TuiAccError, ValueError):
    """A re-dump that cannot be built: the message says what to change."""


@dataclass(frozen=True)
class Selection:
    """What to re-dump: one token of one side, and optionally a few nodes (their subtrees)."""

    side: str  # "golden" or "test"
    token: int
    step: int  # the execution count the dumper numbers that token by
    nodes: tuple[str, ...] = ()  # that side's node names; empty: every node
    atb: bool = False  # the nodes are ATB operations ("3_LlamaLayer/1_Attention")
    # tui-acc hunt's narrower and wider asks: several tokens (every one when ``every_token``), the
    # nodes themselves without their subtrees, their outputs only
    tokens: tuple[int, ...] = ()
    every_token: bool = False
    subtree: bool = True
    outputs_only: bool = False
    # TorchAir: each token's graph and that graph's own step (token, graph, step), which its dump
    # settings name instead of the token
    runs: tuple[tuple[int, str, int], ...] = ()

    @property
    def token_list(self) -> str:
        """``{tokens}``: ``0-7``, ``1,4`` or ``3``; empty for every token."""
        return "" if self.every_token else spell_tokens(self.tokens or (self.token,))

    @property
    def step_range(self) -> tuple[int, int] | None:
        """The execution counts the tokens run at (first, last), None for every token."""
        if self.every_token:
            return None
        tokens = self.tokens or (self.token,)
        shift = self.step - self.token  # MindIE's warm-up: the same offset for every token
        return min(tokens) + shift, max(tokens) + shift

    @property
    def one_token(self) -> bool:
        """Whether exactly one token is selected."""
        return not self.every_token and len(self.tokens or (self.token,)) == 1


def spell_tokens(tokens: Sequence[int]) -> str:
    """``0-7`` for a run of tokens, ``1,4,6`` otherwise (``TUI_ACC_TOKENS``)."""
    ordered = sorted(set(tokens))
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(t) for t in ordered)


def parse_tokens(text: str) -> list[int] | None:
    """``TUI_ACC_TOKENS`` read back: ``0-7``, ``1,4``, ``0-2,5`` -> the tokens; empty -> None (every
    token). For a dumper script honouring the contract.

    Raises:
        ValueError: the text is not such a list.
    """
    if not text.strip():
        return None
    tokens: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"TUI_ACC_TOKENS={text!r}: expected tokens such as 3, 0-7 or 1,4")
        tokens += range(int(first), int(last) + 1) if dash else [int(first)]
    return tokens


def atb_id_chain(name: str) -> str | None:
    """``3_LlamaLayer/1_Attention/0_LinearOperation`` -> ``3_1_0`` (msit's ``-ids``, docs/formats.md §2.2)."""
    parts = [_ATB_PART.match(part) for part in name.split("/")]
    if not parts or any(p is None for p in parts):
        return None
    return "_".join(p.group(1) for p in parts if p is not None)


def msprobe_level(names: Sequence[str]) -> str:
    """L0 for modules, L1 for API calls (``Functional.linear.43.forward``), mix for both; debug for
    single-point saves (``mlp1.0.debug``).

    msprobe's ``list`` matches by substring, so an API call's full name picks that one call.
    """
    if names and all(name.endswith(".debug") for name in names):
        return "debug"
    apis = [is_module(name) for name in names]
    return "L0" if all(apis) else "L1" if not any(apis) else "mix"


def msprobe_module(name: str) -> str:
    """``Module.model.layers.2.mlp.MLP.forward.3`` -> ``Module.model.layers.2.mlp.MLP.forward``."""
    return re.sub(r"\.\d+$", "", name)


def graph_runs(index: DumpIndex) -> tuple[tuple[int, str, int], ...]:
    """A TorchAir dump's runs as ``Selection.runs`` holds them: (token, graph, that graph's step)."""
    return tuple((token, graph, step) for token, (graph, step) in sorted(index.runs.items()))
