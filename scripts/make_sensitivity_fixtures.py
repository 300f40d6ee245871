"""The sensitivity sweep: ``tests/data/sensitivity/{L0,mix}.tar.xz`` and their answer key.

A seeded random Llama (``LlamaForCausalLM`` from a ``LlamaConfig``, no download) generates 4
tokens greedily from an 8-token prompt (root forward 0 is the prefill, 1-3 decode). Every side is
dumped in a process of its own by mindstudio-probe 26.2.0's ``PrecisionDebugger`` (task tensor) at
two levels: L0 (modules, with their ``parameters``) and mix (modules and API calls).

- golden: float32, ``attn_implementation="eager"``;
- test runs: the same weights cast to bfloat16, ``attn_implementation="sdpa"``:

  - ``clean``: no fault;
  - one fault at one decode token (root forward ``FAULT_TOKEN``) in one module, on four sites (a
    linear, a norm, an attention, an activation) at five strengths: the module's output becomes
    ``(scale * out + noise * rms(out) * N(0, 1)).to(out.dtype)`` (a seeded generator), with noise
    5 %, 2 %, 1 % (scale 1) and pure scale 1.02 and 1.05 (noise 0). The module instance's
    ``forward`` is wrapped, so msprobe's hooks see the faulty output and, at mix, the API calls
    inside the module stay as they were (the module is the culprit, its children are consistent);
    the perturbation itself runs with msprobe's API wrapping lifted, so it leaves no record;
  - systematic bugs present at every token: ``bug-int8-weight`` (one linear's weight fake-quantised
    to int8 with a single per-tensor scale, then cast to bfloat16 like the rest) and
    ``bug-rope-theta`` (the test model's rotary embedding built with a wrong ``rope_theta``).

The answer key is checked here, loudly: every faulty run is bit-identical to ``clean``, tensor file
by tensor file in msprobe's execution order (dump.json's record order, each record's tensors in
the order dump.json lists them), up to the first file that differs, and that file is the faulted
module's output (bugs, at forward 0: int8, the linear's output, or at mix its ``F.linear`` call's
weight; rope, the rotary embedding's output, or at mix the wrong ``inv_freq`` entering a call inside
it). Each run's ``case.json`` records the site, token, kind,
strength, the first differing record and file, the relative error the fault added to that output
(``||faulty - clean|| / ||clean||`` in float64) and the golden-vs-test cosine there (of the clean
run too), the logits' cosine per token, and the tools' versions; ``tests/data/sensitivity/
cases.json`` gathers every run's key in plain text.

Both levels are packed as ONE solid tar.xz, ``sweep.tar.xz`` (LZMA2 preset 9 extreme, a 64 MiB
dictionary): L0 and mix hold the same tensors under the same names, parameters repeat at every
call and runs share every file before their fault, so identical data is packed together and a
repeated file is a hard link to its first copy (see ``pack``). Re-packing the same dumps
(``--keep DIR --reuse``) gives the same bytes; new dumps differ in their process ids.

The tools need a virtual environment of their own (the route is in make_model_fixtures.py's
docstring; docs/formats.md §0), then, from the repository::

    /path/to/tools-venv/bin/python scripts/make_sensitivity_fixtures.py [--keep DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_model_fixtures import TokenCounter, _relativise, _versions

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "sensitivity"
LEVELS = ("L0", "mix")
PROMPT = [1, 73, 184, 223, 397, 319, 324, 437]  # golden and clean test agree on every token, by a margin
NEW_TOKENS = 4
SEED = 1234
NOISE_SEED = 4321  # every noise fault draws the same N(0, 1) values: strengths differ only in size
FAULT_TOKEN = 2  # a decode step: root forward 2
ROPE_THETA, WRONG_ROPE_THETA = 10000.0, 1000000.0
ARCHIVE_MTIME = 1767225600  # 2026-01-01: members are dated alike, so the archive is the same bytes
LZMA_DICT = 64 << 20  # identical files are packed together (pack): every repeat is well inside it
ARCHIVE = "sweep"  # tests/data/sensitivity/sweep.tar.xz unpacks to sweep/{L0,mix}/

SITES = {  # kind of operator -> the faulted module's path in the model
    "linear": "model.layers.1.self_attn.o_proj",
    "norm": "model.layers.1.post_attention_layernorm",
    "attention": "model.layers.2.self_attn",
    "activation": "model.layers.2.mlp.act_fn",
}
STRENGTHS = {  # name -> (scale, noise as a fraction of the output's rms)
    "noise-5pct": (1.0, 0.05),
    "noise-2pct": (1.0, 0.02),
    "noise-1pct": (1.0, 0.01),
    "scale-1.02": (1.02, 0.0),
    "scale-1.05": (1.05, 0.0),
}
INT8_SITE = "model.layers.2.mlp.gate_proj"
ROTARY = "model.rotary_emb"


@dataclass(frozen=True)
class Run:
    """One test-side run of the sweep."""

    name: str
    kind: str  # clean | noise | scale | int8-weight | rope-theta
    site: str | None = None  # the faulted module's path in the model
    site_kind: str | None = None  # linear | norm | attention | activation
    token: int | None = None  # root forward of a single fault; None: clean, or a bug at every token
    scale: float = 1.0
    noise: float = 0.0


def runs() -> dict[str, Run]:
    """Every test run, clean first, in the order they are dumped and listed."""
    found = {"clean": Run("clean", "clean")}
    for site_kind, site in SITES.items():
        for strength, (scale, noise) in STRENGTHS.items():
            name = f"{site_kind}-{strength}"
            kind = "noise" if noise else "scale"
            found[name] = Run(name, kind, site, site_kind, FAULT_TOKEN, scale, noise)
    found["bug-int8-weight"] = Run("bug-int8-weight", "int8-weight", INT8_SITE, "linear")
    found["bug-rope-theta"] = Run("bug-rope-theta", "rope-theta", ROTARY, "rotary embedding")
    return found


RUNS = runs()


# --- one side, in its own process -----------------------------------------------------------


def build_model(attention: str, rope_theta: float = ROPE_THETA) -> Any:
    """The seeded float32 Llama; ``rope_theta`` changes the rotary embedding only (same weights)."""
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    config = tf.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        # std 0.05, not transformers' 0.02: activations are not tiny, a fault reaches the logits
        initializer_range=0.05,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        attn_implementation=attention,
    )
    model = tf.LlamaForCausalLM(config).eval()
    if rope_theta != ROPE_THETA:
        wrong = tf.LlamaConfig.from_dict(config.to_dict())
        wrong.rope_parameters = {"rope_type": "default", "rope_theta": rope_theta}
        model.model.rotary_emb = type(model.model.rotary_emb)(config=wrong)
    return model


def fake_quantise_int8(model: Any, path: str) -> None:
    """The linear's weight rounded to int8 steps of ONE per-tensor scale (max|w| / 127), in place."""
    import torch

    weight = model.get_submodule(path).weight
    with torch.no_grad():
        scale = weight.abs().max() / 127
        weight.copy_(torch.clamp(torch.round(weight / scale), -127, 127) * scale)


