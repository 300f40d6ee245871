"""Whether dump.json's records are in the order msprobe wrote them: a tool may have re-sorted them
(``jq -S``, ``json.dump(sort_keys=True)``, a hand edit).

msprobe numbers each API's calls, and each module's, as they run (``Functional.linear.34.forward``,
``Module.model.layers.0.forward.2``) and adds a call's record to dump.json when the call returns
(docs/formats.md §3.2): within one API or module, the counters rise through the file. A file where
they fall was reordered, and its order, which tui-acc takes for the order the calls ran in, is not
that. Nothing else gives it back with certainty: the files' times of a copy are the copy's (in
name order, which agrees with every counter below 10), an archive's are seconds. So the order is
said to be unknown, and a comparison takes the other side's where that one is msprobe's own.
"""

from __future__ import annotations

from tui_acc.dumps.msprobe.passes import forward_counter


def first_disorder(names: list[str]) -> tuple[str, str] | None:
    """The first two forward records of one API or module whose counters fall in this order (the
    earlier named first); None where every counter rises. Backward records are left out: a backward
    call takes its forward call's number and they run in reverse."""
    last: dict[str, tuple[int, str]] = {}
    for name in names:
        counted = forward_counter(name)
        if counted is None:
            continue
        base, count = counted
        if base in last and last[base][0] >= count:
            return last[base][1], name
        last[base] = (count, name)
    return None
