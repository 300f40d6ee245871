"""The records only the test has inside a paired node: a port's own operators (torch_npu's ``NPU.*``
calls, ATB operations) in a module both sides have, which the pairing leaves unmatched and the
verdict replays (``local.py``'s ``LocalChecks.inner``, ``replay_check.replay_node``'s ``inner``).
"""

from __future__ import annotations

from tui_acc.dumps.model import MSPROBE_FORMATS, DumpIndex
from tui_acc.replay.names import replay_names
from tui_acc.replay.registry import Registry

# records that move elements without arithmetic: nothing for a replay to find in them
_MOVES = (
    "t", "transpose", "permute", "view", "reshape", "contiguous", "__getitem__", "split", "chunk",
    "unsqueeze", "squeeze", "flatten", "expand", "narrow", "select", "unflatten", "view_as",
)  # fmt: skip
LAYOUT_ONLY = frozenset(f"Tensor.{name}" for name in _MOVES) | frozenset(
    f"Torch.{name}" for name in ("cat", "stack", "split", "reshape", "transpose", "permute", "flatten")
)


def test_only_inside(
    index: DumpIndex, token: int, node: str, paired: frozenset[str], registry: Registry
) -> list[str]:
    """The test's records inside ``node`` (not inside a paired node within it: those are judged on
    their own) that the golden has no partner for (``paired``: the test's paired names at the
    token), in execution order: those a reference replays, and those with an output that none does
    (their replay says so: what the node adds cannot then be put down to the others), layout-only
    records aside. No data is read."""
    found: list[str] = []
    msprobe = index.format in MSPROBE_FORMATS
    present = index.tokens.get(token, {})

    def visit(name: str) -> None:
        for child in index.tree.children(name):
            if child in paired:
                continue
            # an ATB tree is every token's: a prefill's SelfAttention and a decode step's
            # PagedAttention share their place in it, and only one ran at this token
            if child not in present and not any(n.name in present for n in index.tree.preorder(child)):
                continue
            if msprobe and child.startswith("Module.") and index.tree.children(child):
                visit(child)  # a module only the test has: what is inside it counts, not its record
                continue
            names = replay_names(index, child)
            replayed = registry.find(*names) is not None
            outputs = any(r.role == "output" for r in index.tensors(token, child))
            unreplayed = outputs and names[0] not in LAYOUT_ONLY
            if replayed or unreplayed:
                found.append(child)
            visit(child)

    visit(node)
    return found
