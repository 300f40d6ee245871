"""tui-acc against msit's own compare, whole processes as a user runs them, in one run.

    TUI_ACC_MSIT_VENV=/path/to/tools-venv python scripts/bench_vs_msit.py [--work DIR] [--runs 5]

Needs a virtual environment holding msit 8.2.0 with its llm component, torch and transformers
(the route is in scripts/make_model_fixtures.py's docstring), named by ``TUI_ACC_MSIT_VENV``.
Without it the script says so and exits 2: no other baseline stands in for msit.

1. Builds a 7B-shaped pair with the real msit (``DumpConfig`` + ``register_hook``): a Llama from
   ``LlamaConfig`` with hidden 4096, FFN 11008, 32 heads, vocab 32,000, seeded random weights, one
   prefill (``generate(max_new_tokens=1)``, ``token_range=[0]``), golden in float32 and test in
   bfloat16 (the same weights cast). Each side runs in a process of its own in the tools venv
   (msit's DumpConfig is a process-wide singleton). Pairs are kept under ``--work`` (default under
   the system's temporary folder, never in the repository): a rerun skips generating them.
2. Times whole processes, alternating ours and msit's, ``--runs`` times each, after one untimed run
   of each (the page cache is warm; ``--cold`` drops it before every run, as root):
   ``python -m tui_acc report --json --no-cache GOLDEN TEST`` (the ``tui-acc`` console script's
   module, with ``--repo`` first on ``PYTHONPATH``) against ``msit llm compare -gp GOLDEN -mp TEST
   -cl api -o DIR``, the latter also with ``OMP_NUM_THREADS=1`` (on a loaded machine torch's OpenMP
   threads slow msit down several times; ratios are taken to the faster msit). Wall time from spawn
   to exit; CPU time and peak RSS from ``os.wait4``.
3. Scales: our time on pairs of about 0.5, 1 and 4 GB (``--sizes``), with one thread (``taskset -c
   0``: the engine sizes its pool from the CPU affinity) and with every CPU; msit at each size with
   ``--with-msit-scaling`` (slow; otherwise msit is timed on the 1 GB pair only).
4. The TUI in a real terminal (tmux, 120x40, a socket of its own): from launch to the first token's
   verdict on screen, then ``q`` and the process's exit.

Prints one JSON object of every figure, then markdown tables for docs/performance.md. Not a test: the
machine's load changes the figures (``uptime`` is recorded with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from seeded_llama import FFN, HIDDEN, SEED, VOCAB, seeded_llama  # noqa: E402  (scripts/, beside this one)
from tools_venv import checkout_state, load, tool_versions, tools_env  # noqa: E402

VENV_VARIABLE = "TUI_ACC_MSIT_VENV"
# the pair's size (GB, both sides) -> (decoder layers, prompt tokens); measured sizes are printed
SHAPES: dict[str, tuple[int, int]] = {"0.5": (4, 150), "1": (4, 256), "4": (4, 1200)}
MAIN_SIZE = "1"


# --- one side of a pair, in the tools venv -------------------------------------------------


def dump_side(layers: int, prompt: int, side: str, out: Path) -> None:
    """Dump one forward pass of the seeded model with msit into ``out`` (run by the tools venv)."""
    import torch
    from msit_llm import DumpConfig, register_hook

    model, ids = seeded_llama(layers, prompt, side)
    out.mkdir(parents=True)
    register_hook(model, DumpConfig(dump_path=str(out), token_range=[0]))
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, do_sample=False)


# --- the pairs, kept under --work ---------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """A generated pair: the device folders both tools are given, and what is in them."""

    label: str
    layers: int
    prompt: int
    golden: Path
    test: Path
    files: int
    bytes: int
    largest_pair_bytes: int
    largest_pair: str
    generate_s: float

    @property
    def shape(self) -> str:
        return f"{self.layers} layers x {self.prompt}-token prefill"


def ensure_pair(work: Path, venv: Path, label: str, layers: int, prompt: int) -> Pair:
    """The pair of this shape from ``work``, dumped by msit first if it is not there yet."""
    root = work / f"llama-h{HIDDEN}-f{FFN}-v{VOCAB}-L{layers}-P{prompt}-seed{SEED}"
    record = root / "pair.json"
    if not record.is_file():
        shutil.rmtree(root, ignore_errors=True)  # a generation that was interrupted
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        print(f"generating the {layers} x {prompt} pair with msit in {root} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        for side in ("golden", "test"):
            command = [str(venv / "bin" / "python"), __file__, "--side", str(layers), str(prompt), side]
            command.append(str(partial / side))
            with (partial / f"{side}.log").open("wb") as log:
                subprocess.run(
                    command,
                    check=True,
                    cwd=partial,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=tools_env(venv),
                )
        generate_s = time.perf_counter() - start
        _settle(partial)
        partial.rename(root)
        record.write_text(json.dumps({"generate_s": round(generate_s, 1)}), encoding="utf-8")
    golden, test = (_device_folder(root / side) for side in ("golden", "test"))
    golden_files = {p.relative_to(golden): p.stat().st_size for p in golden.rglob("*.pth")}
    test_files = {p.relative_to(test): p.stat().st_size for p in test.rglob("*.pth")}
    both = golden_files.keys() & test_files.keys()
    largest = max(both, key=lambda rel: golden_files[rel] + test_files[rel])
    return Pair(
        label=label,
        layers=layers,
        prompt=prompt,
        golden=golden,
        test=test,
        files=len(golden_files) + len(test_files),
        bytes=sum(golden_files.values()) + sum(test_files.values()),
        largest_pair_bytes=golden_files[largest] + test_files[largest],
        largest_pair=str(largest),
        generate_s=json.loads(record.read_text(encoding="utf-8"))["generate_s"],
    )


def _device_folder(side: Path) -> Path:
    """``{side}/msit_dump_*/torch_tensors/cpu_{pid}``: the folder msit compare is given
    (docs/formats.md §4.1)."""
    trees = sorted(side.glob("msit_dump_*/torch_tensors/*/model_tree.json"))
    if len(trees) != 1:
        raise SystemExit(f"{side}: expected one msit torch dump, found {len(trees)}")
    return trees[0].parent


def _settle(root: Path) -> None:
    """Date the files back as a dump looked at a while after its run (tui-acc memory-maps only those)."""
    sys.path.insert(0, str(REPO / "scripts"))
    from settle import settle

    settle(root)


def _our_env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    return env


# --- whole processes, timed ----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float  # user + system: less sensitive than wall time to others' load on the machine
    peak_mib: float
    exit_code: int


def timed(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> Run:
    """Run ``command`` to its end: wall time from spawn to exit, its peak RSS (``ru_maxrss``, KiB).

    stdout goes to ``log``, stderr to ``log`` with ``.err`` added (files, not pipes: a pipe nobody
    reads while the child runs could stall it).
    """
    with log.open("wb") as out, log.with_name(log.name + ".err").open("wb") as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return Run(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode)


class Tools:
    """The two commands under test; each run is checked to have really compared the pair."""

    def __init__(self, repo: Path, venv: Path, work: Path) -> None:
        self.repo = repo
        self.venv = venv
        self.out = work / "runs"
        shutil.rmtree(self.out, ignore_errors=True)  # the last invocation's logs
        self.out.mkdir(parents=True)
        self.count = 0
        self.last_report: dict[str, Any] = {}  # our last run's JSON
        self.last_rows: list[dict[str, str]] = []  # msit's last CSV rows

    def ours(self, pair: Pair, cpus: list[int] | None = None) -> Run:
        """``tui-acc report --json --no-cache GOLDEN TEST``; ``cpus``: pinned there with taskset."""
        command = [sys.executable, "-m", "tui_acc", "report", "--json", "--no-cache"]
        command += [str(pair.golden), str(pair.test)]
        if cpus is not None:
            command = ["taskset", "-c", ",".join(map(str, cpus)), *command]
        log = self._next("ours.json")
        # run in a folder with no tui_acc in it: ``-m`` puts the working folder first on sys.path
        run = timed(command, _our_env(self.repo), self.out, log)
        if run.exit_code not in (0, 1):  # 1: something fails, which a fp32/bf16 pair may
            raise SystemExit(f"tui-acc exited {run.exit_code}: {log}.err")
        self.last_report = json.loads(log.read_text(encoding="utf-8"))
        if not self.last_report.get("pairs"):
            raise SystemExit(f"tui-acc compared no tensor pair: {log}")
        return run

    def msit(self, pair: Pair, keep: bool = False, one_thread: bool = False) -> Run:
        """``msit llm compare -gp GOLDEN -mp TEST -cl api -o DIR`` (docs/formats.md §4.1), in the tools venv.

        The output folder is deleted once its CSV was read, unless ``keep``. ``one_thread``: with
        ``OMP_NUM_THREADS=1``. torch's OpenMP threads wait for each other at every operation; on a
        machine others load, that made msit 3-4 x slower than with one thread (42 s against 8.6 s
        on the 1 GB pair at load 3-4), so both are timed, and ratios are taken to the faster.
        """
        out = self._next("msit")
        out.mkdir()
        command = [str(self.venv / "bin" / "msit"), "llm", "compare", "-gp", str(pair.golden)]
        command += ["-mp", str(pair.test), "-cl", "api", "-o", str(out)]
        env = tools_env(self.venv)
        if one_thread:
            env["OMP_NUM_THREADS"] = "1"
        run = timed(command, env, out, out / "console.log")
        self.last_rows = msit_rows(out)
        if run.exit_code != 0 or not self.last_rows:
            rows = len(self.last_rows)
            raise SystemExit(f"msit compare exited {run.exit_code} with {rows} rows: {out}/console.log*")
        if not keep:
            shutil.rmtree(out)
        return run

    def _next(self, name: str) -> Path:
        self.count += 1
        return self.out / f"{self.count:03d}-{name}"


def msit_rows(out: Path) -> list[dict[str, str]]:
    """The rows of the CSV msit compare wrote into ``out`` that carry a cosine."""
    import csv

    reports = sorted(out.glob("msit_cmp_report_*.csv"))
    if len(reports) != 1:
        return []
    with reports[0].open(newline="", encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row.get("cosine_similarity")]


def first_check(tools: Tools, pair: Pair) -> dict[str, Any]:
    """One untimed run of each (it fills the page cache), and what each compared."""
    tools.ours(pair)
    tools.msit(pair, keep=True)
    report, rows = tools.last_report, tools.last_rows
    logits = [row for row in rows if row["golden_data_path"].endswith("/root.lm_head/output.pth")]
    return {
        "tui-acc": {
            "tensor pairs": report["pairs"],
            "first failing token": report.get("first_failing_token"),
            "failing ops": report.get("failing_ops"),
            "token 0 logits cosine": (report.get("tokens") or [{}])[0].get("cosine"),
        },
        "msit": {
            "csv rows with metrics": len(rows),
            "lowest cosine": min(float(row["cosine_similarity"]) for row in rows),
            "root.lm_head output cosine": float(logits[0]["cosine_similarity"]) if logits else None,
        },
    }


# --- the TUI in a real terminal ------------------------------------------------------------

VERDICT_WORDS = {"pass", "FAIL", "tie", "ERR"}  # tui_acc/tui/formatting.py: a token's verdict as shown


def first_verdict_shown(screen: str) -> bool:
    """The token table's first row shows its verdict (``…`` and dashes while it is being compared)."""
    lines = screen.splitlines()
    for number, line in enumerate(lines[:-1]):
        words = line.split()
        if words[:2] == ["Token", "Verdict"]:
            row = lines[number + 1].split()
            return len(row) > 1 and row[1] in VERDICT_WORDS
    return False


