"""The row cache's seal: each stored row carries an HMAC of its pair, its key and its values under a
secret of the cache's own, so a row that tui-acc did not write there is not believed.

The secret is 32 random bytes in ``secret`` beside the database, a regular file of the user's that no
one else may read (0600; created once, atomically, by whichever process comes first). What the seal
tells apart: a row edited by hand (a cosine set to 1.0), a row moved to another tensor's key or
another pair of dumps, a database copied from another machine or another user (another secret).
What it cannot: the user's own account writing both the row and its seal; whoever can read the
user's files can forge rows, as they could forge the dumps themselves. docs/bad-input.md says so.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from tui_acc.dumps.fs import file_kind
from tui_acc.errors import TuiAccError

SECRET_NAME = "secret"
_SECRET_BYTES = 32
_MAC_CHARS = 64  # a SHA-256 HMAC in hex, in front of the row's JSON
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class SealError(TuiAccError, OSError):
    """The cache's secret cannot be made or trusted: the message names the file (the cache is then
    not used)."""


def cache_secret(folder: Path) -> bytes:
    """The secret of the cache in ``folder`` (a folder of the user's, already checked), made on first
    use. SealError where the file is not a regular file of the user's that only they can read."""
    path = folder / SECRET_NAME
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    _create_secret(path)
    return _read_secret(path)


def seal(secret: bytes, pair: str, key: str, data: str) -> str:
    """The stored text of a row: its HMAC, then its JSON."""
    return _mac(secret, pair, key, data) + data


def unsealed(secret: bytes, pair: str, key: str, stored: object) -> str | None:
    """The JSON of a stored row whose seal is right; None for any other (edited, moved, foreign)."""
    if not isinstance(stored, str) or len(stored) < _MAC_CHARS:
        return None
    mac, data = stored[:_MAC_CHARS], stored[_MAC_CHARS:]
    # compared as bytes: compare_digest refuses str holding anything but ASCII (an edited row may)
    expected = _mac(secret, pair, key, data).encode("ascii")
    return data if hmac.compare_digest(mac.encode("utf-8", "surrogatepass"), expected) else None


def _mac(secret: bytes, pair: str, key: str, data: str) -> str:
    # lengths first: no two (pair, key, data) triples run together into the same bytes
    message = f"{len(pair)}:{pair}{len(key)}:{key}{data}".encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _read_secret(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK)
    try:
        found = os.fstat(fd)
        _check(path, found)
        secret = os.read(fd, _SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(secret) != _SECRET_BYTES:
        raise SealError(f"{path}: holds {len(secret)} bytes, not the {_SECRET_BYTES} of a cache secret")
    return secret


def _check(path: Path, found: os.stat_result) -> None:
    if not stat.S_ISREG(found.st_mode):
        raise SealError(f"{path} is not a regular file ({file_kind(found.st_mode)}); the cache is not used")
    if hasattr(os, "getuid") and found.st_uid != os.getuid():
        raise SealError(f"{path} is not yours (owner uid {found.st_uid}); the cache is not used")
    if found.st_mode & 0o077:
        raise SealError(
            f"{path} can be read by others (mode {stat.S_IMODE(found.st_mode):o}); the cache is not used"
        )


def _create_secret(path: Path) -> None:
    """Written whole under a name of its own, then linked into place: a process that reads it never
    sees it half written, and of two processes making it at once the second keeps the first's."""
    draft = path.with_name(f".{SECRET_NAME}.{secrets.token_hex(8)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, secrets.token_bytes(_SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: its secret is the cache's
        except OSError:  # a file system without hard links: renamed, unless another made it meanwhile
            if not path.exists():
                draft.rename(path)
    finally:
        draft.unlink(missing_ok=True)
