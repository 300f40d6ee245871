"""One dump checked on its own (``tui-acc DUMP``, ``report DUMP``): anomalies injected into copies of
real and generated dumps are found at their token, operator and tensor; clean dumps raise nothing,
the repository's every real-tool dump and tests/data/anomalies' normal arithmetic (a norm's rsqrt, a
softmax's exp, masks' fills, ...: scripts/make_anomaly_fixtures.py) included.

Every injected value is exact (a NaN, float16's limit, zeros, a power-of-two scale): the verdicts
rest on no CPU's arithmetic.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.archives import unpack as unpack_archive
from tui_acc.anomalies.rules import AnomalySettings, Inputs, anomaly
from tui_acc.anomalies.session import open_single
from tui_acc.cli.main import main
from tui_acc.dumps.atb.bin import load_bin
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.writers.atb_bin import write_bin
from tui_acc.reports import single

DATA = Path(__file__).parents[1] / "data"
NORMAL_ARITHMETIC = "normal-arithmetic"


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """``unpacked(folder, name)``: ``tests/data/{folder}/{name}.tar.xz`` unpacked once per session."""
    root = tmp_path_factory.mktemp("anomaly-data")

    def unpack(folder: str, name: str) -> Path:
        target = root / folder / name
        if not target.is_dir():
            unpack_archive(DATA / folder / f"{name}.tar.xz", root / folder)
        return target

    return unpack


def _device(dump: Path) -> Path:
    (device,) = dump.glob("msit_dump_*/torch_tensors/*_*")
    return device


def _rewrite_pth(path: Path, change) -> None:
    import torch

    tensor = torch.load(path)
    torch.save(change(tensor), path)


@pytest.fixture
def copy_of_test(demo_pair, tmp_path: Path) -> Path:
    target = tmp_path / "test"
    shutil.copytree(demo_pair.test, target)
    return target


def _first(dump: Path, **options) -> dict | None:
    report = single.build_report(open_single(dump), **options)
    return report.first_anomaly


def test_clean_dumps_raise_nothing(demo_pair, atb_pair, model_case) -> None:
    """The demo's golden and faulty test (a stale tile is wrong, not anomalous), its ATB test, and
    the real msprobe L1, mix (float16, masks filled with finfo.min) and statistics dumps."""
    dumps = [demo_pair.golden, demo_pair.test, atb_pair[1]]
    for case in ("llama-msprobe-L1", "llama-msprobe-mix", "llama-msprobe-mix-statistics"):
        dumps += [model_case(case) / "golden", model_case(case) / "test"]
    for dump in dumps:
        report = single.build_report(open_single(dump))
        assert report.anomalies == [] and report.errors == [], dump
        assert report.exit_code == 0


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("nan", lambda t: t.index_fill(-1, __import__("torch").tensor([5]), float("nan"))),
        ("inf", lambda t: t.index_fill(-1, __import__("torch").tensor([5]), float("inf"))),
        ("zeros", lambda t: t * 0),
        ("jump", lambda t: t * 4096),
    ],
)
def test_an_injected_anomaly_is_found_where_it_starts(copy_of_test: Path, kind: str, change) -> None:
    _rewrite_pth(_device(copy_of_test) / "2" / "root.model.layers.1.mlp.act_fn" / "output.pth", change)
    first = _first(copy_of_test)
    assert first is not None
    assert (first["token"], first["op"], first["tensor"], first["kind"]) == (
        2,
        "root.model.layers.1.mlp.act_fn",
        "output",
        kind,
    )


def test_float16_overflow_is_named_and_a_carried_nan_is_inherited(copy_of_test: Path) -> None:
    import torch

    device = _device(copy_of_test)
    limit = lambda t: t.to(torch.float16).index_fill(-1, torch.tensor([3]), 65504.0)  # noqa: E731
    _rewrite_pth(device / "4" / "root.model.layers.0.self_attn.q_proj" / "output.pth", limit)
    # a NaN at token 1 that the next operator's input carries: the first is local, the second inherited
    nan = lambda t: t.index_fill(-1, torch.tensor([0]), float("nan"))  # noqa: E731
    _rewrite_pth(device / "1" / "root.model.layers.3.mlp.up_proj" / "output.pth", nan)
    _rewrite_pth(device / "1" / "root.model.layers.3.mlp.down_proj" / "input_0.pth", nan)
    _rewrite_pth(device / "1" / "root.model.layers.3.mlp.down_proj" / "output.pth", nan)
    report = single.build_report(open_single(copy_of_test))
    assert report.first_anomaly["op"] == "root.model.layers.3.mlp.up_proj"
    labels = {(a["token"], a["op"], a["tensor"]): (a["kind"], a["label"]) for a in report.anomalies}
    assert labels[(1, "root.model.layers.3.mlp.up_proj", "output")] == ("nan", "local")
    assert labels[(1, "root.model.layers.3.mlp.down_proj", "output")] == ("nan", "inherited")
    assert labels[(4, "root.model.layers.0.self_attn.q_proj", "output")] == ("overflow", "local")
    by_token = {t["token"]: t for t in report.tokens}
    assert by_token[4]["first_anomaly"] == "root.model.layers.0.self_attn.q_proj"
    assert _first(copy_of_test, token=4)["kind"] == "overflow"


def test_an_atb_dump_is_checked_too(atb_pair, tmp_path: Path) -> None:
    dump = tmp_path / "atb"
    shutil.copytree(atb_pair[1], dump)
    (out,) = dump.rglob("3/3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation/after/outtensor0.bin")
    values = np.array(load_bin(out, ANYWHERE), copy=True)
    values.reshape(-1)[7] = np.nan
    write_bin(out, values)
    first = _first(dump)
    assert first is not None and (first["token"], first["kind"]) == (3, "nan")
    assert first["op"] == "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"


def test_a_statistics_dump_is_checked_from_its_statistics(model_case, tmp_path: Path) -> None:
    dump = tmp_path / "stats"
    shutil.copytree(model_case("llama-msprobe-mix-statistics") / "test", dump)
    (record_file,) = dump.rglob("dump.json")
    records = json.loads(record_file.read_text())
    name = next(n for n in records["data"] if n.startswith("Functional.silu"))
    records["data"][name]["output"][0]["Max"] = float("inf")
    record_file.write_text(json.dumps(records))
    first = _first(dump)
    assert first is not None and first["op"] == name and first["kind"] in ("inf", "overflow")


def test_a_damaged_file_is_named_and_the_rest_is_checked(copy_of_test: Path) -> None:
    device = _device(copy_of_test)
    damaged = device / "3" / "root.model.layers.2.mlp.up_proj" / "output.pth"
    damaged.write_bytes(damaged.read_bytes()[:40])
    _rewrite_pth(device / "5" / "root.model.norm" / "output.pth", lambda t: t * 0)
    report = single.build_report(open_single(copy_of_test))
    assert any(e["file"] == str(damaged) for e in report.errors)
    assert report.first_anomaly["op"] == "root.model.norm"  # the damaged file is no culprit
    assert report.exit_code == 1


def test_the_rules_spare_what_models_do_on_purpose() -> None:
    settings = AnomalySettings()
    out = {"role": "output", "test_dtype": "float16", "test_max": 0.0, "test_min": -65504.0, "numel": 25}
    assert anomaly(out, Inputs(True, 0.0), settings) is None  # a mask filled with finfo(float16).min
    mask = {
        "role": "output",
        "test_dtype": "float32",
        "test_max": 0.0,
        "test_min": float("-inf"),
        "test_inf": 10,
    }
    assert anomaly(mask, Inputs(True, None), settings) is None  # -inf from booleans: a causal mask
    assert anomaly(mask, Inputs(True, 3.0), settings) == ("inf", 11.0)  # from finite float inputs
    scores = {**mask, "test_min": -1e30}
    assert anomaly(scores, Inputs(True, float("inf")), settings) is None  # carried: its producer's
    zeros = {"role": "output", "test_dtype": "bfloat16", "test_max": 0.0, "test_min": 0.0, "test_norm": 0.0}
    assert anomaly(zeros, Inputs(True, 0.0), settings) is None  # zeros in, zeros out
    assert anomaly({**zeros, "test_dtype": "int64"}, Inputs(True, 1.0), settings) is None
    softmax = {"role": "output", "test_dtype": "float32", "test_max": 0.9, "test_min": 0.0}
    assert anomaly(softmax, Inputs(True, 1e-4), settings) is None  # below jump_floor


def test_report_json_text_csv_and_exit_codes(copy_of_test: Path, tmp_path: Path, capsys) -> None:
    _rewrite_pth(
        _device(copy_of_test) / "2" / "root.model.layers.1.mlp.act_fn" / "output.pth", lambda t: t * 0
    )
    csv = tmp_path / "anomalies.csv"
    assert main(["report", str(copy_of_test), "--json", "--csv", str(csv)]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["first_anomaly"] == {
        "token": 2,
        "op": "root.model.layers.1.mlp.act_fn",
        "type": "SiLU",
        "tensor": "output",
        "kind": "zeros",
        "figure": 176.0,
    }
    assert {"token", "op", "tensor", "kind"} <= set(result["anomalies"][0]) and result["errors"] == []
    assert "root.model.layers.1.mlp.act_fn" in csv.read_text()
    assert main(["report", str(copy_of_test), "--csv", str(csv)]) == 2  # never over a file
    assert "exists" in capsys.readouterr().err
    assert main(["report", str(copy_of_test)]) == 1
    assert (
        "first anomaly: token 2, root.model.layers.1.mlp.act_fn (SiLU), output: zeros"
        in capsys.readouterr().out
    )
    assert main(["report", str(copy_of_test), "--baseline", str(copy_of_test)]) == 2
    assert "--baseline compare(s) two dumps" in capsys.readouterr().err


def test_a_clean_dump_exits_0_and_bad_input_2(demo_pair, tmp_path: Path, capsys) -> None:
    assert main(["report", str(demo_pair.golden)]) == 0
    assert "first anomaly: none" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    config = tmp_path / "bad.toml"
    config.write_text("[anomalies]\njump_factor = -3\n")
    assert main(["report", str(demo_pair.golden), "--config", str(config)]) == 2
    assert "bad.toml: anomalies.jump_factor must be a positive number" in capsys.readouterr().err


def test_msprobe_atb_statistics_are_checked_from_statistic_csv(atb_pair, tmp_path: Path) -> None:
    """An ATB op's output with a NaN, dumped as the ATB probe's statistics task (statistic.csv only):
    its NaN statistic is the tensor's own (std::to_string's "nan"), not a missing one."""
    from tui_acc.demo.probe_export import ProbeOptions, export_probe
    from tui_acc.dumps import open_dump

    copy = tmp_path / "atb"
    shutil.copytree(atb_pair[1], copy)
    (out,) = copy.rglob("3/3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation/after/outtensor0.bin")
    values = np.array(load_bin(out, ANYWHERE), copy=True)
    values.reshape(-1)[7] = np.nan
    write_bin(out, values)
    stats = export_probe([copy], tmp_path / "stats", ProbeOptions(task="statistics"))
    assert open_dump(stats).statistics_only
    first = _first(stats)
    assert first is not None and (first["token"], first["kind"]) == (3, "nan")
    assert first["op"].endswith("3_LinearOperation")
    clean = export_probe([atb_pair[1]], tmp_path / "clean", ProbeOptions(task="statistics"))
    assert single.build_report(open_single(clean)).anomalies == []


@pytest.mark.parametrize(
    "case",
    sorted(
        p.name.removesuffix(".tar.xz")
        for p in (Path(__file__).parents[1] / "data" / "models").glob("*.tar.xz")
    ),
)
def test_every_real_tool_dump_raises_nothing(model_case, case: str) -> None:
    """msit and msprobe's own dumps of clean and faulty runs (a fault is wrong, not anomalous): L0,
    L1, mix, statistics, checksums, debug saves, serving steps; float16 masks and MoE routing."""
    for side in ("golden", "test"):
        report = single.build_report(open_single(model_case(case) / side))
        assert report.anomalies == [] and report.errors == [], (case, side)


def test_a_token_of_a_single_dump_judges_that_token_alone(demo_pair, monkeypatch) -> None:
    # with no golden, no earlier token can have chosen another input: asking for the last token must
    # not judge every token before it (a long decode would judge N^2 operators)
    engine = open_single(demo_pair.test).engine
    judged: list[int] = []
    node_rows = type(engine).node_rows

    def counted(self, token: int, *args, **kwargs):
        judged.append(token)
        return node_rows(self, token, *args, **kwargs)

    monkeypatch.setattr(type(engine), "node_rows", counted)
    last = engine.pairing.tokens[-1]
    assert len(engine.pairing.tokens) > 2
    engine.token_row(last)
    engine.token_row(last)  # asked again: remembered
    assert judged == [last]


def _clean(dump: Path) -> None:
    report = single.build_report(open_single(dump))
    assert report.errors == [], dump
    assert report.anomalies == [], (dump, report.anomalies[:3])


def test_every_reference_dump_raises_nothing(reference: Path) -> None:
    """The real msit and msprobe reference runs (fp32 goldens, bf16 tests, the synthetic ATB port,
    statistics dumps): clean by construction (tests/data/reference/MANIFEST.md), on both sets."""
    dumps = [
        reference / case / side
        for case, sides in (
            ("msit-torch-2layer", ("golden", "test")),
            ("msit-torch-logits", ("golden", "test")),
            ("msit-torch-12layer-vs-atb", ("golden", "test_torch_bf16", "test_atb")),
            ("msit-torch-stats", ("golden", "test")),
            ("msprobe-L0/tensor", ("golden", "test")),
            ("msprobe-L0/statistics", ("golden", "test")),
        )
        for side in sides
    ]
    for dump in dumps:
        _clean(dump)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_the_sensitivity_sweeps_clean_runs_raise_nothing(sensitivity_case, level: str) -> None:
    """The fp32 eager golden and the clean bf16 SDPA port: at mix, every norm's rsqrt of its
    variance (up to 1.2e4 times its input) and the mask's fill among them."""
    case = sensitivity_case(level, "clean")
    _clean(case.golden)
    _clean(case.test)