@dataclass(frozen=True)
class Launch:
    to_verdict_s: float  # launch to the first token's verdict on screen; inf if it never came
    quit_s: float  # q pressed to the process's exit; inf if it did not exit
    exit_code: int | None


class Terminal:
    """tmux on a socket of its own (nobody else's sessions are touched), killed when done."""

    def __init__(self, work: Path) -> None:
        self.socket = f"tui-acc-bench-{os.getpid()}"
        self.work = work

    def tmux(self, *args: str, check: bool = True) -> str:
        command = ["tmux", "-L", self.socket, *args]
        return subprocess.run(command, check=check, capture_output=True, text=True).stdout

    def launch(self, repo: Path, pair: Pair, attempt: int, timeout: float = 120) -> Launch:
        import shlex

        status = self.work / "runs" / f"tui-{attempt}.status"
        status.unlink(missing_ok=True)
        app = [sys.executable, "-m", "tui_acc", "--no-cache", str(pair.golden), str(pair.test)]
        # the session's shell starts the app with our PYTHONPATH and writes its exit code when it ends
        shell = (
            f"env PYTHONPATH={shlex.quote(str(repo))} {shlex.join(app)}; echo $? > {shlex.quote(str(status))}"
        )
        session = f"run{attempt}"
        start = time.perf_counter()
        # started in a folder with no tui_acc in it: ``-m`` puts the working folder first on sys.path
        here = str(status.parent)
        self.tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", here, shell)
        to_verdict = float("inf")
        while time.perf_counter() - start < timeout:
            if first_verdict_shown(self.tmux("capture-pane", "-p", "-t", session, check=False)):
                to_verdict = time.perf_counter() - start
                break
            time.sleep(0.02)
        pressed = time.perf_counter()
        self.tmux("send-keys", "-t", session, "q")
        while not status.is_file() and time.perf_counter() - pressed < 30:
            time.sleep(0.02)
        if not status.is_file():
            self.tmux("kill-session", "-t", session, check=False)
            return Launch(to_verdict, float("inf"), None)
        quit_s = time.perf_counter() - pressed
        time.sleep(0.05)  # the shell wrote the code; let it finish closing the file
        return Launch(to_verdict, quit_s, int(status.read_text().strip() or -1))

    def close(self) -> None:
        self.tmux("kill-server", check=False)


