"""Shared fixtures: the reference dumps beside the repo, and a seeded demo pair built at test time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _reference_dir() -> Path:
    override = os.environ.get("TUI_ACC_REFERENCE")
    return Path(override) if override else REPO.parent / "shared" / "reference"


@pytest.fixture(scope="session")
def reference() -> Path:
    path = _reference_dir()
    if not (path / "MANIFEST.md").is_file():
        pytest.fail(f"reference dumps not found at {path} (set TUI_ACC_REFERENCE)")
    return path


@pytest.fixture(scope="session")
def demo_pair(tmp_path_factory: pytest.TempPathFactory):
    """The demo's golden/test dumps with the injected fault, built once per test session."""
    from tui_acc.demo import make_demo

    return make_demo(tmp_path_factory.mktemp("demo") / "pair", seed=0)
