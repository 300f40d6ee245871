"""tui-acc against msprobe's own compare on a 7B-shaped msprobe L1 dump pair, whole processes, in one run.

    python scripts/bench_msprobe_7b.py [--out DIR [--reuse]] [--runs 3] [--baseline-runs N]
                                       [--baseline-tree DIR] [--tools-venv ~/tools-venv] [--clean]
                                       [--json FILE]

Needs a virtual environment holding mindstudio-probe 26.2.0, torch and transformers (the route is
in scripts/make_model_fixtures.py's docstring), ``--tools-venv`` (default ``~/tools-venv``);
without it the script says so and exits 2: nothing else stands in for msprobe.

1. Builds the pair with the real msprobe (``PrecisionDebugger``, level L1, task tensor,
   ``data_mode`` all; each side in a process of its own in the tools venv): a Llama from
   ``LlamaConfig`` with hidden 4096, FFN 11008, 32 heads, vocab 32,000, 2 layers, eager attention,
   seeded random weights (transformers' own initialisation), one 256-token prefill (one forward
   pass, no ``generate``), golden in float32 and test in bfloat16 (the same weights cast). The test
   carries one injected fault unless ``--clean``: inside ``model.layers.1.mlp.down_proj``'s
   ``F.linear`` call the last 8 output columns come out doubled (make_model_fixtures.py's "scale"
   fault; msprobe names the call ``Functional.linear.13.forward``). L1 dumps every API's tensor
   arguments, the weights too: about 3.5 GB golden, 1.8 GB test, some 230 ``.pt`` files a side.
   The pair is written under ``--out`` (default a temporary folder, deleted at the end); with
   ``--reuse`` a pair this script left there before is timed again without rebuilding it.
2. Times whole processes with the page cache warm (one untimed ``cat`` of both dumps first, and
   one untimed tui-acc run that also writes its operator table with ``--csv``), in alternating
   rounds, ``--runs`` rounds (msprobe in the first ``--baseline-runs`` of them only: it takes
   minutes):

   - the read floor: one ``cat`` of every file of both dumps, to ``/dev/null`` (``read(2)`` of
     every byte, nothing decoded);
   - ``tui-acc report GOLDEN TEST --json --no-cache`` (the ``tui-acc`` console script beside this
     Python, else ``python -m tui_acc``), stdout to a file;
   - ``msprobe compare -tp TEST/dump.json -gp GOLDEN/dump.json -o DIR`` in the tools venv (its
     CSV is checked to hold the pair's rows);
   - with ``--baseline-tree DIR`` (another checkout of tui-acc, e.g. the commit before a change, its
     C extensions built), that tree's ``report`` too (``python -m tui_acc`` run from it), in every
     round, before or after this one's in turn: the change's ratio from the same moments.

   Wall time from spawn to exit; CPU time (user + system) and peak RSS from ``os.wait4``: the
   largest single process of the command's tree (msprobe compare forks a worker pool); the summed
   RSS of the whole tree is also sampled every 50 ms (shared pages counted in each process).
   The load average is recorded before every run: others may share the machine.
3. Prints medians and the ratios report / read floor, msprobe / report, each peak RSS against the
   largest tensor pair (the largest golden + test file of one tensor), and how far tui-acc's
   cosines (its ``--csv`` rows, each operator's worst output) are from msprobe's for the same
   tensor.

Not a test: the figures depend on the machine and its load; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from seeded_llama import SEED, seeded_llama  # noqa: E402  (scripts/, beside this one)
from tools_venv import checkout_state, load, tool_versions, tools_env  # noqa: E402

FAULT_MODULE = "model.layers.1.mlp.down_proj"
TILE = 8  # the fault: the last TILE output columns of the faulty F.linear call come out doubled
RECORD = "pair.json"  # written last into --out: the pair there is complete, and by whom
MARK = "scripts/bench_msprobe_7b.py"
# every name this script writes into --out: the one thing it deletes there, to rebuild a pair
OURS = (
    RECORD,
    "runs",
    *(f"{side}{end}" for side in ("golden", "test") for end in ("", ".log", "_config.json", "_run.json")),
)


# --- one side of the pair, in the tools venv ------------------------------------------------


def dump_side(side: str, out: Path, layers: int, prompt: int, fault: bool) -> None:
    """Dump one forward pass of the seeded model with msprobe L1 into ``out`` (run by the tools venv)."""
    import torch

    model, ids = seeded_llama(layers, prompt, side, attn_implementation="eager")
    record: dict[str, Any] = {}
    if side == "test" and fault:
        install_fault(model, record)  # before msprobe wraps F.linear: its record sees the fault
    from msprobe.pytorch import PrecisionDebugger

    out.mkdir(parents=True)
    settings = {
        "task": "tensor",
        "dump_path": str(out),
        "rank": [],
        "step": [],
        "level": "L1",
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    config_path = out.parent / f"{side}_config.json"
    config_path.write_text(json.dumps(settings), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config_path))
    debugger.start(model)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    debugger.stop()
    debugger.step()
    (out.parent / f"{side}_run.json").write_text(json.dumps(record), encoding="utf-8")


def install_fault(model: Any, record: dict[str, Any]) -> None:
    """Inside ``FAULT_MODULE``'s ``F.linear`` call, the last ``TILE`` output columns come out doubled.

    ``record`` gets the call's index among all ``F.linear`` calls: msprobe numbers
    ``Functional.linear.{n}.forward`` the same way, so the faulty record's name is known.
    """
    import torch.nn.functional as F

    module = model.get_submodule(FAULT_MODULE)
    linear = F.linear
    state = {"inside": False, "calls": 0}
    module.register_forward_pre_hook(lambda *_: state.update(inside=True))
    module.register_forward_hook(lambda *_: state.update(inside=False))

    def faulty_linear(*args: Any, **kwargs: Any) -> Any:
        n = state["calls"]
        state["calls"] += 1
        out = linear(*args, **kwargs)
        if not state["inside"]:
            return out
        record["fault_record"] = f"Functional.linear.{n}.forward"
        patched = out.clone()
        patched[..., -TILE:] *= 2
        return patched

    F.linear = faulty_linear


# --- the pair, kept under --out --------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A generated pair: the folders holding each side's dump.json, and what is in them."""

    golden: Path  # step0/proc*/ of the golden: dump.json, construct.json, dump_tensor_data/
    test: Path
    layers: int
    prompt: int
    fault: str
    fault_record: str | None  # msprobe's name of the faulty call; None: a clean run
    golden_files: int
    test_files: int
    golden_bytes: int
    test_bytes: int
    largest_pair_bytes: int
    largest_pair: str
    generate_s: float

    def files(self) -> list[Path]:
        return sorted(p for side in (self.golden, self.test) for p in side.rglob("*") if p.is_file())