# --- the measurements ----------------------------------------------------------------------


def drop_caches() -> None:
    """Empty the page cache (root only): every file is then read from the disk, as on a first look."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")


def summary(runs: list[Run]) -> dict[str, Any]:
    seconds = [r.seconds for r in runs]
    peaks = [r.peak_mib for r in runs]
    return {
        "median s": round(statistics.median(seconds), 2),
        "best s": round(min(seconds), 2),
        "seconds": [round(s, 2) for s in seconds],
        "median CPU s": round(statistics.median(r.cpu_seconds for r in runs), 2),
        "median peak RSS MiB": round(statistics.median(peaks)),
        "max peak RSS MiB": round(max(peaks)),
        "peak RSS MiB": [round(p) for p in peaks],
    }


MSIT_ONE_THREAD = "msit, OMP_NUM_THREADS=1"


def measure_report(tools: Tools, pair: Pair, runs: int, cold: bool) -> dict[str, Any]:
    """Ours and msit's (as installed, and with one OpenMP thread), alternating, ``runs`` times each."""
    timings: dict[str, list[Run]] = {"tui-acc": [], "msit": [], MSIT_ONE_THREAD: []}
    loads = [load()]
    for _ in range(runs):
        for name, runs_of in timings.items():
            if cold:
                drop_caches()
            if name == "tui-acc":
                runs_of.append(tools.ours(pair))
            else:
                runs_of.append(tools.msit(pair, one_thread=name == MSIT_ONE_THREAD))
    loads.append(load())
    figures: dict[str, Any] = {
        "runs each": runs,
        "page cache": "dropped before every run" if cold else "warm (one untimed run of each first)",
        "load": loads,
        **{name: summary(runs_of) for name, runs_of in timings.items()},
    }
    mine = figures["tui-acc"]
    for name in ("msit", MSIT_ONE_THREAD):
        theirs = figures[name]
        figures[f"{name} / tui-acc time (medians)"] = round(theirs["median s"] / mine["median s"], 2)
        figures[f"{name} / tui-acc time (bests)"] = round(theirs["best s"] / mine["best s"], 2)
        peaks = theirs["median peak RSS MiB"] / mine["median peak RSS MiB"]
        figures[f"{name} / tui-acc peak RSS (medians)"] = round(peaks, 2)
    faster = min(figures[name]["median s"] for name in ("msit", MSIT_ONE_THREAD))
    bound = 300 + 3 * pair.largest_pair_bytes / 2**20
    figures.update(
        {
            "the faster msit, median s": faster,
            "largest tensor pair MiB": round(pair.largest_pair_bytes / 2**20, 1),
            "goal: our peak RSS at most 300 MiB + 3 x the largest pair, MiB": round(bound),
            "goal met: 6x faster than the faster msit (medians)": faster >= 6 * mine["median s"],
            "goal met: peak within 300 MiB + 3 x the largest pair": mine["max peak RSS MiB"] <= bound,
            "goal met: peak at most 200 MiB": mine["max peak RSS MiB"] <= 200,
        }
    )
    return figures


