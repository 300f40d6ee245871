"""The hunt's steps, run one after the other: dump both sides narrowly, compare, narrow further.

Every step's dumps go to a new folder of their own under the hunt's folder; nothing else is
written, and a step that fails stops the hunt with its log (the folders stay, for the user to read).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from tui_acc.dumps import ATB_FORMATS, DumpError, DumpIndex
from tui_acc.errors import TuiAccError
from tui_acc.hunt.blocks import find_blocks
from tui_acc.redump.plan import RedumpPlan, build_plan, unused_name
from tui_acc.redump.runner import EXIT_GRACE, RedumpRun
from tui_acc.redump.selection import RedumpError, Selection, graph_runs
from tui_acc.redump.settings import RedumpSettings
from tui_acc.reports.findings import op_summary
from tui_acc.session import CompareOptions, Comparison, open_comparison

SIDES = ("golden", "test")
# The logits module as msit's torch hook names it (``root`` is the model): every Hugging Face causal
# LM has an ``lm_head``. ``--logits-node`` names another.
DEFAULT_LOGITS_NODE = "root.lm_head"
EXIT_CLEAN, EXIT_FOUND, EXIT_CANNOT, EXIT_INTERRUPTED = 0, 1, 2, 130
# how many of a failed dumper's last lines the error quotes
LOG_TAIL = 12


class HuntError(TuiAccError):
    """A step cannot run or its dumps cannot be compared; the message says which, and where its log is."""


@dataclass
class SideRun:
    """One side of one step: what ran, for how long, and what it wrote."""

    side: str
    command: str
    folder: Path
    seconds: float
    bytes: int
    status: str
    returncode: int | None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """This side's run for ``hunt --json``: its command, folder, seconds (ms precision), bytes, status
        and exit code."""
        return {
            "side": self.side,
            "command": self.command,
            "folder": str(self.folder),
            "seconds": round(self.seconds, 3),
            "bytes": self.bytes,
            "status": self.status,
            "returncode": self.returncode,
            "notes": list(self.notes),
        }


@dataclass
class Step:
    name: str  # logits, blocks, operators
    token: int | None  # None: every token
    sides: list[SideRun] = field(default_factory=list)
    finding: str = ""

    def as_dict(self) -> dict[str, Any]:
        """This step for ``hunt --json``: its name, token (None: every token), both sides' runs and its
        finding."""
        return {
            "step": self.name,
            "token": self.token,
            "sides": [side.as_dict() for side in self.sides],
            "finding": self.finding,
        }


@dataclass
class HuntResult:
    folder: Path
    steps: list[Step]
    first_failing_token: int | None = None
    culprit: dict[str, Any] | None = None  # as report --json's first_failing_op
    comparison: Comparison | None = None  # the last step's, for the TUI to open
    error: str | None = None
    interrupted: bool = False  # Ctrl-C (exit 130, as a shell reports it)

    @property
    def exit_code(self) -> int:
        """The process's exit status: 130 interrupted, 2 could not hunt, 1 a failing token or operator
        found, 0 clean."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.error is not None:
            return EXIT_CANNOT
        return EXIT_FOUND if self.culprit is not None or self.first_failing_token is not None else EXIT_CLEAN

    def greeting(self, cwd: Path) -> str:
        """What the view says when it opens on the hunt's last step."""
        try:
            folder = self.folder.relative_to(cwd.resolve())
        except ValueError:
            folder = self.folder
        finding = self.steps[-1].finding if self.steps else "nothing ran"
        return f"hunt: {finding}; the view shows the last step's dumps (all of them in {folder})"

    @property
    def bytes_dumped(self) -> int:
        """Bytes the dumpers wrote, over every step and side."""
        return sum(side.bytes for step in self.steps for side in step.sides)

    def as_dict(self) -> dict[str, Any]:
        """The hunt for ``hunt --json``: the first failing token and operator, every step, bytes and
        seconds (the slower side of each step), the error."""
        return {
            "tool": "tui-acc hunt",
            "folder": str(self.folder) if self.folder.exists() else None,  # None: nothing ran
            "first_failing_token": self.first_failing_token,
            "first_failing_op": self.culprit,
            "steps": [step.as_dict() for step in self.steps],
            "bytes_dumped": self.bytes_dumped,
            "seconds": round(sum(max((s.seconds for s in step.sides), default=0) for step in self.steps), 3),
            "error": self.error,
        }


# what a step's confirmation is shown: the step's name and both sides' plans
Confirm = Callable[[str, list[RedumpPlan]], bool]