def ensure_pair(out: Path, venv: Path, layers: int, prompt: int, fault: bool, reuse: bool) -> Pair:
    """The pair in ``out``: the one this script left there with ``reuse``, else dumped by msprobe now."""
    record = out / RECORD
    wanted = {"by": MARK, "layers": layers, "prompt": prompt, "fault": fault, "seed": SEED}
    found = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    if found is not None and reuse:
        if {k: found.get(k) for k in wanted} != wanted:
            raise SystemExit(f"--reuse: the pair in {out} was made with {found}, not {wanted}")
    else:
        strangers = sorted(p.name for p in out.iterdir() if p.name not in OURS) if out.is_dir() else []
        if strangers:
            raise SystemExit(f"--out {out}: holds {strangers[:5]}, not written here; give an empty folder")
        for name in OURS:  # a pair to rebuild, or a generation that was interrupted
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        _generate(out, venv, layers, prompt, fault, wanted)
    return _describe(out)


def _generate(out: Path, venv: Path, layers: int, prompt: int, fault: bool, wanted: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    print(f"dumping the {layers}-layer {prompt}-token pair with msprobe into {out} ...", file=sys.stderr)
    start = time.perf_counter()
    for side in ("golden", "test"):
        command = [str(venv / "bin" / "python"), __file__, "--side", side, str(out / side)]
        command += [str(layers), str(prompt), "fault" if fault else "clean"]
        with (out / f"{side}.log").open("wb") as log:
            subprocess.run(
                command, check=True, cwd=out, stdout=log, stderr=subprocess.STDOUT, env=tools_env(venv)
            )
    generate_s = time.perf_counter() - start
    sys.path.insert(0, str(REPO / "scripts"))
    from settle import settle  # tui-acc reads, rather than maps, files changed seconds ago

    settle(out)
    runs = {
        side: json.loads((out / f"{side}_run.json").read_text(encoding="utf-8"))
        for side in ("golden", "test")
    }
    fault_record = runs["test"].get("fault_record")
    if fault and not fault_record:
        raise SystemExit(f"the fault in {FAULT_MODULE} was not reached: {out / 'test.log'}")
    described = {**wanted, "generate_s": round(generate_s, 1), "fault_record": fault_record}
    (out / RECORD).write_text(json.dumps(described, indent=1) + "\n", encoding="utf-8")


def _describe(out: Path) -> Pair:
    found = json.loads((out / RECORD).read_text(encoding="utf-8"))
    golden, test = (_data_dir(out / side) for side in ("golden", "test"))
    sizes = {
        side: {p.name: p.stat().st_size for p in (root / "dump_tensor_data").iterdir() if p.is_file()}
        for side, root in (("golden", golden), ("test", test))
    }
    both = sizes["golden"].keys() & sizes["test"].keys()
    largest = max(both, key=lambda name: sizes["golden"][name] + sizes["test"][name])
    fault = f"{FAULT_MODULE}: {found['fault_record']}'s last {TILE} output columns doubled"
    return Pair(
        golden=golden,
        test=test,
        layers=found["layers"],
        prompt=found["prompt"],
        fault=fault if found["fault"] else "none (a clean bfloat16 run)",
        fault_record=found["fault_record"] if found["fault"] else None,
        golden_files=len(sizes["golden"]),
        test_files=len(sizes["test"]),
        golden_bytes=sum(p.stat().st_size for p in golden.rglob("*") if p.is_file()),
        test_bytes=sum(p.stat().st_size for p in test.rglob("*") if p.is_file()),
        largest_pair_bytes=sizes["golden"][largest] + sizes["test"][largest],
        largest_pair=largest,
        generate_s=found["generate_s"],
    )


def _data_dir(side: Path) -> Path:
    """``{side}/step0/proc{pid}``: the folder holding dump.json (msprobe compare is given the file)."""
    found = sorted(side.glob("step*/*/dump.json"))
    if len(found) != 1:
        raise SystemExit(f"{side}: expected one msprobe dump.json, found {len(found)}")
    return found[0].parent


# --- whole processes, timed --------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float  # user + system, the process and the children it waited for
    peak_mib: float  # ru_maxrss: the largest single process of the tree
    tree_peak_mib: float  # the tree's summed RSS, sampled every 50 ms
    load: str  # the load average just before the run
    exit_code: int


class TreeRss:
    """Samples the summed RSS of a process and its descendants on a thread until stopped."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.pid = pid
        self.every = every
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_bytes / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._tree_bytes())
            self._stop.wait(self.every)

    def _tree_bytes(self) -> int:
        total, todo, seen = 0, [self.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self._page
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError, IndexError):
                continue  # it exited between two reads
        return total


def timed(
    command: list[str], cwd: Path, stdout: Path, stderr: Path, env: dict[str, str] | None = None
) -> Run:
    """Run ``command`` to its end, its output into files (never pipes: a pipe nobody reads while the
    child runs could stall it)."""
    before = load()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err, env=env)
        sampler = TreeRss(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    tree = sampler.stop()
    process.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    cpu = usage.ru_utime + usage.ru_stime
    return Run(seconds, cpu, usage.ru_maxrss / 1024, max(tree, usage.ru_maxrss / 1024), before, code)


class Tools:
    """The three commands timed; each run is checked to have done its work."""

    def __init__(self, pair: Pair, venv: Path, runs_dir: Path, tui_acc: list[str]) -> None:
        self.pair = pair
        self.venv = venv
        self.out = runs_dir
        shutil.rmtree(self.out, ignore_errors=True)  # the last invocation's outputs
        self.out.mkdir(parents=True)
        self.tui_acc = tui_acc
        self.files = [str(p) for p in pair.files()]
        self.count = 0
        self.last_report: dict[str, Any] = {}  # the last report's JSON: its verdict
        self.kept_csv: Path | None = None  # msprobe's CSV from its first timed run

    def read_floor(self) -> Run:
        errors = self._next("cat.err")
        run = timed(["cat", *self.files], self.out, Path(os.devnull), errors)
        if run.exit_code != 0:
            raise SystemExit(f"cat exited {run.exit_code}: {errors}")
        return run

    def report(self, csv_path: Path | None = None, cwd: Path | None = None) -> Run:
        command = [
            *self.tui_acc,
            "report",
            str(self.pair.golden),
            str(self.pair.test),
            "--json",
            "--no-cache",
        ]
        if csv_path is not None:
            command += ["--csv", str(csv_path), "--force"]
        log = self._next("report.json")
        run = timed(command, cwd or self.out, log, log.with_name(log.name + ".err"))
        if run.exit_code not in (0, 1):  # 1: something fails, which the faulty pair does
            raise SystemExit(f"tui-acc exited {run.exit_code}: {log}.err")
        self.last_report = json.loads(log.read_text(encoding="utf-8"))
        if not self.last_report.get("pairs"):
            raise SystemExit(f"tui-acc compared no tensor pair: {log}")
        return run

    def msprobe(self) -> Run:
        out = self._next("msprobe")
        out.mkdir()
        command = [str(self.venv / "bin" / "msprobe"), "compare", "-tp", str(self.pair.test / "dump.json")]
        command += ["-gp", str(self.pair.golden / "dump.json"), "-o", str(out)]
        run = timed(command, out, out / "console.log", out / "console.log.err", tools_env(self.venv))
        found = sorted(out.glob("compare_result_*.csv"))
        if run.exit_code != 0 or len(found) != 1 or len(msprobe_rows(found[0])) < 2:
            raise SystemExit(f"msprobe compare exited {run.exit_code} without its CSV: {out}/console.log*")
        if self.kept_csv is None:
            self.kept_csv = found[0]
        else:
            shutil.rmtree(out)
        return run

    def _next(self, name: str) -> Path:
        self.count += 1
        return self.out / f"{self.count:03d}-{name}"


def msprobe_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return {row["NPU Name"]: row for row in csv.DictReader(handle)}


def agreement(ours_csv: Path, theirs_csv: Path) -> dict[str, Any]:
    """tui-acc's cosine of each operator's worst output against msprobe's for that tensor."""
    theirs = msprobe_rows(theirs_csv)
    differences: list[tuple[float, str]] = []
    unmatched = 0
    with ours_csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if not row.get("cosine") or not row.get("worst_output"):
            continue
        other = theirs.get(f"{row['test_node']}.{row['worst_output']}")
        try:
            cosine = float(other["Cosine"]) if other else None
        except ValueError:  # "unsupported": a scalar, or one element
            cosine = None
        if cosine is None:
            unmatched += 1
            continue
        differences.append((abs(float(row["cosine"]) - cosine), row["test_node"]))
    if not differences:
        return {"rows compared": 0}
    worst = max(differences)
    return {
        "tui-acc operator rows": len(rows),
        "rows compared (worst output, both with a cosine)": len(differences),
        "rows without msprobe's cosine": unmatched,
        "max |cosine difference|": worst[0],
        "at": worst[1],
        "median |cosine difference|": statistics.median(d for d, _ in differences),
        "note": "msprobe rounds a cosine above 0.9999 to 6 decimals, others to 12",
    }


# --- the figures -------------------------------------------------------------------------------


def summary(runs: list[Run]) -> dict[str, Any]:
    return {
        "median s": round(statistics.median(r.seconds for r in runs), 2),
        "seconds": [round(r.seconds, 2) for r in runs],
        "median CPU s": round(statistics.median(r.cpu_seconds for r in runs), 2),
        "CPU s": [round(r.cpu_seconds, 2) for r in runs],
        "median peak RSS MiB": round(statistics.median(r.peak_mib for r in runs)),
        "peak RSS MiB (largest process)": [round(r.peak_mib) for r in runs],
        "tree peak RSS MiB (sampled sum)": [round(r.tree_peak_mib) for r in runs],
        "load before each run": [r.load for r in runs],
    }


def ratios(figures: dict[str, Any], pair: Pair) -> dict[str, Any]:
    floor, ours = figures["read floor (cat)"], figures["tui-acc report"]
    largest = pair.largest_pair_bytes / 2**20
    found: dict[str, Any] = {
        "report / read floor (median s)": round(ours["median s"] / floor["median s"], 2),
        "report peak RSS / largest tensor pair": round(ours["median peak RSS MiB"] / largest, 2),
        "report CPU s / wall s (cores busy)": round(ours["median CPU s"] / ours["median s"], 2),
    }
    tree = figures.get(BASELINE_TREE)
    if tree:
        found["report / baseline tree's report (median s)"] = round(ours["median s"] / tree["median s"], 2)
        found["baseline tree's report / read floor"] = round(tree["median s"] / floor["median s"], 2)
    theirs = figures.get("msprobe compare")
    if theirs:
        found["msprobe / report (median s)"] = round(theirs["median s"] / ours["median s"], 2)
        found["msprobe peak RSS / largest tensor pair"] = round(theirs["median peak RSS MiB"] / largest, 2)
        found["msprobe / report peak RSS"] = round(
            theirs["median peak RSS MiB"] / ours["median peak RSS MiB"], 2
        )
        found["msprobe CPU s / wall s (cores busy)"] = round(theirs["median CPU s"] / theirs["median s"], 2)
    return found


def versions(venv: Path) -> dict[str, str]:
    found = tool_versions(venv, ("mindstudio-probe", "torch", "transformers"))
    found["tui-acc checkout"] = checkout_state(REPO)
    return found


BASELINE_TREE = "baseline tree's report"


def baseline_command() -> list[str]:
    """The baseline tree's tui-acc: this Python's ``-m tui_acc``, run from that checkout (the current
    directory leads the path for ``-m``: its code, not the installed one)."""
    return [sys.executable, "-m", "tui_acc"]


def baseline_tree_problem(tree: Path | None) -> str | None:
    """Why ``tree`` cannot be timed as a checkout of its own, or None. Run from a folder without
    ``tui_acc/``, ``-m tui_acc`` imports the installed (editable) tree: this one against itself; a
    tree without its C kernel built falls back to a slower kernel."""
    if tree is None:
        return None
    package = tree.expanduser() / "tui_acc"
    if not (package / "__init__.py").is_file():
        return "no tui_acc/ package there (-m tui_acc would run the installed tree)"
    if not list((package / "metrics").glob("_ckernel*.so")):
        return "its C kernel is not built (python setup.py build_ext --inplace there, or copy the .so)"
    return None


def tui_acc_command() -> list[str]:
    """The ``tui-acc`` console script of this Python's environment, else ``python -m tui_acc``."""
    script = Path(sys.executable).parent / "tui-acc"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "tui_acc"]