def install_fault(model: Any, run: Run, tokens: TokenCounter) -> None:
    """The module's output is perturbed at ``run.token``: its instance's ``forward`` is wrapped.

    msprobe's module hooks run around ``forward``, so they record the perturbed output; the
    perturbation runs with msprobe's API wrapping lifted (at mix it would otherwise add records).
    """
    import torch

    assert run.site is not None and run.token is not None
    module = model.get_submodule(run.site)
    forward = module.forward
    generator = torch.Generator().manual_seed(NOISE_SEED)
    done = {"calls": 0}

    def perturb(out: Any) -> Any:
        x = out.detach().to(torch.float32)
        y = run.scale * x
        if run.noise:
            rms = x.pow(2).mean().sqrt()
            y = y + run.noise * rms * torch.randn(x.shape, generator=generator, dtype=torch.float32)
        return y.to(out.dtype)

    def faulty(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        if tokens.token != run.token or done["calls"]:
            return out
        done["calls"] += 1
        with unwrapped_apis():
            if isinstance(out, tuple):  # an attention: (output, weights)
                return (perturb(out[0]), *out[1:])
            return perturb(out)

    module.forward = faulty


@contextlib.contextmanager
def unwrapped_apis() -> Iterator[None]:
    """msprobe's wrapped torch APIs restored to the originals for a block, then wrapped again."""
    from msprobe.pytorch.dump.api_dump.api_register import get_api_register

    register = get_api_register()
    wrapped = register.all_api_registered
    if wrapped:
        register.restore_all_api()
    try:
        yield
    finally:
        if wrapped:
            register.register_all_api()


def dump_side(level: str, run_name: str, out: Path) -> None:
    """Dump the golden (``run_name`` "golden") or one test run at ``level`` into ``out``."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)  # the same reduction order in every process: runs are bit-identical
    if run_name == "golden":
        model = build_model("eager")
    else:
        run = RUNS[run_name]
        theta = WRONG_ROPE_THETA if run.kind == "rope-theta" else ROPE_THETA
        model = build_model("sdpa", theta)
        if run.kind == "int8-weight":
            assert run.site is not None
            fake_quantise_int8(model, run.site)
        model = model.to(torch.bfloat16)
    tokens = TokenCounter(model)
    if run_name != "golden" and RUNS[run_name].token is not None:
        install_fault(model, RUNS[run_name], tokens)
    out.mkdir(parents=True)
    side = "golden" if run_name == "golden" else "test"
    config = out.parent / f"{side}_config.json"
    section = {"scope": [], "list": [], "data_mode": ["all"]}
    settings = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [], "level": level}
    config.write_text(json.dumps({**settings, "tensor": section}), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config))
    debugger.start(model)
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        generated = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False
        )
    debugger.stop()
    debugger.step()
    record = {"generated": [int(i) for i in generated[0, len(PROMPT) :]], "forwards": tokens.token + 1}
    (out.parent / f"{side}_run.json").write_text(json.dumps(record), encoding="utf-8")


# --- the dumps of a level, read back --------------------------------------------------------


@dataclass(frozen=True)
class TensorFile:
    """One tensor file of a dump, in execution order."""

    record: str
    tensor: str  # its place in the record: input.0, kwargs.position_ids, parameters.weight, output.0
    data_name: str


class Dump:
    """An msprobe dump (one step, one process folder): dump.json's tensor files in order."""

    def __init__(self, root: Path) -> None:
        (self.dump_json,) = root.glob("step0/*/dump.json")
        self.folder = self.dump_json.parent
        self.data = json.loads(self.dump_json.read_text(encoding="utf-8"))["data"]
        construct = self.folder / "construct.json"
        self.parents: dict[str, str | None] = json.loads(construct.read_text(encoding="utf-8"))
        self.files = [
            TensorFile(name, tensor, data_name)
            for name, record in self.data.items()
            for tensor, data_name in _tensors(record)
        ]

    def path(self, data_name: str) -> Path:
        return self.folder / "dump_tensor_data" / data_name

    def load(self, data_name: str) -> Any:
        import torch

        return torch.load(self.path(data_name), map_location="cpu", weights_only=True)

    def ancestors(self, record: str) -> list[str]:
        found = []
        parent = self.parents.get(record)
        while parent:
            found.append(parent)
            parent = self.parents.get(parent)
        return found


def _tensors(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(place, data_name) of every tensor of a record, in the order dump.json lists them."""
    found: list[tuple[str, str]] = []

    def walk(value: Any, place: str) -> None:
        if isinstance(value, dict) and "data_name" in value:
            found.append((place, value["data_name"]))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{place}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{place}.{index}")

    names = {"input_args": "input", "input_kwargs": "kwargs", "output": "output", "parameters": "parameters"}
    for key, value in record.items():
        if key in names:
            walk(value, names[key])
    return found


def _same_tensor(a: Any, b: Any) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return bool(torch.equal(a.contiguous().view(bits), b.contiguous().view(bits)))
    return bool(torch.equal(a, b))


def first_difference(clean: Dump, faulty: Dump) -> tuple[int, TensorFile]:
    """The first tensor file, in execution order, where ``faulty`` is not bit-identical to ``clean``.

    Raises SystemExit when the two dumps' records or files part before any tensor differs, or
    when nothing differs.
    """
    for index, (a, b) in enumerate(zip(clean.files, faulty.files, strict=False)):
        if (a.record, a.tensor) != (b.record, b.tensor):
            raise SystemExit(f"{faulty.dump_json}: file {index} is {b}, clean has {a}, before any difference")
        if clean.path(a.data_name).read_bytes() == faulty.path(b.data_name).read_bytes():
            continue
        if not _same_tensor(clean.load(a.data_name), faulty.load(b.data_name)):
            return index, b
    raise SystemExit(f"{faulty.dump_json}: no tensor differs from the clean run")


def _module_record(dump: Dump, path: str, call: int) -> str:
    pattern = re.compile(rf"Module\.{re.escape(path)}\.\w+\.forward\.{call}$")
    (found,) = [name for name in dump.data if pattern.match(name)]
    return found


def expected_at(run: Run, dump: Dump, found: TensorFile) -> bool:
    """Whether the first difference is where the run's fault or bug is (the answer key)."""
    assert run.site is not None
    if run.kind in ("noise", "scale"):
        assert run.token is not None
        module = _module_record(dump, run.site, run.token)
        return found.record == module and found.tensor.startswith("output.0")
    # a bug: the module at forward 0, or at mix an API call inside it (dump.json lists a module
    # after the calls it made); int8: the linear's weight or output; rope: its output (cos, sin)
    module = _module_record(dump, run.site, 0)
    if found.record != module:
        inside = module in dump.ancestors(found.record)
        return inside and (run.kind == "rope-theta" or found.tensor in ("input.1", "output.0"))
    if run.kind == "int8-weight":
        return found.tensor in ("parameters.weight", "output.0")
    return found.tensor.startswith("output")


def measure(golden: Dump, clean: Dump, test: Dump, found: TensorFile) -> dict[str, Any]:
    """Relative error the fault added at ``found`` and the golden-vs-test cosines there."""
    import torch

    def as64(dump: Dump, name: str) -> Any:
        return dump.load(name).to(torch.float64).flatten()

    place = (found.record, found.tensor)
    clean_name = next(f.data_name for f in clean.files if (f.record, f.tensor) == place)
    faulty, reference = as64(test, found.data_name), as64(clean, clean_name)
    figures: dict[str, Any] = {
        "added_rel_error": _rel(faulty, reference),
        "norm_ratio_vs_clean": float(faulty.norm() / reference.norm()),
    }
    golden_file = next(
        (f for f in golden.files if (f.record, f.tensor) == (found.record, found.tensor)), None
    )
    if golden_file is not None:
        gold = as64(golden, golden_file.data_name)
        figures.update(
            cosine_golden_vs_test=_cosine(gold, faulty),
            cosine_golden_vs_clean=_cosine(gold, reference),
            rel_error_golden_vs_test=_rel(faulty, gold),
            rel_error_golden_vs_clean=_rel(reference, gold),
        )
    return figures


def _rel(a: Any, b: Any) -> float:
    return float((a - b).norm() / b.norm())


def _cosine(a: Any, b: Any) -> float:
    return float((a @ b) / (a.norm() * b.norm()))


def logits_cosines(golden: Dump, test: Dump) -> list[float | None]:
    """The lm_head output's golden-vs-test cosine at each token."""
    import torch

    cosines: list[float | None] = []
    for token in range(NEW_TOKENS):
        name = f"Module.lm_head.Linear.forward.{token}"
        gold = [f for f in golden.files if f.record == name and f.tensor == "output.0"]
        ours = [f for f in test.files if f.record == name and f.tensor == "output.0"]
        if not gold or not ours:
            cosines.append(None)
            continue
        a = golden.load(gold[0].data_name).to(torch.float64).flatten()
        b = test.load(ours[0].data_name).to(torch.float64).flatten()
        cosines.append(_cosine(a, b))
    return cosines


# --- a whole level --------------------------------------------------------------------------


def dump_level(level: str, work: Path) -> Path:
    """Dump the golden and every run of ``level`` under ``work/level``, each in its own process."""
    root = work / level
    jobs = [("golden", root / "golden"), *((name, root / name / "test") for name in RUNS)]
    for name, out in jobs:
        command = [sys.executable, __file__, "--side", level, name, str(out)]
        print(f"  {level} {name}", file=sys.stderr, flush=True)
        subprocess.run(command, check=True, cwd=work, stdout=subprocess.DEVNULL)
    return root


def answer_key(level: str, root: Path) -> dict[str, dict[str, Any]]:
    """Check every run against the clean one and write its case.json; returns the key by run."""
    golden, clean = Dump(root / "golden"), Dump(root / "clean" / "test")
    golden_run = json.loads((root / "golden_run.json").read_text(encoding="utf-8"))
    versions = _versions()
    keys: dict[str, dict[str, Any]] = {}
    for name, run in RUNS.items():
        test = Dump(root / name / "test")
        test_run = json.loads((root / name / "test_run.json").read_text(encoding="utf-8"))
        case: dict[str, Any] = {
            "level": level,
            "run": name,
            **asdict(run),
            "description": describe(run),
            "prompt": PROMPT,
            "new_tokens": NEW_TOKENS,
            "golden": {"dtype": "float32", "attn_implementation": "eager", "rope_theta": ROPE_THETA},
            "test": {
                "dtype": "bfloat16",
                "attn_implementation": "sdpa",
                "rope_theta": WRONG_ROPE_THETA if run.kind == "rope-theta" else ROPE_THETA,
            },
            "generated": {"golden": golden_run["generated"], "test": test_run["generated"]},
            "logits_cosine": logits_cosines(golden, test),
        }
        if run.kind != "clean":
            index, found = first_difference(clean, test)
            if not expected_at(run, test, found):
                raise SystemExit(f"{level}/{name}: the first difference is {found}, not the fault's output")
            case["first_difference"] = {
                "record": found.record,
                "tensor": found.tensor,
                "file": found.data_name,
                "position": index,
                "of": len(test.files),
            }
            case.update(measure(golden, clean, test, found))
            if run.kind == "int8-weight":
                module = _module_record(test, INT8_SITE, 0)
                case["weight"] = int8_weight_figures(golden, clean, test, module)
        case["tools"] = versions
        (root / name / "case.json").write_text(json.dumps(case, indent=2) + "\n", encoding="utf-8")
        keys[name] = case
    return keys


def int8_weight_figures(golden: Dump, clean: Dump, test: Dump, record: str) -> dict[str, float]:
    """How far the quantised weight is from the golden's, beside the plain bfloat16 cast's distance."""
    import torch

    def weight(dump: Dump) -> Any:
        (name,) = [f.data_name for f in dump.files if f.record == record and f.tensor == "parameters.weight"]
        return dump.load(name).to(torch.float64).flatten()

    gold, cast, quantised = weight(golden), weight(clean), weight(test)
    return {
        "rel_error_golden_vs_bf16_cast": _rel(cast, gold),
        "rel_error_golden_vs_int8": _rel(quantised, gold),
        "rel_error_bf16_cast_vs_int8": _rel(quantised, cast),
    }


def describe(run: Run) -> str:
    if run.kind == "clean":
        return "no fault: fp32 eager golden against the same weights in bf16 with SDPA"
    if run.kind == "int8-weight":
        return f"{run.site}.weight fake-quantised to int8 with one per-tensor scale (max|w|/127), every token"
    if run.kind == "rope-theta":
        wrong = f"rope_theta {WRONG_ROPE_THETA:g} (golden {ROPE_THETA:g})"
        return f"rotary embedding built with {wrong}, every token"
    change = f"scale {run.scale:g}" + (f" + noise {run.noise:.0%} of rms" if run.noise else "")
    return f"{run.site} ({run.site_kind}) output at token {run.token}: {change}"


def relativise(root: Path) -> None:
    """No absolute path of this machine stays: dump.json's data dir, stack.json's files, configs."""
    _relativise(root)  # dump.json and stack.json everywhere below, root/golden_config.json
    for config in root.glob("*/test_config.json"):
        data = json.loads(config.read_text(encoding="utf-8"))
        data["dump_path"] = Path(data["dump_path"]).name
        config.write_text(json.dumps(data, indent=1), encoding="utf-8")


# --- packing --------------------------------------------------------------------------------


def pack(root: Path, archive: Path) -> int:
    """One solid tar.xz of ``root`` (the sweep: both levels); returns the uncompressed tar's size.

    Members: every folder first, then the files ordered so that the tensor files holding the same
    data sit together whatever their names (a weight is a module's ``parameters.weight`` at every
    call and, at mix, also its ``F.linear`` call's ``input.1``), and the rest by their path inside a
    run, then level, then run: each run's copy of a file beside the others'. Every repeat is then
    within a few MB of its first copy, well inside the compressor's window. A file identical to
    one already packed (a run's files before its fault, the same call at L0 and mix) is a hard link
    to it: it costs a header, and unpacks as a link, not a copy (74 MB on disk instead of 377 MB).
    """
    folders = sorted(p for p in root.rglob("*") if p.is_dir())
    files = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith("_run.json")]
    digests = {p: _payload_digest(p) for p in files}
    keys = {p: _sort_key(root, p) for p in files}
    first: dict[str, tuple[str, int, int, str]] = {}
    for path in sorted(files, key=keys.__getitem__):
        first.setdefault(digests[path], keys[path])
    files.sort(key=lambda p: (first[digests[p]], keys[p]))
    buffer = io.BytesIO()
    stored: dict[str, str] = {}  # a file's bytes -> the member that holds them
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in [root, *folders, *files]:
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root.parent)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = ARCHIVE_MTIME
            info.mode = 0o755 if path.is_dir() else 0o644
            if not path.is_file():
                tar.addfile(info)
                continue
            data = path.read_bytes()
            same = stored.setdefault(hashlib.sha256(data).hexdigest(), info.name)
            if same == info.name:
                tar.addfile(info, io.BytesIO(data))
            else:  # a copy of a file already stored: a hard link to it (unpacks without a second copy)
                info.type, info.linkname, info.size = tarfile.LNKTYPE, same, 0
                tar.addfile(info)
    raw = buffer.getvalue()
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": LZMA_DICT}]
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.write_bytes(lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, filters=filters))
    partial.replace(archive)
    return len(raw)


