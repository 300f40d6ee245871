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
"""

from __future__ import annotations

import _compat_pickle
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


class NeedsTorch(Exception):
    """The file is valid for torch.load(weights_only=True) but not for this reader (legacy non-zip
    format, big-endian, a storage or record type this reader does not know): fall back. str() says why."""


class RefusedGlobal(Exception):
    """The pickle names a global outside what tensors need (e.g. os.system): refused by name, never run.
    .name holds "module.qualname"."""

    def __init__(self, name: str) -> None:
        super().__init__(f"refused global {name}: the file holds pickled code or objects, not just tensors")
        self.name = name


class TorchFileError(ValueError):
    """A torch file that is damaged or forged; ``problem`` (also str()) says what is wrong."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


@dataclass(frozen=True)
class SafeCall:
    """A function the pickle may call (REDUCE, NEWOBJ): one of ours, under the name the pickle used."""

    name: str
    function: Callable[..., object]


_DICT_TYPES = (dict, OrderedDict, Counter)  # torch's _check_set_item_target


class RestrictedUnpickler:
    """Runs a pickle of torch.save's opcodes. Subclasses say what a global is (``find_class``) and
    what a persistent id is (``persistent_load``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def find_class(self, module: str, name: str) -> object:
        raise RefusedGlobal(f"{module}.{name}")

    def persistent_load(self, pid: object) -> object:
        raise TorchFileError(f"persistent id {pid!r} not expected")

    def load(self) -> object:
        try:
            return self._run()
        except (NeedsTorch, RefusedGlobal, TorchFileError):
            raise
        except RecursionError as exc:  # a SafeCall's argument nested too deep to compare or hash
            raise TorchFileError("data.pkl nests too deep") from exc
        except Exception as exc:  # a wrong type or a stack underflow: a damaged pickle, nothing more
            raise TorchFileError(f"damaged data.pkl ({type(exc).__name__}: {exc})"[:300]) from exc

    # --- reading -------------------------------------------------------------------------------

    def _read(self, count: int) -> bytes:
        end = self._at + count
        if count < 0 or end > len(self._data):
            raise TorchFileError("data.pkl ends inside an opcode (truncated or a forged length)")
        chunk = self._data[self._at : end]
        self._at = end
        return chunk

    def _line(self) -> str:
        end = self._data.find(b"\n", self._at)
        if end < 0:
            raise TorchFileError("data.pkl ends inside a GLOBAL")
        text = self._data[self._at : end].decode("utf-8")
        self._at = end + 1
        return text

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

        while True:
            opcode = self._read(1)[0]
            if opcode == 0x80:  # PROTO
                self._read(1)
            elif opcode == 0x2E:  # STOP
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
                stack.append(function.function(*args))
            elif opcode == 0x62:  # BUILD
                raise NeedsTorch("data.pkl sets an object's state (BUILD): not a plain tensor file")
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
                _as_dict(stack[-1])[key] = value
            elif opcode == 0x75:  # SETITEMS
                items = pop_mark()
                target = _as_dict(stack[-1])
                if len(items) % 2:
                    raise TorchFileError("data.pkl sets an item without a value")
                for index in range(0, len(items), 2):
                    target[items[index]] = items[index + 1]
            elif opcode == 0x74:  # TUPLE
                items = pop_mark()  # first: it replaces the stack
                stack.append(tuple(items))
            elif opcode in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
                count = opcode - 0x84
                if len(stack) < count:
                    raise TorchFileError("data.pkl builds a tuple from an empty stack")
                items = stack[-count:]
                del stack[-count:]
                stack.append(tuple(items))
            elif opcode == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif opcode == 0x5D:  # EMPTY_LIST
                stack.append([])
            elif opcode == 0x7D:  # EMPTY_DICT
                stack.append({})
            elif opcode == 0x8F:  # EMPTY_SET
                stack.append(set())
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
            elif opcode == 0x68:  # BINGET
                stack.append(_recall(memo, self._unsigned(1)))
            elif opcode == 0x6A:  # LONG_BINGET
                stack.append(_recall(memo, self._unsigned(4)))
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
