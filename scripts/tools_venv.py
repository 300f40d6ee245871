"""What the benchmarks against the real tools (bench_vs_msit.py, bench_msprobe_7b.py) share about
the tools venv, this checkout and the machine: the environment a tool runs in, the versions
installed there, the state of the checkout being timed, the load average beside each timing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def tools_env(venv: Path) -> dict[str, str]:
    """The environment a user of the tools venv has after ``activate``; nothing of ours leaks in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONHASHSEED"] = "0"
    return env


def tool_versions(venv: Path, packages: Sequence[str]) -> dict[str, str]:
    """The installed version of each of ``packages`` in the tools venv (none where it cannot say)."""
    code = (
        "from importlib.metadata import version as v; import json, sys; "
        "print(json.dumps({p: v(p) for p in sys.argv[1:]}))"
    )
    tools = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, *packages],
        capture_output=True,
        text=True,
        env=tools_env(venv),
    )
    found: dict[str, str] = json.loads(tools.stdout) if tools.returncode == 0 else {}
    return found


def checkout_state(repo: Path) -> str:
    """The commit and a digest of uncommitted changes: a checkout edited during the run is told apart."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    changes = git("diff", "HEAD")
    if not changes:
        return head
    return f"{head} + uncommitted changes {hashlib.sha1(changes.encode()).hexdigest()[:10]}"


def load() -> str:
    """``uptime``'s load averages: others share this machine, and the figures depend on it."""
    one, five, fifteen = os.getloadavg()
    return f"{time.strftime('%H:%M:%S')} load {one:.2f} {five:.2f} {fifteen:.2f}"