@pytest.mark.parametrize(
    ("folder", "name", "sides"),
    [
        ("sglang", "sglang-llama", ("golden", "test", "test_tp2")),
        ("aclgraph", "llama-aclgraph-L1-tensor", ("golden", "test")),
        ("aclgraph", "llama-aclgraph-mix-tensor", ("golden", "test")),
        ("aclgraph", "llama-aclgraph-mix-statistics", ("golden", "test")),
        ("anomalies", NORMAL_ARITHMETIC, ("tensor", "statistics")),
    ],
)
def test_sglang_graph_mode_and_normal_arithmetic_raise_nothing(
    unpacked, folder: str, name: str, sides: tuple[str, ...]
) -> None:
    """SGLang's dumper, msprobe's graph mode (``aten.zeros`` and a ``where`` choosing its zero among
    its records) and the normal-arithmetic dump; the test sides' faults (a few columns doubled) are
    wrong, not anomalous."""
    for side in sides:
        _clean(unpacked(folder, name) / side)


def test_the_normal_arithmetic_dump_holds_what_it_claims(unpacked) -> None:
    """Each family of docs/single-dump.md's normal arithmetic is a record of the fixture, at both
    tokens, so that "raises nothing" above covers it."""
    index = open_single(unpacked("anomalies", NORMAL_ARITHMETIC) / "statistics").golden
    expected = {
        "Torch.rsqrt", "Tensor.pow", "Torch.reciprocal", "Tensor.reciprocal", "Tensor.__truediv__",
        "Tensor.__rpow__", "Torch.pow", "Torch.exp", "Functional.softmax", "Functional.log_softmax",
        "Torch.log", "Functional.layer_norm", "Tensor.cumsum", "Tensor.sum", "Torch.histc",
        "Tensor.masked_fill", "Tensor.__rsub__", "Tensor.__mul__", "Torch.where", "Functional.embedding",
        "Module.model.norm.RMSNorm", "Module.model.rotary_emb.RotaryEmbedding",
    }  # fmt: skip
    for token in (0, 1):
        names = {name.rsplit(".", 2)[0] for name in index.tokens[token]}
        names |= {name.split(".forward.")[0] for name in index.tokens[token]}
        assert expected <= names, expected - names