def _payload_digest(path: Path) -> str:
    """A torch file's storages (its ``data/*`` records), else the whole file: what repeats under
    other names (a weight saved as a parameter at every call and as an API call's input)."""
    digest = hashlib.sha256()
    if path.suffix == ".pt":
        with zipfile.ZipFile(path) as archive:
            for name in sorted(n for n in archive.namelist() if "/data/" in n and "/.data/" not in n):
                digest.update(archive.read(name))
        return "storage:" + digest.hexdigest()
    digest.update(path.read_bytes())
    return "file:" + digest.hexdigest()


def _sort_key(root: Path, path: Path) -> tuple[str, int, int, str]:
    """(path inside its run with the process folder's pid taken out, level, run, path)."""
    level, *parts = path.relative_to(root).parts  # L0/golden/step0/procN/...  L0/{run}/test/step0/...
    order = list(RUNS)
    if parts[0] == "golden":
        inside, run = parts[1:], 0
    elif parts[0] in RUNS:
        inside, run = parts[2:] if parts[1:2] == ["test"] else parts[1:], 1 + order.index(parts[0])
    else:  # the level's golden_config.json
        inside, run = parts, 0
    normal = "/".join(re.sub(r"^proc\d+$", "proc", part) for part in inside)
    return normal, LEVELS.index(level), run, str(path.relative_to(root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keep", type=Path, help="dump into this folder and keep it (default: a temporary)")
    parser.add_argument("--reuse", action="store_true", help="check and pack the dumps already in --keep DIR")
    parser.add_argument("--side", nargs=3, metavar=("LEVEL", "RUN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        level, name, out = args.side
        dump_side(level, name, Path(out))
        return 0
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep DIR")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    work = Path(tempfile.mkdtemp(prefix="tui-acc-sensitivity-") if args.keep is None else args.keep).resolve()
    sweep = work / ARCHIVE
    index: dict[str, dict[str, Any]] = {}
    try:
        for level in LEVELS:
            if not args.reuse:
                dump_level(level, sweep)
                relativise(sweep / level)
            index[level] = answer_key(level, sweep / level)
        raw = pack(sweep, OUT / f"{ARCHIVE}.tar.xz")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    size = (OUT / f"{ARCHIVE}.tar.xz").stat().st_size
    print(f"tar {raw:,} bytes -> {ARCHIVE}.tar.xz {size:,} bytes", file=sys.stderr)
    (OUT / "cases.json").write_text(json.dumps(_summary(index), indent=1) + "\n", encoding="utf-8")
    return 0


def _summary(index: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """cases.json: every run's key, without the repeated prompt, configs and versions."""
    repeated = ("prompt", "new_tokens", "golden", "test", "tools", "level", "run")
    return {
        level: {name: {k: v for k, v in case.items() if k not in repeated} for name, case in cases.items()}
        for level, cases in index.items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
