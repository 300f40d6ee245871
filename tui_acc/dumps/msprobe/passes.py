"""Which forward pass (token) each msprobe record belongs to, at every dump level.

msprobe numbers calls across the whole run, so a token has to be found from the call stream:

* **L0 and mix** (module records present): a token is one call of the top-level modules
  (``Module.model.LlamaModel.forward.k`` and ``Module.lm_head.Linear.forward.k`` are token k);
  every record below such a call belongs to it. API records with no parent are the model's own
  top-level code when they completed inside a token's span of the stream, and ``generate()``'s
  otherwise.
* **L1** (API records only, ``construct.json`` is ``{}``): each call of the token embedding
  (``Functional.embedding`` over a table of the first one's row count, not GPT-2's position
  table) opens a pass, which runs up to the next such call. The pass ends, and its logits are, at
  its last projection (``Functional.linear``, a matmul) whose output carries the vocabulary
  dimension: the lm_head's, not an MLP projection that happens to be as wide. What ``generate()``
  itself calls before the first pass and after each pass's logits (``Torch.isin``, ``Tensor.any``,
  ``Torch.argmax``) belongs to no token.

Records of a token also get a *stable name*, the same at every token (``Functional.linear#14``
for the 15th ``F.linear`` call of the pass), so that "the same operator" can be found at another
token although msprobe's counters keep running.

See docs/formats.md §3.4.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tui_acc.dumps.model import logical_name

_MODULE_CALL = re.compile(r"^Module\..*\.(forward|backward)\.(\d+)$")
_API_CALL = re.compile(r"^(.*)\.(\d+)\.(forward|backward)$")
EMBEDDING = "Functional.embedding"
# projections named by their function alone (linear and matmul variants are found by name)
_PRODUCTS = frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "npu_bmmV2"})
# generate()'s own records per gap between passes, at most: greedy search makes 7 to 10 under
# risk_level FOCUS and 22 to 29 under ALL (a tiny Llama and Qwen3, transformers 5); sampling's logits
# processors add a few more
_GENERATE_CALLS = 48
_EXAMPLES = 5


def is_module(name: str) -> bool:
    """Whether a record is a module's call (``Module.model.layers.0.mlp.MLP.forward.3``) rather
    than an API call's."""
    return bool(_MODULE_CALL.match(name))


def api_of(name: str) -> str | None:
    """``Functional.linear.5.forward`` -> ``Functional.linear``; None for module records."""
    if is_module(name):
        return None
    match = _API_CALL.match(name)
    return match.group(1) if match else None


@dataclass
class Passes:
    """The records of each token, what lies between the tokens, and where the logits are."""

    token_of: dict[str, int] = field(default_factory=dict)
    between: list[str] = field(default_factory=list)  # generate()'s own records: no token's
    logits: str | None = None  # the record holding the first token's logits, when it can be told
    stable: dict[str, str] = field(default_factory=dict)  # record -> its name at every token
    notes: list[str] = field(default_factory=list)


def split_passes(order: list[str], data: Mapping[str, Any], parents: Mapping[str, str | None]) -> Passes:
    """Assign every record of ``order`` (dump.json order: completion order) to a token or to none."""
    top = tops(order, parents)
    if any(is_module(t) for t in top.values()):
        passes = _by_module_calls(order, top)
        passes.logits = _logits_record(order, data, parents, passes)
    else:
        passes = _by_embedding(order, data)
    passes.stable = _stable_names(order, parents, passes.token_of)
    return passes


def forward_counter(name: str) -> tuple[str, int] | None:
    """What a forward record's counter counts (the API, or the module without its call index) and
    the counter: ``Functional.linear.5.forward`` -> (``Functional.linear``, 5),
    ``Module.model.norm.RMSNorm.forward.2`` -> (``Module.model.norm.RMSNorm.forward``, 2); None for
    a backward record or a name that carries none."""
    call = _MODULE_CALL.match(name)
    if call is not None:
        return (name[: call.start(2) - 1], int(call.group(2))) if call.group(1) == "forward" else None
    api = _API_CALL.match(name)
    if api is not None and api.group(3) == "forward":
        return api.group(1), int(api.group(2))
    return None


def module_call_index(name: str) -> int | None:
    """``Module.model.LlamaModel.forward.3`` -> 3; None for anything but a module call."""
    call = _MODULE_CALL.match(name)
    return int(call.group(2)) if call else None