def _scaled(t):
    """A power-of-two scale of every finite value below the dtype's limit (a mask's fill kept)."""
    import torch

    return torch.where(t.abs() < 1e30, t * 2.0**14, t)


@pytest.mark.parametrize(
    "record",
    [
        "Torch.rsqrt.0.forward",  # judged by 1/sqrt(min x)
        "Tensor.pow.2.forward",  # x ** -0.5
        "Tensor.__truediv__.2.forward",  # x / 1e-4: its recorded divisor
        "Torch.exp.0.forward",  # exp(max x)
        "Functional.softmax.0.forward",  # at most 1
        "Tensor.cumsum.0.forward",  # n * max|x|
        "Tensor.masked_fill.0.forward",  # its values beside the fill
        "Module.model.norm.RMSNorm.forward.0",  # sqrt(n) * max|w|
    ],
)
def test_a_scale_error_in_normal_arithmetic_is_still_a_jump(unpacked, tmp_path: Path, record: str) -> None:
    """The normal arithmetic's own output at token 0 scaled by 2**14: beyond what its arithmetic allows
    by far, it is the first anomaly, a local jump, in both tasks' dumps."""
    source = unpacked("anomalies", NORMAL_ARITHMETIC)
    tensors = tmp_path / "tensor"
    shutil.copytree(source / "tensor", tensors)
    (output,) = tensors.rglob(f"{record}.output.0.pt")
    _rewrite_pth(output, _scaled)
    statistics = tmp_path / "statistics"
    shutil.copytree(source / "statistics", statistics)
    # each dump's record says what msprobe would have seen: the scaled values (a tensor file its record
    # does not describe is named, not judged)
    for dump in (tensors, statistics):
        (record_file,) = dump.rglob("dump.json")
        records = json.loads(record_file.read_text())
        stats = records["data"][record]["output"][0]
        for key in ("Max", "Min", "Mean"):
            if abs(stats[key]) < 1e30:
                stats[key] *= 2.0**14
        record_file.write_text(json.dumps(records))
    for dump in (tensors, statistics):
        report = single.build_report(open_single(dump))
        first = report.first_anomaly
        assert first is not None, dump
        assert (first["token"], first["op"], first["kind"]) == (0, record, "jump"), dump
        assert first["figure"] >= AnomalySettings().jump_factor
        assert [a["op"] for a in report.anomalies if a["label"] == "local"] == [record]
