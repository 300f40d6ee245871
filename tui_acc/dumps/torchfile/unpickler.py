"""The pickles ``torch.save`` writes, run by a small interpreter that can build nothing it is not told to.

``torch.load(weights_only=True)`` does not use the standard library's unpickler either: it runs its
own loop over the few opcodes ``torch.save`` writes (torch/_weights_only_unpickler.py, ``Unpickler.load``)
and refuses every other. This one runs the same opcodes, with two differences that matter for a
hostile file:

- the standard unpickler allocates a counted bytes object before reading it, so a forged length asks
  for gigabytes (BINBYTES8, BYTEARRAY8); here every count is checked against the bytes that remain;
- the standard unpickler appends to, sets items of, or sets the state of whatever is on its stack
  (``obj.extend``, ``obj[key] = value``, ``__setstate__``); here APPEND works on lists only, SETITEM
  on dicts only (as torch's loop), and BUILD (setting an object's state, which torch.save writes
  only for objects outside tensors) is left to torch.

A global names what to call: ``find_class`` (a subclass's) turns the name into a ``SafeCall`` or a
plain value, or refuses it. Only a ``SafeCall`` can be called, by REDUCE or NEWOBJ.

Its bounds on the work a pickle may ask for, and ``measure``: pickle_bounds.py. Messages show pickled
values through ``brief`` (reprlib: a few levels, a few items), never through repr.
"""

from __future__ import annotations

import _compat_pickle
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tui_acc.dumps.torchfile.pickle_bounds import (
    CONTAINERS,
    MAX_DEPTH,
    MAX_PICKLE_BYTES,
    MAX_WORK,
    check_keys,
    measure,
)
from tui_acc.dumps.torchfile.refusals import NeedsTorch, RefusedGlobal, TorchFileError, brief


@dataclass(frozen=True, slots=True)
class SafeCall:
    """A function the pickle may call (REDUCE, NEWOBJ): one of ours, under the name the pickle used.
    ``hashes``: it hashes the members of its argument (set, Counter, OrderedDict), which must then be
    a list, tuple or dict; each member is charged to the pickle's work."""

    name: str
    function: Callable[..., object]
    hashes: bool = False


_DICT_TYPES = (dict, OrderedDict, Counter)  # torch's _check_set_item_target
# what torch's weights_only loader lets a pickle call outside torch that hashes what it is given
HASHING_CALLS = {
    "collections.OrderedDict": SafeCall("OrderedDict", OrderedDict, hashes=True),
    "collections.Counter": SafeCall("Counter", Counter, hashes=True),
    "builtins.set": SafeCall("set", set, hashes=True),
}


