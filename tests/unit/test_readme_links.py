"""The README is a user's document: its links lead somewhere, its keys table has every key, and it
points at nothing a user of a clone cannot follow (an issue number, another repository's folder)."""

from __future__ import annotations

import re
from pathlib import Path

from tui_acc.tui.screens.help import KEYS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_section_link_leads_to_a_heading() -> None:
    headings = {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", README, flags=re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert links and links <= headings, sorted(links - headings)
    assert "see Execution order)" not in README  # a section named in words must be a link


def test_the_keys_table_has_every_key_of_the_help() -> None:
    table = re.search(r"^\| key \| does \|\n\|---\|---\|\n((?:\|.*\n)+)", README, flags=re.M)
    assert table is not None
    listed = {
        key for row in table.group(1).splitlines() for key in re.findall(r"`([^`]+)`", row.split("|")[1])
    }
    single = {part for keys, _ in KEYS for part in keys.split() if len(part) == 1 and part not in "↑↓←→"}
    assert single - listed == set(), sorted(single - listed)


def test_it_points_at_nothing_a_user_cannot_follow() -> None:
    for phrase in (r"\bissue \d+", r"project brief", r"\.\./shared"):
        assert not re.search(phrase, README), phrase