def measure_tui(repo: Path, work: Path, pair: Pair, runs: int, msit_s: float | None) -> dict[str, Any]:
    terminal = Terminal(work)
    launches: list[Launch] = []
    loads = [load()]
    try:
        for attempt in range(runs + 1):  # the first one untimed, as for the report
            launch = terminal.launch(repo, pair, attempt)
            if attempt:
                launches.append(launch)
    finally:
        terminal.close()
    loads.append(load())
    shown = [launch.to_verdict_s for launch in launches]
    figures: dict[str, Any] = {
        "terminal": "tmux 120x40, a server of its own",
        "runs": runs,
        "load": loads,
        "launch to the first token's verdict on screen s": [round(s, 2) for s in shown],
        "median s": round(statistics.median(shown), 2),
        "best s": round(min(shown), 2),
        "q to exit s": [round(launch.quit_s, 2) for launch in launches],
        "exit codes": [launch.exit_code for launch in launches],
    }
    if msit_s is not None:
        ratio = msit_s / figures["median s"]
        figures["the faster msit's whole compare / ours (medians)"] = round(ratio, 2)
        figures["goal met: at most 1/6 of msit's time"] = ratio >= 6
    return figures


def measure_scaling(
    tools: Tools, pairs: list[Pair], runs: int, msit_at: set[str], cold: bool
) -> list[dict[str, Any]]:
    """Our time on each pair with one CPU (taskset) and with all of this process's CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    rows = []
    for pair in pairs:
        tools.ours(pair)  # untimed: the page cache holds this pair now
        one: list[Run] = []
        every: list[Run] = []
        theirs: list[Run] = []
        theirs_one_thread: list[Run] = []
        loads = [load()]
        for _ in range(runs):
            for pinned, into in (([cpus[0]], one), (None, every)):
                if cold:
                    drop_caches()
                into.append(tools.ours(pair, pinned))
            if pair.label in msit_at:
                if cold:
                    drop_caches()
                theirs.append(tools.msit(pair))
                if cold:
                    drop_caches()
                theirs_one_thread.append(tools.msit(pair, one_thread=True))
        loads.append(load())
        row: dict[str, Any] = {
            "pair": pair.label,
            "shape": pair.shape,
            "GB": round(pair.bytes / 1e9, 2),
            "files": pair.files,
            "largest tensor pair MiB": round(pair.largest_pair_bytes / 2**20, 1),
            "load": loads,
            "tui-acc 1 CPU": summary(one),
            f"tui-acc {len(cpus)} CPUs": summary(every),
        }
        if theirs:
            row["msit"] = summary(theirs)
            row[MSIT_ONE_THREAD] = summary(theirs_one_thread)
        rows.append(row)
    return rows


def versions(venv: Path, repo: Path) -> dict[str, str]:
    found = tool_versions(venv, ("msit", "torch", "transformers"))
    where = subprocess.run(
        [sys.executable, "-c", "import tui_acc; print(tui_acc.__file__)"],
        capture_output=True,
        text=True,
        env=_our_env(repo),
        cwd=tempfile.gettempdir(),  # not this checkout: ``-c`` puts the working folder first on sys.path
    )
    found["tui_acc imported from"] = where.stdout.strip()
    found["tui-acc checkout"] = checkout_state(repo)
    return found


def machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown",
    )
    return {"cpus": len(os.sched_getaffinity(0)), "cpu": model, "load at start": load()}


# --- output ---------------------------------------------------------------------------------


def markdown(figures: dict[str, Any]) -> str:
    """The tables for docs/performance.md, from the figures."""
    pair = figures["pair"]
    lines = [
        f"A 7B-shaped pair written by msit {figures['versions'].get('msit', '?')} (Llama, hidden {HIDDEN}, "
        f"FFN {FFN}, {pair['shape']}, golden float32 against test bfloat16: {pair['files']} `.pth` "
        f"files, {pair['GB']} GB, largest tensor pair {pair['largest tensor pair MiB']} MiB), "
        f"{figures['machine']['cpus']} CPUs ({figures['machine']['cpu']}); tui-acc "
        f"{figures['versions']['tui-acc checkout']}, torch {figures['versions'].get('torch', '?')} "
        "for msit.",
        "",
    ]
    report = figures.get("report")
    tui = figures.get("tui")
    if report:
        ours, msit, alone = report["tui-acc"], report["msit"], report[MSIT_ONE_THREAD]
        lines += [
            f"Whole processes, {report['runs each']} alternating runs each, page cache "
            f"{'cold' if report['page cache'].startswith('dropped') else 'warm'}; median (best); "
            f"load {report['load'][0].split('load ')[1]} at the start, "
            f"{report['load'][1].split('load ')[1]} at the end:",
            "",
            "| | tui-acc | msit llm compare -cl api | msit / tui-acc "
            "| msit, `OMP_NUM_THREADS=1` | that msit / tui-acc |",
            "|---|---|---|---|---|---|",
            f"| whole process, `report --json --no-cache` | {_runs(ours)} | {_runs(msit)} "
            f"| {_ratio(msit, ours)} | {_runs(alone)} | {_ratio(alone, ours)} |",
            f"| CPU time (user + system) | {ours['median CPU s']} s | {msit['median CPU s']} s "
            f"| {_ratio(msit, ours, 'median CPU s')} | {alone['median CPU s']} s "
            f"| {_ratio(alone, ours, 'median CPU s')} |",
            f"| peak RSS | {ours['median peak RSS MiB']} MiB | {msit['median peak RSS MiB']} MiB "
            f"| {_ratio(msit, ours, 'median peak RSS MiB')} | {alone['median peak RSS MiB']} MiB "
            f"| {_ratio(alone, ours, 'median peak RSS MiB')} |",
        ]
        if tui:
            faster = {"median s": report["the faster msit, median s"]}
            lines.append(
                f"| TUI: launch to the first token's verdict on screen | {_runs(tui)} | - "
                f"| {_ratio(faster, tui)} (the faster msit) | - | - |"
            )
        lines.append("")
    elif tui:
        lines += [f"TUI: launch to the first token's verdict on screen: {_runs(tui)}.", ""]
    scaling = figures.get("scaling")
    if scaling:
        every = next(k for k in scaling[0] if k.startswith("tui-acc ") and k != "tui-acc 1 CPU")
        lines += [
            "Time against the pair's size (layers x prompt in each row) and the CPUs tui-acc may use "
            f"(one: pinned with `taskset -c`), median of {len(scaling[0]['tui-acc 1 CPU']['seconds'])}:",
            "",
            "| pair | files | largest pair | tui-acc, 1 CPU "
            f"| tui-acc, {every.split()[1]} CPUs | its peak RSS | msit (`OMP_NUM_THREADS=1`) "
            "| the faster msit / tui-acc |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in scaling:
            msit, alone = row.get("msit"), row.get(MSIT_ONE_THREAD)
            if msit is None and report and row["pair"] == figures["pair"]["label"]:
                msit, alone = report["msit"], report[MSIT_ONE_THREAD]
            both = f"{_seconds(msit)} ({_seconds(alone)})" if msit else "-"
            timed_msit = [m for m in (msit, alone) if m]
            quickest = min(timed_msit, key=lambda m: m["median s"]) if timed_msit else None
            lines.append(
                f"| {row['GB']} GB ({row['shape']}) | {row['files']} | {row['largest tensor pair MiB']} MiB "
                f"| {row['tui-acc 1 CPU']['median s']} s | {row[every]['median s']} s "
                f"| {row[every]['median peak RSS MiB']} MiB | {both} | {_ratio(quickest, row[every])} |"
            )
    return "\n".join(lines)


def _runs(runs: dict[str, Any]) -> str:
    return f"{runs['median s']} s ({runs['best s']})"


def _ratio(theirs: dict[str, Any] | None, ours: dict[str, Any], key: str = "median s") -> str:
    return f"{round(theirs[key] / ours[key], 1)}x" if theirs else "-"


def _seconds(runs: dict[str, Any] | None) -> str:
    return f"{runs['median s']} s" if runs else "-"


# --- the command ----------------------------------------------------------------------------

NEEDS = f"""\
{VENV_VARIABLE} is not set to a virtual environment holding msit: this benchmark times msit's own
compare and builds its pairs with msit's dumper, and nothing stands in for it.
Make one (docs/formats.md §0; scripts/make_model_fixtures.py's docstring):

    python3 -m venv ~/tools-venv && . ~/tools-venv/bin/activate
    pip install torch==2.13.0 && pip install msit transformers
    msit install llm
    pip install "numpy<2.0" "pandas<2.3" "ml_dtypes<0.6"

then: {VENV_VARIABLE}=~/tools-venv python scripts/bench_vs_msit.py"""


def shapes(sizes: str) -> dict[str, tuple[int, int]]:
    """``0.5,1,4`` (GB, SHAPES) or ``LAYERSxPROMPT`` items -> label -> shape."""
    found = {}
    for item in filter(None, (s.strip() for s in sizes.split(","))):
        if item in SHAPES:
            found[item] = SHAPES[item]
        elif "x" in item and all(part.isdigit() for part in item.split("x", 1)):
            layers, prompt = item.split("x", 1)
            found[item] = (int(layers), int(prompt))
        else:
            raise SystemExit(f"--sizes: {item!r} is neither one of {', '.join(SHAPES)} nor LAYERSxPROMPT")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_work = Path(tempfile.gettempdir()) / "tui-acc-bench-vs-msit"
    parser.add_argument(
        "--work", type=Path, default=default_work, help=f"pairs and runs (default {default_work})"
    )
    parser.add_argument(
        "--repo", type=Path, default=REPO, help="the tui-acc checkout to time (default: this one)"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each tool (default 5)")
    parser.add_argument("--tui-runs", type=int, default=3, help="timed launches of the TUI (default 3)")
    parser.add_argument("--scaling-runs", type=int, default=3, help="timed runs per size and CPU count")
    parser.add_argument(
        "--sizes",
        default="0.5,1",
        help="pairs for the scaling table: GB among "
        + ", ".join(f"{k}={n}x{p}" for k, (n, p) in SHAPES.items())
        + " (layers x prompt) or LAYERSxPROMPT; default 0.5,1 (4 takes minutes to generate and 4 GB of disk)",
    )
    parser.add_argument("--with-msit-scaling", action="store_true", help="time msit at every size too")
    parser.add_argument("--parts", default="report,tui,scaling", help="which measurements (default: all)")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before every run (root)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--side", nargs=4, metavar=("LAYERS", "PROMPT", "SIDE", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.side:
        layers, prompt, side, out = args.side
        dump_side(int(layers), int(prompt), side, Path(out))
        return 0

    named = os.environ.get(VENV_VARIABLE, "")
    venv = Path(named).expanduser()
    if not named or not (venv / "bin" / "msit").is_file() or not (venv / "bin" / "python").is_file():
        print(
            NEEDS if not named else f"{VENV_VARIABLE}={named}: no bin/msit and bin/python there\n\n{NEEDS}",
            file=sys.stderr,
        )
        return 2
    repo, work = args.repo.resolve(), args.work.expanduser().resolve()
    if work.is_relative_to(repo) or work.is_relative_to(REPO):
        print(f"--work {work}: inside a repository; pairs are hundreds of MB, keep them outside it")
        return 2
    if args.cold and os.geteuid() != 0:
        print("--cold drops the page cache, which needs root")
        return 2
    parts = set(args.parts.split(","))
    for part, program in (("tui", "tmux"), ("scaling", "taskset")):
        if part in parts and not shutil.which(program):
            print(
                f"the {part} part needs {program}; install it or leave {part} out of --parts", file=sys.stderr
            )
            return 2
    sizes = shapes(args.sizes)
    work.mkdir(parents=True, exist_ok=True)

    figures: dict[str, Any] = {"machine": machine(), "versions": versions(venv, repo), "work": str(work)}
    layers, prompt = SHAPES[MAIN_SIZE]
    pair = ensure_pair(work, venv, MAIN_SIZE, layers, prompt)
    figures["pair"] = _pair_figures(pair)
    tools = Tools(repo, venv, work)
    if parts & {"report", "tui"}:
        figures["what each compared (untimed first runs)"] = first_check(tools, pair)
    if "report" in parts:
        figures["report"] = measure_report(tools, pair, args.runs, args.cold)
    if "tui" in parts:
        msit_s = figures["report"]["the faster msit, median s"] if "report" in figures else None
        figures["tui"] = measure_tui(repo, work, pair, args.tui_runs, msit_s)
    if "scaling" in parts:
        scaled = [ensure_pair(work, venv, label, *shape) for label, shape in sizes.items()]
        figures["pairs for scaling"] = [_pair_figures(p) for p in scaled]
        msit_at = set(sizes) if args.with_msit_scaling else set()
        if MAIN_SIZE in sizes and "report" not in figures:
            msit_at.add(MAIN_SIZE)
        figures["scaling"] = measure_scaling(tools, scaled, args.scaling_runs, msit_at, args.cold)
    figures["machine"]["load at end"] = load()
    at_end = checkout_state(repo)
    if at_end != figures["versions"]["tui-acc checkout"]:
        figures["versions"]["tui-acc checkout at the end (CHANGED during the run)"] = at_end
        print(f"warning: {repo} changed during the run: the parts measured different code", file=sys.stderr)
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print()
    print(markdown(figures))
    return 0


def _pair_figures(pair: Pair) -> dict[str, Any]:
    figures = asdict(pair)
    figures.update(
        shape=pair.shape,
        GB=round(pair.bytes / 1e9, 2),
        **{"largest tensor pair MiB": round(pair.largest_pair_bytes / 2**20, 1)},
        golden=str(pair.golden),
        test=str(pair.test),
    )
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