def tops(names: list[str], parents: Mapping[str, str | None]) -> dict[str, str]:
    """The outermost record above each name (itself when it has none).

    Each chain is walked once, so a deep, malformed tree stays linear."""
    found: dict[str, str] = {}
    for name in names:
        chain = {name: None}  # ordered, with O(1) lookups
        last = name
        while last not in found and (parent := parents.get(last)) and parent not in chain:
            chain[parent] = None
            last = parent
        found.update(dict.fromkeys(chain, found.get(last, last)))
    return found


def _by_module_calls(order: list[str], top: dict[str, str]) -> Passes:
    passes = Passes()
    loose = []  # API records with no module above them
    for position, name in enumerate(order):
        call = module_call_index(top[name])
        if call is not None:
            passes.token_of[name] = call
        else:
            loose.append((position, name))
    spans: dict[int, list[int]] = {}
    for position, name in enumerate(order):
        token = passes.token_of.get(name)
        if token is not None:
            span = spans.setdefault(token, [position, position])
            span[1] = position
    for position, name in loose:
        inside = [t for t, (first, last) in spans.items() if first < position < last]
        if inside:
            passes.token_of[name] = inside[0]
        else:
            passes.between.append(name)
    return passes


def _by_embedding(order: list[str], data: Mapping[str, Any]) -> Passes:
    passes = Passes()
    opens = _pass_openings(order, data)
    if not opens:
        passes.notes.append(
            f"no {EMBEDDING} call in the dump, so its forward passes cannot be told apart: "
            "every record is shown as token 0"
        )
        passes.token_of = dict.fromkeys(order, 0)
        return passes
    vocab = _embedding_rows(data.get(order[opens[0]]))
    passes.between += order[: opens[0]]  # generate()'s preparation: position ids, masks
    guessed = 0
    for token, start in enumerate(opens):
        stop = opens[token + 1] if token + 1 < len(opens) else len(order)
        end, found = _pass_end(order, data, start, stop, vocab)
        guessed += not found
        passes.token_of.update(dict.fromkeys(order[start : end + 1], token))
        passes.between += order[end + 1 : stop]
        if token == 0 and _is_projection(order[end]):
            passes.logits = order[end]
    if guessed:
        passes.notes.append(
            f"{guessed} forward passes never reached an output as wide as the embedding table "
            f"({vocab if vocab is not None else 'shape not recorded'}) in a projection: their ends, and "
            "so their logits, are guessed (each pass's last projection before the next embedding); "
            "--logits-node names the logits"
        )
    return passes


def _pass_openings(order: list[str], data: Mapping[str, Any]) -> list[int]:
    """Where each pass opens: the first embedding call, then every one over a table of its row count
    (GPT-2's position table, of another, opens none)."""
    opens: list[int] = []
    vocab: int | None = None
    for position, name in enumerate(order):
        if api_of(name) != EMBEDDING:
            continue
        rows = _embedding_rows(data.get(name))
        if not opens:
            opens.append(position)
            vocab = rows
        elif rows is not None and rows == vocab:
            opens.append(position)
    return opens


def _pass_end(
    order: list[str], data: Mapping[str, Any], start: int, stop: int, vocab: int | None
) -> tuple[int, bool]:
    """The position of a pass's logits in ``order[start:stop]``, and whether it was found by width.

    The logits are the lm_head's projection, the pass's last one as wide as the vocabulary (an MLP
    may be as wide, but comes before it); where none is, the pass's last projection (a padded
    vocabulary); where the pass has no projection at all, everything up to the next pass is kept.
    """
    last_projection = None
    for position in range(stop - 1, start - 1, -1):
        name = order[position]
        if not _is_projection(name):
            continue
        if vocab is not None and vocab in output_last_dims(data.get(name)):
            return position, True
        if last_projection is None:
            last_projection = position
    return (last_projection, False) if last_projection is not None else (stop - 1, False)


def _is_projection(name: str) -> bool:
    """A linear map's API call (``Functional.linear``, ``Torch.matmul``, ``Tensor.__matmul__``,
    ``NPU.npu_quant_matmul``...): the only kind of call that makes logits from hidden states."""
    api = api_of(name)
    if api is None:
        return False
    function = api.rsplit(".", 1)[-1]
    return "linear" in function or "matmul" in function or function in _PRODUCTS


