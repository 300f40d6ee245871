"""The verdicts on a real accelerator port: ../shared/reference/gpu-msprobe-L0, an H100 bf16 SDPA run
against its fp32 eager golden, dumped by msprobe at L0, with one injected fault per run and an answer
key (its README). Present only where ../shared is beside the repository; skipped elsewhere.
Checked on its own (``tui-acc DUMP``), the golden and the clean port raise no anomaly.

Each fault (3 % noise on an up_proj, a pure 1.03 scale on a norm, 5 % noise on an attention, at token
2) is the one local operator of its dump; the systematic per-tensor int8 weight is found by its
weight at every token; the clean port is blamed for nothing. No baseline run is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.archives import unpack as unpack_archive
from tests.conftest import full_reference_dir
from tui_acc import CompareOptions, open_comparison
from tui_acc.anomalies.session import open_single
from tui_acc.reports import single

REFERENCE = full_reference_dir()
ARCHIVE = REFERENCE / "gpu-msprobe-L0" / "gpu-msprobe-L0.tar.xz" if REFERENCE is not None else None
pytestmark = pytest.mark.skipif(
    ARCHIVE is None or not ARCHIVE.is_file(), reason="the GPU reference port is in ../shared/reference only"
)


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert ARCHIVE is not None
    target = tmp_path_factory.mktemp("gpu")
    unpack_archive(ARCHIVE, target)
    return target / "gpu-msprobe-L0"


def _local(port: Path, run: str) -> list[tuple[int, str, str]]:
    comparison = open_comparison(port / "golden", port / run, CompareOptions(cache=False))
    return [
        (row["token"], row["golden_node"], row["rule"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]


@pytest.mark.parametrize("run", ["faulty-up2-n03", "faulty-postnorm1-scale103", "faulty-attn3-n05"])
def test_each_fault_is_the_one_local_operator(port: Path, run: str) -> None:
    fault = json.loads(next((port / run).glob("*_info.json")).read_text())["fault"]
    found = _local(port, run)
    assert len(found) == 1, found
    token, name, rule = found[0]
    assert token == fault["tid"] and name.startswith(f"Module.{fault['module']}.") and rule == "replay"


def test_the_int8_weight_is_found_at_every_token(port: Path) -> None:
    found = _local(port, "bug-quant-gate4")
    assert [token for token, _, _ in found] == [0, 1, 2, 3, 4]
    assert all(
        name.startswith("Module.model.layers.4.mlp.gate_proj.") and rule == "weights"
        for _, name, rule in found
    )


def test_the_clean_port_is_blamed_for_nothing(port: Path) -> None:
    assert _local(port, "clean") == []


@pytest.mark.parametrize("run", ["golden", "clean"])
def test_checked_on_its_own_a_clean_run_raises_no_anomaly(port: Path, run: str) -> None:
    """``tui-acc DUMP`` on the fp32 golden and on the clean bf16 port: every norm of the real
    accelerator run normalises on purpose, nothing is a jump, an Inf or all zero."""
    report = single.build_report(open_single(port / run))
    assert report.anomalies == [] and report.errors == []
    assert report.checked_tokens == [0, 1, 2, 3, 4]
