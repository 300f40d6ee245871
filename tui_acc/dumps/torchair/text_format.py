"""Protobuf text format (what ``str()`` of a message writes, and the rest of the format) read into
nested field lists, the way TorchAir's graph text needs it (graph_text.py).

A tokenizer of the text format (one regular expression) and an iterative parser: no recursion,
however deep the nesting; a text that is not the format is refused with its line. What ``str()`` of
a message writes (a field or a brace at a time, double-quoted strings, no comments) is read a field
at a time first, 2-3 times faster (``_plain``); anything else is read token by token, and the two
agree wherever the first answers (tests/unit/test_text_format.py).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import NoReturn

from tui_acc.dumps.model import DumpError

# each token with the white space and comments before it skipped by the regex engine (findall of
# strings, not a Match per token: twice as fast on a graph text of 1,000 ops): strings (with their
# escapes), words and numbers, braces, colons, the brackets of a repeated field, commas; the end (an
# empty token, so that trailing white space is skipped in one match, not retried at each of its
# characters); any other single character is one the format does not have. A string left open is a
# token to the end of its line (refused as such): tried again at each character after it, a line of
# escaped quotes took quadratic time
_TOKEN = re.compile(
    r'(?:\s+|#[^\n]*)*("(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|[A-Za-z0-9_.+\-]+|[{}:<>\[\],;]|\Z|.)'
)
# what str() of a protobuf message writes, one field or brace per match: ``name: value`` (a
# double-quoted string or a word), ``name {`` (``name: {`` too), ``}``, the end; any other character
# (a comment, a single quote, a string continued or left open, ``<``, ``[``) sends the whole text to
# the tokenizer: it is the last match, the rest of the text (not matched again at each character
# after it: a long line of escaped quotes would take quadratic time). The white space around a
# message's optional colon is one run or two split by the colon, never one run two ways: ``a``, a
# long run of spaces and no brace would be tried at every split of it, quadratic too
_PLAIN = re.compile(
    r'[ \t\r\n]*(?:([A-Za-z0-9_.+\-]+)[ \t]*:[ \t]*("(?:[^"\\\n]|\\.)*"|[A-Za-z0-9_.+\-]+)'
    r"|([A-Za-z0-9_.+\-]+)[ \t]*(?::[ \t]*)?\{|(\})|(\Z)|([\s\S]+))"
)
_PUNCTUATION = frozenset("{}:<>[],;")
_WORD = re.compile(r"[A-Za-z0-9_.+\-]")
_ESCAPES = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.S)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b'"': b'"', b"'": b"'", b"\\": b"\\"}
# A message: its fields in the order written, each a name and a string (scalars kept as written,
# strings unescaped) or a message.
Message = list[tuple[str, "str | Message"]]


class GraphTextError(DumpError):
    """A graph text that cannot be read (the message names the file and where it goes wrong)."""


def parse(text: str, path: Path) -> Message:
    """Protobuf text format into nested field lists (``[(name, value)]``); GraphTextError where the
    text is not that format, with the line. Adjacent string literals of one field are one value."""
    plain = _plain(text)
    return plain if plain is not None else _tokenized(text, path)


def _plain(text: str) -> Message | None:
    """``text`` read a field at a time, where it holds only what str() of a message writes; None for
    anything else (``_tokenized`` reads it, or names what is wrong): the same fields either way."""
    root: Message = []
    stack = [root]
    current = root
    for name, value, opened, closed, _, other in _PLAIN.findall(text):
        if name:
            if value[0] == '"':
                value = value[1:-1] if "\\" not in value and value.isascii() else _unquoted(value)
            current.append((name, value))
        elif opened:
            child: Message = []
            current.append((opened, child))
            stack.append(child)
            current = child
        elif closed:
            if len(stack) == 1:
                return None
            stack.pop()
            current = stack[-1]
        elif other:
            return None
    return root if len(stack) == 1 else None


def _tokenized(text: str, path: Path) -> Message:
    """``parse`` a token at a time: any text of the format, or the line where it is not."""
    root: Message = []
    stack: list[tuple[Message, str]] = [(root, "")]
    name: str | None = None
    colon = False
    last_string: str | None = None  # the field a string literal just ended, which another may continue
    pieces: list[str] = []  # that string's literals
    for at, token in enumerate(_TOKEN.findall(text)):
        if not token:
            continue  # the end
        if len(token) == 1 and token not in _PUNCTUATION and not _WORD.match(token):
            _fail(path, text, at, f"unexpected character {token!r}")
        if token[0] in "\"'" and not _closed(token):
            _fail(path, text, at, f"unexpected character {token[0]!r}")
        if token in ",;[]":
            continue  # a repeated field's list brackets: each value is added as it comes
        current = stack[-1][0]
        if token[0] in "\"'":
            if last_string is not None and name is None:  # "ab" "cd": one string, joined once at its end
                pieces.append(_unquoted(token))
                continue
            if name is None or not colon:
                _fail(path, text, at, "a string without a field name and ':'")
            last_string = name
            _join(current, pieces)
            pieces = [_unquoted(token)]
            current.append((name, pieces[0]))
            name, colon = None, False
            continue
        _join(stack[-1][0], pieces)
        pieces = []
        last_string = None
        if token in "{<":
            if name is None:
                _fail(path, text, at, f"{token!r} without a field name")
            child: Message = []
            current.append((name, child))
            stack.append((child, "}" if token == "{" else ">"))
            name, colon = None, False
        elif token in "}>":
            if name is not None or len(stack) == 1 or stack[-1][1] != token:
                _fail(path, text, at, f"unbalanced {token!r}")
            stack.pop()
        elif token == ":":
            if name is None or colon:
                _fail(path, text, at, "':' out of place")
            colon = True
        elif name is None:
            name = token
        elif colon:
            current.append((name, token))
            name, colon = None, False
        else:
            _fail(path, text, at, f"{token!r} after field {name!r} without ':'")
    if name is not None or len(stack) > 1:
        raise GraphTextError(f"{path}: ends inside a message or a field")
    _join(stack[-1][0], pieces)
    return root


def _closed(string: str) -> bool:
    """Whether a string token ends with its own quote, not an escaped one (an even run of
    backslashes before it)."""
    body = string[:-1]
    return len(string) >= 2 and string[-1] == string[0] and (len(body) - len(body.rstrip("\\"))) % 2 == 0


def _join(current: Message, pieces: list[str]) -> None:
    """The last field's string, made of the adjacent literals ``pieces``, joined once."""
    if len(pieces) > 1 and current:
        current[-1] = (current[-1][0], "".join(pieces))


def _unquoted(token: str) -> str:
    """A token's value: a string literal unescaped (C escapes, octal and hex bytes as UTF-8)."""
    if token[0] not in "\"'":
        return token
    raw = token[1:-1].encode("utf-8", "surrogateescape")
    if b"\\" in raw:
        raw = _ESCAPES.sub(_escape, raw)
    return raw.decode("utf-8", "replace")


def _escape(found: re.Match[bytes]) -> bytes:
    octal, hexa, other = found.groups()
    if octal is not None:
        return bytes([int(octal, 8) & 0xFF])
    if hexa is not None:
        return bytes([int(hexa, 16)])
    return _SIMPLE_ESCAPES.get(other, b"\\" + other)


def _fail(path: Path, text: str, token: int, problem: str) -> NoReturn:
    """GraphTextError at the line of the ``token``-th token (found again: only a failure needs it)."""
    found = next(itertools.islice(_TOKEN.finditer(text), token, None))
    line = text.count("\n", 0, found.start(1)) + 1
    raise GraphTextError(f"{path}: not protobuf text at line {line}: {problem}")