class RestrictedUnpickler:
    """Runs a pickle of torch.save's opcodes. Subclasses say what a global is (``find_class``) and
    what a persistent id is (``persistent_load``)."""

    def __init__(self, data: bytes, start: int = 0) -> None:
        self._data = data
        self._at = start
        self._end = min(len(data), start + MAX_PICKLE_BYTES)  # no opcode reads past it
        self._work = 0  # elements hashed so far
        # every tuple built holding a tuple, by id: (the tuple, kept alive so that its id is not
        # reused; its depth; its elements written out, at most MAX_WORK + 1). A tuple not here holds
        # no tuple: depth 1, its elements its own.
        self._tuples: dict[int, tuple[tuple[object, ...], int, int]] = {}
        # set at STOP: fewer than MAX_DEPTH containers were built and none was recalled from the memo,
        # so the object is a tree no deeper than its containers and no larger than its opcodes (its
        # bytes): it needs no measuring (a tensor file's dict and meta)
        self._small_tree = False

    def find_class(self, module: str, name: str) -> object:
        """GLOBAL: what ``module.name`` stands for. Here every global is refused (RefusedGlobal);
        a subclass allows the ones tensors need."""
        raise RefusedGlobal(f"{module}.{name}")

    def persistent_load(self, pid: object) -> object:
        """BINPERSID: what the persistent id ``pid`` stands for (a storage, in torch.save's files).
        Here none is expected (TorchFileError); a subclass resolves them."""
        raise TorchFileError(f"persistent id {brief(pid)} not expected")

    def build(self, target: object, state: object) -> None:
        """BUILD: set ``target``'s state (torch.save writes it only for objects other than tensors)."""
        raise NeedsTorch("data.pkl sets an object's state (BUILD): not a plain tensor file")

    def load(self) -> object:
        """The pickled object, once checked to nest at most MAX_DEPTH deep and to hold at most
        MAX_WORK items written out (its lists and dicts may have changed after a tuple took them in,
        so the whole object is measured again here, each container once)."""
        try:
            obj = self._run()
        except (NeedsTorch, RefusedGlobal, TorchFileError):
            raise
        except RecursionError as exc:  # a SafeCall's argument nested too deep to compare or hash
            raise TorchFileError("data.pkl nests too deep") from exc
        except Exception as exc:  # a wrong type or a stack underflow: a damaged pickle, nothing more
            raise TorchFileError(f"damaged data.pkl ({type(exc).__name__}: {_message(exc)})"[:300]) from exc
        if not self._small_tree:
            measure(obj)
        return obj

    @property
    def pickled(self) -> bytes:
        """The bytes the unpickler was given, whole (the pickle starts at ``start`` within them)."""
        return self._data

    @property
    def position(self) -> int:
        """The byte after the pickle's STOP, once loaded (torch's legacy format writes pickles in a row)."""
        return self._at

    # --- the bounds ------------------------------------------------------------------------------

    def _charge(self, steps: int) -> None:
        """Add ``steps`` of hashing; refuse the pickle past MAX_WORK."""
        self._work += steps
        if self._work > MAX_WORK:
            raise TorchFileError(
                f"data.pkl hashes more than {MAX_WORK:,} elements to unpickle (its keys and set "
                "members, memo references written out): refused as forged"
            )

    def _tuple(self, built: tuple[object, ...]) -> tuple[object, ...]:
        """A tuple holding a tuple, measured: its depth and its elements written out (what hashing it
        walks). One holding none (most) needs nothing: the loop checks that first, in C."""
        depth, size = 2, 1 + len(built)
        for item in built:
            if type(item) is tuple:
                found = self._tuples.get(id(item))
                if found is None:  # it holds no tuple: depth 1
                    size += len(item)
                else:
                    depth = max(depth, found[1] + 1)
                    size += found[2] - 1
        if depth > MAX_DEPTH:
            raise TorchFileError(f"data.pkl nests tuples more than {MAX_DEPTH} deep: refused as forged")
        self._tuples[id(built)] = (built, depth, min(size, MAX_WORK + 1))
        return built

    def _measured(self, item: tuple[object, ...]) -> tuple[int, int]:
        found = self._tuples.get(id(item))
        return (found[1], found[2]) if found is not None else (1, len(item) + 1)

    def _key_cost(self, key: object) -> int:
        """What hashing ``key`` walks: a tuple's elements written out, 1 for anything else."""
        return self._measured(key)[1] if type(key) is tuple else 1

    def _keys_cost(self, keys: list[object]) -> int:
        return sum(map(self._key_cost, keys)) if tuple in map(type, keys) else len(keys)

    def _members_cost(self, call: SafeCall, args: tuple[object, ...]) -> int:
        """What a call that hashes its argument's members (a set's, a Counter's, an OrderedDict's
        pairs) walks: each member, a pair's key too."""
        if not args:
            return 0
        members = args[0]
        if not isinstance(members, (list, tuple, dict)):
            raise TorchFileError(f"data.pkl calls {call.name} of a {type(members).__name__}")
        check_keys(len(members))
        cost = 0
        for member in members:
            cost += self._key_cost(member)
            if type(member) is list:  # OrderedDict([[key, value], ...])
                cost += self._keys_cost(member)
        return cost

    # --- reading -------------------------------------------------------------------------------

    def _read(self, count: int) -> bytes:
        end = self._at + count
        if count < 0 or end > self._end:
            raise self._cut_short("an opcode (truncated or a forged length)")
        chunk = self._data[self._at : end]
        self._at = end
        return chunk

    def _line(self) -> str:
        end = self._data.find(b"\n", self._at, self._end)
        if end < 0:
            raise self._cut_short("a GLOBAL")
        text = self._data[self._at : end].decode("utf-8")
        self._at = end + 1
        return text

    def _cut_short(self, inside: str) -> TorchFileError:
        if self._end < len(self._data):
            return TorchFileError(
                f"data.pkl runs past {MAX_PICKLE_BYTES:,} bytes: more than a tensor file's pickle, refused"
            )
        return TorchFileError(f"data.pkl ends inside {inside}")

    def _unsigned(self, size: int) -> int:
        return int.from_bytes(self._read(size), "little")

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> object:
        stack: list[object] = []
        marks: list[list[object]] = []
        memo: dict[int, object] = {}

        def pop_mark() -> list[object]:
            nonlocal stack
            items = stack
            stack = marks.pop()
            return items

        containers = 0
        shared = False  # a container recalled from the memo: the object may be a DAG, or cyclic
        container_types = CONTAINERS
        while True:
            opcode = self._read(1)[0]
            if opcode == 0x80:  # PROTO
                self._read(1)
            elif opcode == 0x2E:  # STOP
                self._small_tree = not shared and containers < MAX_DEPTH
                return stack.pop()
            elif opcode == 0x63:  # GLOBAL
                module = self._line()
                name = self._line()
                # a protocol-2 pickle names builtins as Python 2 did (__builtin__.set); torch maps them back
                if (module, name) in _compat_pickle.NAME_MAPPING:
                    module, name = _compat_pickle.NAME_MAPPING[(module, name)]
                elif module in _compat_pickle.IMPORT_MAPPING:
                    module = _compat_pickle.IMPORT_MAPPING[module]
                stack.append(self.find_class(module, name))
            elif opcode in (0x52, 0x81):  # REDUCE, NEWOBJ (cls.__new__(cls, *args): ours build the same)
                args = stack.pop()
                function = stack.pop()
                if not isinstance(function, SafeCall):
                    raise TorchFileError(f"data.pkl calls a {type(function).__name__}, not a function")
                if not isinstance(args, tuple):
                    raise TorchFileError("data.pkl calls a function without a tuple of arguments")
                if function.hashes:
                    self._charge(self._members_cost(function, args))
                result = function.function(*args)
                if type(result) is tuple and tuple in map(type, result):
                    result = self._tuple(result)
                containers += type(result) in container_types
                stack.append(result)
            elif opcode == 0x62:  # BUILD
                state = stack.pop()
                self.build(stack[-1], state)
            elif opcode == 0x28:  # MARK
                marks.append(stack)
                stack = []
            elif opcode == 0x61:  # APPEND
                item = stack.pop()
                _as_list(stack[-1]).append(item)
            elif opcode == 0x65:  # APPENDS
                items = pop_mark()
                _as_list(stack[-1]).extend(items)
            elif opcode == 0x73:  # SETITEM
                value = stack.pop()
                key = stack.pop()
                target = _as_dict(stack[-1])
                check_keys(len(target) + 1)
                self._charge(self._key_cost(key))
                target[key] = value
            elif opcode == 0x75:  # SETITEMS
                items = pop_mark()
                target = _as_dict(stack[-1])
                if len(items) % 2:
                    raise TorchFileError("data.pkl sets an item without a value")
                check_keys(len(target) + len(items) // 2)
                self._charge(self._keys_cost(items[::2]))
                for index in range(0, len(items), 2):
                    target[items[index]] = items[index + 1]
            elif opcode == 0x74:  # TUPLE
                built = tuple(pop_mark())  # first: it replaces the stack
                stack.append(self._tuple(built) if tuple in map(type, built) else built)
                containers += 1
            elif opcode in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
                count = opcode - 0x84
                if len(stack) < count:
                    raise TorchFileError("data.pkl builds a tuple from an empty stack")
                built = tuple(stack[-count:])
                del stack[-count:]
                stack.append(self._tuple(built) if tuple in map(type, built) else built)
                containers += 1
            elif opcode == 0x29:  # EMPTY_TUPLE
                stack.append(())
                containers += 1
            elif opcode == 0x5D:  # EMPTY_LIST
                stack.append([])
                containers += 1
            elif opcode == 0x7D:  # EMPTY_DICT
                stack.append({})
                containers += 1
            elif opcode == 0x8F:  # EMPTY_SET
                stack.append(set())
                containers += 1
            elif opcode == 0x4E:  # NONE
                stack.append(None)
            elif opcode in (0x88, 0x89):  # NEWTRUE, NEWFALSE
                stack.append(opcode == 0x88)
            elif opcode == 0x4A:  # BININT
                stack.append(int.from_bytes(self._read(4), "little", signed=True))
            elif opcode == 0x4B:  # BININT1
                stack.append(self._unsigned(1))
            elif opcode == 0x4D:  # BININT2
                stack.append(self._unsigned(2))
            elif opcode == 0x8A:  # LONG1
                stack.append(int.from_bytes(self._read(self._unsigned(1)), "little", signed=True))
            elif opcode == 0x47:  # BINFLOAT
                stack.append(struct.unpack(">d", self._read(8))[0])
            elif opcode == 0x58:  # BINUNICODE
                stack.append(self._read(self._unsigned(4)).decode("utf-8", "surrogatepass"))
            elif opcode == 0x55:  # SHORT_BINSTRING (torch.load decodes it with encoding="utf-8")
                stack.append(self._read(self._unsigned(1)).decode("utf-8"))
            elif opcode == 0x51:  # BINPERSID
                stack.append(self.persistent_load(stack.pop()))
            elif opcode in (0x68, 0x6A):  # BINGET, LONG_BINGET
                recalled = _recall(memo, self._unsigned(1 if opcode == 0x68 else 4))
                shared = shared or type(recalled) in container_types
                stack.append(recalled)
            elif opcode == 0x71:  # BINPUT
                memo[self._unsigned(1)] = stack[-1]
            elif opcode == 0x72:  # LONG_BINPUT
                memo[self._unsigned(4)] = stack[-1]
            else:
                raise TorchFileError(
                    f"data.pkl has opcode {opcode:#04x} at byte {self._at - 1}, which torch.save does not "
                    "write and torch.load(weights_only=True) refuses"
                )


def _as_list(target: object) -> list[object]:
    if type(target) is not list:
        raise TorchFileError(f"data.pkl appends to a {type(target).__name__}")
    return target


def _as_dict(target: object) -> dict[object, object]:
    if type(target) not in _DICT_TYPES:
        raise TorchFileError(f"data.pkl sets an item of a {type(target).__name__}")
    assert isinstance(target, dict)
    return target


def _recall(memo: dict[int, object], index: int) -> object:
    if index not in memo:
        raise TorchFileError(f"data.pkl recalls memo {index}, never stored")
    return memo[index]


def _message(exc: BaseException) -> str:
    """An exception's text, its arguments shown briefly: a KeyError's is the repr of a pickled key."""
    if all(isinstance(arg, str) for arg in exc.args):
        return str(exc)
    return ", ".join(brief(arg) for arg in exc.args)