class Hunt:
    """Runs the steps; ``say`` gets every line to show (commands, the dumpers' live logs, findings).

    Args:
        settings: each side's dumper and inference command (tui-acc.toml ``[redump]``).
        options: how each step's two dumps are opened as a comparison (the command line's options;
            each step sets its own ``logits_node``).
        base: where the hunt's folder is made (``[redump] out_dir``, else ``./tui-acc-runs``).
        confirm: asked before each step with its plans; False stops the hunt (nothing of it runs).
        logits_node: the module whose output holds the logits, as the dumpers name it.
    """

    def __init__(
        self,
        settings: RedumpSettings,
        options: CompareOptions,
        base: Path,
        say: Callable[[str], None],
        confirm: Confirm,
        *,
        logits_node: str = DEFAULT_LOGITS_NODE,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        self.settings = settings
        self.options = options
        self.say = say
        self.confirm = confirm
        self.logits_node = logits_node
        self.folder = unused_name(base.expanduser().resolve(), f"hunt-{clock():%Y%m%d-%H%M%S}")
        self.steps: list[Step] = []
        self._say_lock = threading.Lock()  # both sides' dumpers log at once

    def run(self) -> HuntResult:
        """Run the steps (logits, then blocks, then operators) until the culprit is found or a step stops
        the hunt. Never raises for a failed step or Ctrl-C: both end up in the result's ``error`` (and
        ``interrupted``), with what was dumped kept."""
        result = HuntResult(self.folder, self.steps)
        try:
            self._hunt(result)
        except HuntError as exc:
            result.error = str(exc)
        except KeyboardInterrupt:  # Ctrl-C: the step's dumpers were stopped on the way out of _step
            result.interrupted = True
            kept = f"; what was dumped stays in {self.folder}" if self.folder.exists() else ""
            result.error = f"interrupted{kept}"
        return result

    # --- the steps ----------------------------------------------------------------------------

    def _hunt(self, result: HuntResult) -> None:
        logits = self._step(
            "logits",
            None,
            {
                side: Selection(
                    side, 0, 0, (self.logits_node,), every_token=True, subtree=False, outputs_only=True
                )
                for side in SIDES
            },
            self.logits_node,
        )
        # the later steps dump no logits; their trees (msit's model_tree.json) still name the module
        known = self.logits_node if self.logits_node in logits.golden.tree.nodes else None
        token = self._engine_call(logits, lambda cmp: cmp.engine.first_failing_token())
        result.comparison = logits
        if token is None:
            self.steps[-1].finding = f"every token's logits pass ({len(logits.pairing.tokens)} tokens)"
            self.say(f"hunt: {self.steps[-1].finding}: nothing to hunt")
            return
        result.first_failing_token = token
        self.steps[-1].finding = f"first failing token: {token}"
        self.say(f"hunt: {self.steps[-1].finding}")

        # TorchAir: the blocks of the graph that ran the token (a prefill graph's layers are not the
        # decode graph's)
        blocks = {
            side: find_blocks(index.tree, index.runs[token][0] if token in index.runs else None)
            for side, index in _indexes(logits).items()
        }
        block_step = self._step(
            "blocks",
            token,
            {
                side: self._selection(
                    side, token, index, tuple(blocks[side]), subtree=False, outputs_only=True
                )
                for side, index in _indexes(logits).items()
            },
            known,
        )
        block = self._engine_call(block_step, lambda cmp: cmp.verdicts.culprit(token))
        result.comparison = block_step
        if block is None:
            # every block's output passes, the logits do not: the error starts after the blocks
            self.steps[-1].finding = "no block's output fails: the culprit is outside the blocks"
            targets: dict[str, tuple[str, ...]] = dict.fromkeys(SIDES, ())
        else:
            self.steps[-1].finding = f"first failing block: {block['golden_node']}"
            targets = {"golden": (block["golden_node"],), "test": (block["test_node"],)}
        self.say(f"hunt: {self.steps[-1].finding}")
        if block is not None and block_step.golden.format != block_step.test.format:
            # torch against ATB pairs by structure, which needs the whole token's tree on both sides
            self.say(
                f"hunt: {block_step.golden.format} against {block_step.test.format} pairs operators by the "
                "token's whole structure: step 3 dumps every operator of the token on both sides"
            )
            targets = dict.fromkeys(SIDES, ())

        operators = self._step(
            "operators",
            token,
            {
                side: self._selection(side, token, index, targets[side], subtree=True, outputs_only=False)
                for side, index in _indexes(block_step).items()
            },
            known,
        )
        culprit = self._engine_call(operators, lambda cmp: cmp.verdicts.culprit(token))
        result.comparison = operators
        if culprit is None and block is not None:
            culprit = block  # its subtree shows no local failure: the block is as far as it goes
        result.culprit = op_summary(culprit)
        if culprit is not None:
            self.steps[
                -1
            ].finding = f"first failing operator: {culprit['golden_node']} ({culprit.get('label')})"
        else:
            self.steps[-1].finding = "no operator fails at that token in these dumps"
        self.say(f"hunt: {self.steps[-1].finding}")

    def _selection(
        self,
        side: str,
        token: int,
        index: DumpIndex,
        nodes: tuple[str, ...],
        subtree: bool,
        outputs_only: bool,
    ) -> Selection:
        """The token as the side's dumper counts it (ATB's execution count, MindIE's warm-up shifts it)."""
        atb = index.format in ATB_FORMATS
        step = index.exec_counts.get(token, token)
        runs = graph_runs(index)  # TorchAir: its dump settings name each token's graph step
        return Selection(side, token, step, nodes, atb, subtree=subtree, outputs_only=outputs_only, runs=runs)

    # --- running one step ---------------------------------------------------------------------

    def _step(
        self, name: str, token: int | None, selections: dict[str, Selection], logits_node: str | None = None
    ) -> Comparison:
        """Dump both sides for this step, then open what they dumped as a comparison (``logits_node``:
        the logits module, where the step's dumps know it; else their last module would stand for it)."""
        step = Step(name, token)
        number = len(self.steps) + 1
        plans = []
        for side in SIDES:
            try:
                plans.append(
                    build_plan(
                        selections[side], self.settings.side(side), self.folder / f"{number}-{name}" / side
                    )
                )
            except RedumpError as exc:
                raise HuntError(f"step {number} ({name}), {side}: {exc}") from exc
        where = "every token" if token is None else f"token {token}"
        self.say(f"hunt: step {number}: {name} at {where}")
        for plan in plans:
            self.say(plan.describe())
        if not self.confirm(name, plans):
            raise HuntError(f"step {number} ({name}) not run: not confirmed (--yes runs every step)")
        self.steps.append(step)
        runs = [RedumpRun(plan, on_line=self._logger(f"{name}/{plan.selection.side}")) for plan in plans]
        try:
            for run in runs:
                run.start()
            for run in runs:
                run.wait()
        except RedumpError as exc:
            raise HuntError(f"step {number} ({name}): {exc}") from exc
        finally:
            for run in runs:
                if run.running:
                    run.stop(EXIT_GRACE)
        for run in runs:
            ended = run.ended if run.ended is not None else time.monotonic()
            step.sides.append(
                SideRun(
                    run.plan.selection.side,
                    run.plan.command_line(),
                    run.plan.folder,
                    max(0.0, ended - run.started),
                    _bytes_under(run.plan.out),
                    run.status,
                    run.returncode,
                    run.plan.notes,
                )
            )
        for run in runs:
            if run.status != "succeeded":
                tail = "\n".join(f"  {line}" for line in run.lines[-LOG_TAIL:])
                raise HuntError(
                    f"step {number} ({name}): the {run.plan.selection.side} dumper {run.status} "
                    f"(exit {run.returncode}); its log: {run.plan.log}\n{tail}"
                )
        golden, test = (run.plan.out for run in runs)
        try:
            return open_comparison(golden, test, replace(self.options, logits_node=logits_node))
        except DumpError as exc:
            hint = (
                f" (is {self.logits_node} the logits module? --logits-node names another)"
                if number == 1
                else ""
            )
            raise HuntError(f"step {number} ({name}): its dumps cannot be compared: {exc}{hint}") from exc

    def _engine_call(self, cmp: Comparison, ask: Callable[[Comparison], Any]) -> Any:
        try:
            return ask(cmp)
        except DumpError as exc:
            raise HuntError(f"step {len(self.steps)}: {exc}") from exc

    def _logger(self, prefix: str) -> Callable[[str], None]:
        def line(text: str) -> None:
            with self._say_lock:
                self.say(f"  [{prefix}] {text}")

        return line


def _indexes(cmp: Comparison) -> dict[str, DumpIndex]:
    return {"golden": cmp.golden, "test": cmp.test}


def _bytes_under(folder: Path) -> int:
    """What a dumper wrote: every file's size below its output folder (0 when it wrote nothing)."""
    if not folder.exists():
        return 0
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())