# --- the command -------------------------------------------------------------------------------

NEEDS = """\
{venv}: no bin/python and bin/msprobe there. This benchmark builds its pair with msprobe's dumper and
times msprobe's own compare; nothing stands in for it. Make the tools venv
(scripts/make_model_fixtures.py's docstring), then give it with --tools-venv."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where the pair is kept (default: a temporary folder, deleted); a pair there is rebuilt "
        "unless --reuse",
    )
    parser.add_argument("--reuse", action="store_true", help="time the pair this script left in --out")
    parser.add_argument("--runs", type=int, default=3, help="timed rounds of cat and tui-acc (default 3)")
    parser.add_argument(
        "--baseline-runs", type=int, help="rounds that also time msprobe compare (default --runs; 0: none)"
    )
    parser.add_argument("--baseline-tree", type=Path, help="another checkout whose report is timed too")
    parser.add_argument("--tools-venv", type=Path, default=Path("~/tools-venv"), help="msprobe's venv")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    parser.add_argument("--prompt", type=int, default=256, help="prefill tokens (default 256)")
    parser.add_argument("--clean", action="store_true", help="no injected fault in the test")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--side", nargs=5, metavar=("SIDE", "OUT", "L", "P", "F"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        side, out, layers, prompt, fault = args.side
        dump_side(side, Path(out), int(layers), int(prompt), fault == "fault")
        return 0

    tree_problem = baseline_tree_problem(args.baseline_tree)
    if tree_problem:
        print(f"--baseline-tree {args.baseline_tree}: {tree_problem}", file=sys.stderr)
        return 2
    venv = args.tools_venv.expanduser()
    if not (venv / "bin" / "msprobe").is_file() or not (venv / "bin" / "python").is_file():
        print(NEEDS.format(venv=venv), file=sys.stderr)
        return 2
    if args.reuse and args.out is None:
        print("--reuse needs --out: the pair is reused from there", file=sys.stderr)
        return 2
    baseline_runs = args.runs if args.baseline_runs is None else min(args.baseline_runs, args.runs)
    temporary = None if args.out else tempfile.TemporaryDirectory(prefix="tui-acc-bench-msprobe-7b-")
    out = Path(temporary.name) if temporary is not None else args.out.expanduser().resolve()
    if out.is_relative_to(REPO):
        print(f"--out {out}: inside the repository; the pair is over 5 GB, keep it outside", file=sys.stderr)
        return 2
    try:
        figures = measure(args, venv, out, baseline_runs)
    finally:
        if temporary is not None:
            temporary.cleanup()
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


def measure(args: argparse.Namespace, venv: Path, out: Path, baseline_runs: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0)), "load at start": load()}
    figures["versions"] = versions(venv)
    pair = ensure_pair(out, venv, args.layers, args.prompt, not args.clean, args.reuse)
    figures["pair"] = {
        **asdict(pair),
        "golden GB": round(pair.golden_bytes / 1e9, 2),
        "test GB": round(pair.test_bytes / 1e9, 2),
        "largest tensor pair MiB": round(pair.largest_pair_bytes / 2**20, 1),
    }
    tools = Tools(pair, venv, out / "runs", tui_acc_command())
    figures["tui-acc command"] = tools.tui_acc
    tools.read_floor()  # untimed: the page cache holds both dumps now
    ours_csv = out / "runs" / "tui-acc-operators.csv"
    tools.report(ours_csv)  # untimed, with its operator table
    named = (tools.last_report.get("first_failing_op") or {}).get("golden")
    figures["verdict"] = {"first failing op": named, "the injected fault": pair.fault_record}
    figures["verdict"]["named the fault"] = named == pair.fault_record
    timings: dict[str, list[Run]] = {"read floor (cat)": [], "tui-acc report": [], "msprobe compare": []}
    tree = args.baseline_tree.expanduser().resolve() if args.baseline_tree else None
    before = Tools(pair, venv, out / "runs-baseline-tree", baseline_command()) if tree else None
    if tree and before:
        figures["baseline tree"] = f"{tree} at {checkout_state(tree)}"
        timings[BASELINE_TREE] = []
        before.report(cwd=tree)  # untimed: its bytecode written
    for round_number in range(args.runs):
        timings["read floor (cat)"].append(tools.read_floor())
        for which in ("ours", "tree") if round_number % 2 == 0 else ("tree", "ours"):
            if which == "ours":
                timings["tui-acc report"].append(tools.report())
            elif before:
                timings[BASELINE_TREE].append(before.report(cwd=tree))
        if round_number < baseline_runs:
            timings["msprobe compare"].append(tools.msprobe())
        print(f"round {round_number + 1} of {args.runs} done, {load()}", file=sys.stderr)
    figures.update({name: summary(runs) for name, runs in timings.items() if runs})
    figures["read floor MB/s (median)"] = round(
        (pair.golden_bytes + pair.test_bytes) / 1e6 / figures["read floor (cat)"]["median s"]
    )
    figures["ratios"] = ratios(figures, pair)
    if tools.kept_csv is not None:
        figures["cosine agreement, tui-acc against msprobe"] = agreement(ours_csv, tools.kept_csv)
    figures["load at end"] = load()
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
