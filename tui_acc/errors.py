"""The one base of tui-acc's errors.

Every error a user can meet derives from :class:`TuiAccError`: bad input (a dump, a mapping file, a
tui-acc.toml, a command line), a file that cannot be written, a tool that is missing. Its message
names the file or the option and what is wrong with it, so the command line says it as it is
(``tui-acc: error: MESSAGE``, exit 2) and the TUI shows it on its status line. A caller that wants
"anything tui-acc refuses" catches this one class; one that wants a kind catches the subclass.

Classes keep the built-in base they had (``ConfigError`` is still a ``ValueError``, ``TorchMissing``
an ``ImportError``), so ``except ValueError`` around a parser goes on catching its errors.
"""

from __future__ import annotations


class TuiAccError(Exception):
    """Something tui-acc refuses or cannot do; the message says which file or option, and why."""


class UsageError(TuiAccError):
    """The command line asks for what cannot be done: an option without the one it needs, a token
    or a node that is not in the dumps."""
