"""Which forward pass (token) each msprobe record belongs to, at every dump level.

msprobe numbers calls across the whole run, so a token has to be found from the call stream:

* **L0 and mix** (module records present): a token is one call of the top-level modules
  (``Module.model.LlamaModel.forward.k`` and ``Module.lm_head.Linear.forward.k`` are token k);
  every record below such a call belongs to it. API records with no parent are the model's own
  top-level code when they completed inside a token's span of the stream, and ``generate()``'s
  otherwise.
* **L1** (API records only, ``construct.json`` is ``{}``): a pass opens with the first
  ``Functional.embedding`` call and closes with the first record whose output carries the
  vocabulary dimension (the embedding table's row count): the logits. What ``generate()`` itself
  calls before, between and after the passes (``Torch.isin``, ``Tensor.any``, ``Torch.argmax``)
  belongs to no token.

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
    else:
        passes = _by_embedding(order, data)
    passes.logits = _logits_record(order, data, parents, passes)
    passes.stable = _stable_names(order, parents, passes.token_of)
    return passes


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
    if not any(api_of(name) == EMBEDDING for name in order):
        passes.notes.append(
            f"no {EMBEDDING} call in the dump, so its forward passes cannot be told apart: "
            "every record is shown as token 0"
        )
        passes.token_of = dict.fromkeys(order, 0)
        return passes
    token, vocab, open_pass, unclosed = -1, None, False, 0
    for name in order:
        if api_of(name) == EMBEDDING:
            rows = _embedding_rows(data.get(name))
            # the token table again (not GPT-2's position table) while a pass is open: that pass
            # never reached a vocabulary-wide output, and a new one starts here
            if not open_pass or (rows is not None and rows == vocab):
                unclosed += open_pass
                token, open_pass, vocab = token + 1, True, rows
        if not open_pass:
            passes.between.append(name)
            continue
        passes.token_of[name] = token
        if vocab is not None and vocab in output_last_dims(data.get(name)):
            open_pass = False
    unclosed += open_pass
    if unclosed:
        passes.notes.append(
            f"{unclosed} forward passes never reached an output as wide as the embedding table "
            f"({vocab if vocab is not None else 'shape not recorded'}): their ends, and so their logits, "
            "are guessed; --logits-node names the logits"
        )
    return passes


def _logits_record(
    order: list[str], data: Mapping[str, Any], parents: Mapping[str, str | None], passes: Passes
) -> str | None:
    """The first token's logits: its first record with the vocabulary as last output dimension,
    or the outermost module around it that outputs the same (``Module.lm_head.Linear.forward.0``)."""
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
            for n in order
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
