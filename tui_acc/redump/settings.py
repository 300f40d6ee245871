"""The ``[redump]`` table of tui-acc.toml: which dumper each side uses and the user's command.

```toml
[redump]
exec = "bash run_npu.sh"        # the inference command ({exec}); per side below overrides it
out_dir = "redumps"             # where new dumps go (default: ./tui-acc-runs)

[redump.test]
dumper = "msit-atb"             # msit-atb | msprobe-atb | msprobe-torch | vllm-ascend | torch | custom,
                                # sglang (--msprobe-dump-config) | sglang-dumper (DUMPER_* variables),
                                # torchair-ge | torchair-fx (msprobe's set_ge/fx_dump_config arguments)
request_id = "chatcmpl-req-0"   # vllm-ascend, eager runs: dump this request only (msprobe >= 26.2.0)

[redump.golden]
dumper = "torch"
exec = "python run_cpu.py"
command = ["python", "run_cpu.py", "--token", "{token}", "--out", "{out}"]  # dumper = "custom"
shell = false                   # true: command is one string run by /bin/sh (values in env vars)
```
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui_acc.atomic import temp_beside
from tui_acc.config import FILE_NAME, tomllib
from tui_acc.errors import TuiAccError

if TYPE_CHECKING:
    from tui_acc.dumps.model import Format

# The dumpers tui-acc builds re-dump commands for (plan.py), in the order errors list them
DUMPERS = (
    "msit-atb",
    "msprobe-atb",
    "msprobe-torch",
    "vllm-ascend",
    "sglang",
    "sglang-dumper",
    "torchair-ge",
    "torchair-fx",
    "torch",
    "custom",
)
DEFAULT_DUMPER = {"test": "msit-atb", "golden": "torch"}
# Where tui-acc.toml names no dumper: the one that writes the side's format
DUMPER_OF_FORMAT: dict[Format, str] = {
    "msit-atb": "msit-atb",
    "msprobe-atb": "msprobe-atb",
    "msit-torch": "torch",
    "msit-stats": "torch",
    "msprobe": "msprobe-torch",
    "msprobe-debug": "msprobe-torch",
    "sglang": "sglang-dumper",
    "torchair-ge": "torchair-ge",
    "torchair-fx": "torchair-fx",
}


class SettingsError(TuiAccError, ValueError):
    """A [redump] table that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class SideSettings:
    dumper: str
    exec: str | None = None
    command: tuple[str, ...] | str | None = None  # custom template: argv, or one string with shell
    shell: bool = False
    request_id: str | None = None  # vllm-ascend: msprobe's per-request dump (eager runs)
    chosen: bool = False  # the dumper was named in tui-acc.toml (else it follows the dump's format)

    def for_format(self, dump_format: Format) -> SideSettings:
        """These settings, with the dumper that writes ``dump_format`` unless one was named."""
        if self.chosen or dump_format not in DUMPER_OF_FORMAT:
            return self
        return replace(self, dumper=DUMPER_OF_FORMAT[dump_format])


# Where tui-acc writes what it makes itself (re-dumps, hunts, the demos), under the working directory:
# one folder to find them in, to leave out of git, to delete.
RUNS_DIR = "tui-acc-runs"


def runs_dir(out_dir: Path | None = None) -> Path:
    """``[redump] out_dir`` where it is set, else ``./tui-acc-runs``."""
    return out_dir if out_dir is not None else Path.cwd() / RUNS_DIR


@dataclass(frozen=True)
class RedumpSettings:
    golden: SideSettings = field(default_factory=lambda: SideSettings(DEFAULT_DUMPER["golden"]))
    test: SideSettings = field(default_factory=lambda: SideSettings(DEFAULT_DUMPER["test"]))
    out_dir: Path | None = None

    def side(self, name: str) -> SideSettings:
        """The settings of side ``name`` (``golden``; anything else is the test side)."""
        return self.golden if name == "golden" else self.test

    def with_exec(self, side: str, command: str) -> RedumpSettings:
        """These settings with ``side``'s inference command replaced."""
        updated = replace(self.side(side), exec=command)
        return replace(self, golden=updated) if side == "golden" else replace(self, test=updated)


def load_settings(table: Any, where: str = FILE_NAME) -> RedumpSettings:
    """Settings from the merged ``[redump]`` table (``where`` names the config files in errors)."""
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise SettingsError(f"{where}: [redump] must be a table")
    shared_exec = _string(table.get("exec"), where, "redump.exec")
    sides = {}
    for side in ("golden", "test"):
        raw = table.get(side, {})
        if not isinstance(raw, dict):
            raise SettingsError(f"{where}: [redump.{side}] must be a table")
        named = _string(raw.get("dumper"), where, f"redump.{side}.dumper")
        dumper = named or DEFAULT_DUMPER[side]
        if dumper not in DUMPERS:
            expected = ", ".join(DUMPERS)
            raise SettingsError(f"{where}: redump.{side}.dumper = {dumper!r}; expected one of {expected}")
        shell = raw.get("shell", False)
        if not isinstance(shell, bool):
            raise SettingsError(f"{where}: redump.{side}.shell must be true or false")
        command = raw.get("command")
        if command is not None:
            if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
                command = tuple(command)
            elif not (isinstance(command, str) and shell):
                raise SettingsError(
                    f"{where}: redump.{side}.command must be a list of strings "
                    '(or one string with shell = true), e.g. ["python", "run.py", "--out", "{out}"]'
                )
        if dumper == "custom" and command is None:
            raise SettingsError(f'{where}: redump.{side}.dumper = "custom" needs a command')
        exec_ = _string(raw.get("exec"), where, f"redump.{side}.exec") or shared_exec
        request_id = _string(raw.get("request_id"), where, f"redump.{side}.request_id")
        sides[side] = SideSettings(dumper, exec_, command, shell, request_id, chosen=named is not None)
    out_dir = _string(table.get("out_dir"), where, "redump.out_dir")
    return RedumpSettings(sides["golden"], sides["test"], Path(out_dir).expanduser() if out_dir else None)


def _string(value: Any, where: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: {key} must be a non-empty string")
    return value


def remember_exec(path: Path, side: str, command: str) -> None:
    """Save the user's inference command for ``side`` in ``path`` (tui-acc.toml), keeping the rest.

    The file is edited as text (comments and layout stay), checked by parsing it again, and
    replaced atomically; a file that would not parse afterwards is left as it was.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    line = f"exec = {toml_string(command)}\n"
    header = f"[redump.{side}]"
    lines = text.splitlines(keepends=True)
    at = next((i for i, existing in enumerate(lines) if existing.strip() == header), None)
    if at is None:
        if text and not text.endswith("\n"):
            text += "\n"
        text += f"{'' if not text else chr(10)}{header}\n{line}"
    else:
        end = next((i for i in range(at + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        body = [i for i in range(at + 1, end) if lines[i].split("=", 1)[0].strip() == "exec"]
        if body:
            lines[body[0]] = line
        else:
            lines.insert(at + 1, line)
        text = "".join(lines)
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: could not add the command without breaking the file ({exc})") from exc
    if parsed.get("redump", {}).get(side, {}).get("exec") != command:
        raise SettingsError(f"{path}: could not record redump.{side}.exec (the file defines it another way)")
    fd, temporary = temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string: quoted, with backslashes, quotes and unprintable characters
    escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'