def set_aside(passes: Passes, data: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """What to tell the user of the records outside every pass: a note naming how many and the
    first few, and a warning where they look like the model's own arithmetic (projections, a
    softmax narrower than the vocabulary: sampling's is as wide) or are more than ``generate()``
    makes. (None, None) where every record is in a pass."""
    between = passes.between
    if not between:
        return None, None
    examples = ", ".join(between[:_EXAMPLES]) + (", ..." if len(between) > _EXAMPLES else "")
    note = (
        f"{len(between)} records were made between forward passes (generate()'s own calls: "
        f"{examples}): they belong to no token and are not compared"
    )
    vocab = _vocabulary(passes, data)
    arithmetic = [
        name
        for name in between
        if _is_projection(name)
        or (
            (api_of(name) or "").lower().endswith("softmax")
            and (vocab is None or vocab not in output_last_dims(data.get(name)))
        )
    ]
    gaps = len(set(passes.token_of.values())) + 1  # before, between and after the passes
    if not arithmetic and len(between) <= _GENERATE_CALLS * gaps:
        return note, None
    said = (
        f"{len(arithmetic)} of them are model arithmetic ({', '.join(arithmetic[:_EXAMPLES])})"
        if arithmetic
        else f"more than generate() makes ({_GENERATE_CALLS} per pass)"
    )
    warning = (
        f"{len(between)} records lie outside every forward pass and are not compared; {said}: the "
        "passes may be split wrong (each runs from its embedding call to its last projection as wide "
        "as the vocabulary, docs/formats.md §3.4)"
    )
    return note, warning


def _vocabulary(passes: Passes, data: Mapping[str, Any]) -> int | None:
    """The token embedding's row count, from the first embedding call in a pass."""
    return next(
        (
            _embedding_rows(data.get(name))
            for name in passes.token_of
            if api_of(name) == EMBEDDING and _embedding_rows(data.get(name)) is not None
        ),
        None,
    )


def _logits_record(
    order: list[str], data: Mapping[str, Any], parents: Mapping[str, str | None], passes: Passes
) -> str | None:
    """The first token's logits at mix: its last record with the vocabulary as last output dimension
    (the lm_head's, not an MLP's as wide), or the outermost module around it that outputs the same
    (``Module.lm_head.Linear.forward.0``)."""
    first_token = min(passes.token_of.values(), default=None)
    vocab = next(
        (
            _embedding_rows(data.get(n))
            for n in order
            if api_of(n) == EMBEDDING and passes.token_of.get(n) == first_token
        ),
        None,
    )
    if vocab is None:
        return None
    found = next(
        (
            n
            for n in reversed(order)
            if passes.token_of.get(n) == first_token and vocab in output_last_dims(data.get(n))
        ),
        None,
    )
    while found is not None:
        parent = parents.get(found)
        if not parent or passes.token_of.get(parent) != first_token:
            break
        if vocab not in output_last_dims(data.get(parent)):
            break
        found = parent
    return found


def _stable_names(
    order: list[str], parents: Mapping[str, str | None], token_of: Mapping[str, int]
) -> dict[str, str]:
    """API records are numbered by their order among the same API under the same parent."""
    stable: dict[str, str] = {}
    counts: Counter[tuple[int, str, str]] = Counter()
    for name in order:
        api = api_of(name)
        token = token_of.get(name)
        if api is None or token is None:
            continue
        parent = parents.get(name) or ""
        key = (token, parent, api)
        prefix = f"{logical_name(parent)}/" if parent else ""
        stable[name] = f"{prefix}{api}#{counts[key]}"
        counts[key] += 1
    return stable


def _embedding_rows(entry: Any) -> int | None:
    """The table's row count (the vocabulary) of an ``F.embedding(ids, table)`` record."""
    if not isinstance(entry, dict):
        return None
    args = entry.get("input_args") or []
    table = args[1] if len(args) > 1 else (entry.get("input_kwargs") or {}).get("weight")
    shape = table.get("shape") if isinstance(table, dict) else None
    return int(shape[0]) if isinstance(shape, list) and len(shape) == 2 else None


def output_last_dims(entry: Any) -> set[int]:
    """The last dimension of every tensor a dump.json record outputs, nested lists and dicts
    walked (a record whose outputs end in the vocabulary's size holds logits); empty for anything
    that is not a record."""
    dims: set[int] = set()
    if not isinstance(entry, dict):
        return dims
    stack = [entry.get("output")]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            shape = item.get("shape")
            if item.get("type") == "torch.Tensor" and isinstance(shape, list) and shape:
                dims.add(int(shape[-1]))
            elif "type" not in item:
                stack.extend(item.values())
    return dims
