"""docs/dumping.md: the blocks scripts/check_dumping_docs.py runs against the real
msprobe and msit are where it looks for them, well-formed, and named the way it substitutes them;
the README sends a user there from its workflow."""

from __future__ import annotations

import ast
import json
import shlex
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_dumping_docs


def _blocks() -> dict[str, str]:
    return check_dumping_docs.blocks((REPO / "docs" / "dumping.md").read_text(encoding="utf-8"))


def test_every_checked_block_is_found_and_well_formed() -> None:
    found = _blocks()
    assert set(found) == {"msprobe-config", "msprobe", "msit-torch", "msit-atb", "atb-probe-config"}
    for name in ("msprobe", "msit-torch"):
        ast.parse(found[name])
    config = json.loads(found["msprobe-config"])
    assert (config["task"], config["level"], config["dump_path"]) == ("tensor", "L0", "./dump-golden")
    assert '"level": "L0"' in found["msprobe-config"]  # the script derives mix and L1 from it
    assert 'config_path="./msprobe_config.json"' in found["msprobe"]  # the file the script writes
    assert 'dump_path="./dump-golden"' in found["msit-torch"]  # the script writes the test's as ./dump-test
    assert shlex.split(found["msit-atb"])[:3] == ["msit", "llm", "dump"]
    assert json.loads(found["atb-probe-config"])["dump_enable"] is True


def test_the_readme_shows_the_msprobe_block_and_links_the_rest() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "[Dumping your own model](#dumping-your-own-model)" in readme
    assert "(docs/dumping.md)" in readme
    assert _blocks()["msprobe"].strip() in readme  # the README's snippet is the checked one
