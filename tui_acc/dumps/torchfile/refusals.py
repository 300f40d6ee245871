"""What reading a torch file ends in besides its object (NeedsTorch, RefusedGlobal, TorchFileError), and
``brief``, which shows a pickled value in their messages."""

from __future__ import annotations

import reprlib


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


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel = 3
_BRIEF.maxtuple = _BRIEF.maxlist = _BRIEF.maxdict = _BRIEF.maxset = _BRIEF.maxfrozenset = 4
_BRIEF.maxstring = _BRIEF.maxother = _BRIEF.maxlong = 40


def brief(value: object) -> str:
    """A pickled value in a message: a few levels and items of it, however deep or large it is
    (repr would write out a tuple DAG's 2^60 tuples)."""
    return _BRIEF.repr(value)
