"""The bounds on the work a pickle may ask for (depth, hashing, keys, size), and ``measure``, which
checks an unpickled object against them.

A few hundred bytes of pickle can describe an object too deep or too large to touch: 200,000 tuples
inside each other (hashing one as a dict key overflows the C stack), or 60 levels of memo
references, each tuple holding the one before twice (hashing that walks 2^60 tuples, in C, deaf to
signals). So the work is bounded, not only the bytes: a pickle is at most ``MAX_PICKLE_BYTES`` long
(so it runs at most as many opcodes), containers nest at most ``MAX_DEPTH`` deep, hashing gets
``MAX_WORK`` steps, one for every element of every key hashed (a tuple's elements counted with memo
references written out), a dict or set holds at most ``MAX_KEYS`` keys (ints a multiple of 2^61 - 1
apart share a hash, and each one inserted probes every one before it), and the object returned,
written out in full, is at most ``MAX_WORK`` items.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from tui_acc.dumps.torchfile.refusals import TorchFileError

MAX_DEPTH = 100  # containers inside containers: torch's files nest a few deep, a dict of lists at most
MAX_WORK = 1 << 22  # elements hashed per pickle, and items in the object written out
# keys of one dict or set: a tensor file's hold a few (SGLang's meta); 16,384 keys sharing a hash take
# about a second to insert, the 250,000 a 4 MiB pickle can hold most of an hour
MAX_KEYS = 1 << 14
# A tensor file's pickle is a few hundred bytes a tensor (SGLang's dict, a state dict's thousands of
# tensors: well under a MiB); as each opcode is a byte at least, this bounds the opcodes run too
MAX_PICKLE_BYTES = 1 << 22

# what the interpreter builds that holds other objects (a dict's subclasses are its SafeCalls')
CONTAINERS = frozenset({list, tuple, dict, set, OrderedDict, Counter})


def check_keys(count: int) -> None:
    """Refuse a dict or set of more than MAX_KEYS keys."""
    if count > MAX_KEYS:
        raise TorchFileError(
            f"data.pkl puts more than {MAX_KEYS:,} keys in one dict or set: refused (keys may share a "
            "hash, and inserting each would probe all the others)"
        )


def measure(obj: object) -> None:
    """Check an unpickled object: containers at most MAX_DEPTH deep, at most MAX_WORK items when
    written out in full (every memo reference expanded), no container inside itself. Each container
    is visited once (a DAG's written-out size is added up, not walked), without recursion."""
    if type(obj) not in CONTAINERS:  # a tensor file's usual object: one array
        return
    sizes: dict[int, int] = {}  # a container's items written out, itself included, once finished
    # (a container, None) to measure; (a container, its containers, its item count) once they are
    pending: list[tuple[object, list[object] | None, int]] = [(obj, None, 0)]
    path: set[int] = set()  # the containers being measured: meeting one again is a cycle
    while pending:
        item, inner, count = pending.pop()
        key = id(item)
        if inner is not None:  # its inner containers are measured: now itself
            path.discard(key)
            size = 1 + count + sum(sizes[id(child)] - 1 for child in inner)
            if size > MAX_WORK:
                raise TorchFileError(
                    f"data.pkl's object holds more than {MAX_WORK:,} items when its memo references "
                    "are written out: refused as forged"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in path:
            raise TorchFileError("data.pkl's object contains itself: refused (torch's files never do)")
        if len(path) >= MAX_DEPTH:
            raise TorchFileError(f"data.pkl nests containers more than {MAX_DEPTH} deep: refused as forged")
        children = _children(item)
        # map(type) and set() run in C: a container of leaves only (a list of names, a state dict's
        # values) costs no Python step a child
        has_nested = not CONTAINERS.isdisjoint(map(type, children))
        nested = [child for child in children if type(child) in CONTAINERS] if has_nested else []
        path.add(key)
        pending.append((item, nested, len(children)))
        pending.extend((child, None, 0) for child in nested)


def _children(item: object) -> list[object] | tuple[object, ...]:
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, set):
        return list(item)
    assert isinstance(item, (list, tuple))
    return item
