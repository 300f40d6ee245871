"""The README is a user's document and the pages of docs/ hold the reference: the README fits in a few
screens, its keys table has every key, and it points at nothing a user of a clone cannot follow (an
issue number, another repository's folder); every link of the README, DEVELOPERS.md and docs/ leads
to a file and a heading that exist, every page of docs/ is reachable from the README, every screenshot
is shown somewhere, and what the code tells a user to read (``docs/x.md``, ``README: Section``) is
there."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tui_acc.tui.screens.help import KEYS

REPO = Path(__file__).resolve().parents[2]
README_PATH = REPO / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README_PATH, REPO / "DEVELOPERS.md", *DOCS]
MAX_README_LINES = 300
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
# how code names a README section: README: Set up. / README "Set up" / the README's Set up says
_README_SECTION = re.compile(r"README: ([A-Z][\w ]+?)[).\"]|README \"([^\"]+)\"|README's ([A-Z][\w ]+?) says")


def _prose(text: str) -> str:
    """The text without its fenced code blocks (a ``# comment`` there is no heading, ``[x](y)`` no link)."""
    return _FENCE.sub("", text)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Every anchor a page's headings make, a repeated heading's ``-1``, ``-2``... included."""
    seen: Counter[str] = Counter()
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text(encoding="utf-8")), flags=re.M):
        anchor = _anchor(heading)
        anchors.add(anchor if not seen[anchor] else f"{anchor}-{seen[anchor]}")
        seen[anchor] += 1
    return anchors


def _relative_links(path: Path) -> list[str]:
    """The page's links to files of the repository (web addresses left out)."""
    links = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [link for link in links if not re.match(r"[a-z]+:", link)]


def test_the_readme_fits_in_a_few_screens() -> None:
    lines = README.count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move reference to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_to_a_file_and_a_heading_that_exist(page: Path) -> None:
    broken = []
    for link in _relative_links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert broken == []


def test_the_link_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## A (`--b`)\n\n```sh\n# not a heading\n```\n\n[x](#a---b) [y](#top)\n")
    assert _anchors(page) == {"top", "a---b"}
    assert _relative_links(page) == ["#a---b", "#top"]
    assert "not-a-heading" not in _anchors(page)


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {(REPO / link.partition("#")[0]).resolve() for link in _relative_links(README_PATH)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []
    assert (REPO / "DEVELOPERS.md").resolve() in linked


def test_every_screenshot_is_shown_in_the_readme_or_docs() -> None:
    shown = {
        (page.parent / link).resolve()
        for page in PAGES
        for link in _relative_links(page)
        if link.endswith(".svg")
    }
    unshown = sorted(p.name for p in (REPO / "screenshots").glob("*.svg") if p.resolve() not in shown)
    assert unshown == []


def test_what_the_code_tells_a_user_to_read_is_there() -> None:
    """``docs/x.md`` named in a module, script or test is a page of docs/, and ``README: Section`` (or
    ``README "Section"``, ``the README's Section says``) a heading of the README."""
    headings = {h.strip() for h in re.findall(r"^#{1,6} (.+)$", _prose(README), flags=re.M)}
    wrong = []
    sources = sorted(p for folder in ("tui_acc", "scripts", "tests") for p in (REPO / folder).rglob("*.py"))
    for path in (p for p in sources if p != Path(__file__).resolve()):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        named = re.findall(r"docs/[\w-]+\.md", text)
        wrong += [f"{where}: no {name}" for name in named if not (REPO / name).is_file()]
        for section in _README_SECTION.findall(text):
            name = next(s for s in section if s)
            if name not in headings:
                wrong.append(f"{where}: README has no section {name!r}")
    assert wrong == []


def test_every_section_link_leads_to_a_heading() -> None:
    headings = _anchors(README_PATH)
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


@pytest.mark.parametrize("page", [README_PATH, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_it_points_at_nothing_a_user_cannot_follow(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for phrase in (r"\bissue \d+", r"project brief", r"\.\./shared"):
        assert not re.search(phrase, text), phrase
