"""A comparison session: two indexed dumps, their pairing, the metrics engine over them and the
judge of its verdicts; the options they are opened with (``CompareOptions``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tui_acc.dumps import DumpError, DumpIndex, open_dump
from tui_acc.pairing import MappingError, Pairing, load_mapping, load_msprobe_mapping, pair_dumps
from tui_acc.rank_merging import gathered, sharded
from tui_acc.tolerances.thresholds import Thresholds

if TYPE_CHECKING:
    from tui_acc.metrics.engine import MetricsEngine
    from tui_acc.metrics.pair_reading import PairReader
    from tui_acc.replay.registry import Registry
    from tui_acc.verdicts.judge import Judge


class Comparison:
    """What every front end works from.

    The engine is built when first used: importing it imports polars and numpy (about 0.3 s), which
    the token list does not need, so the TUI shows it first and its worker builds the engine. The
    judge (``verdicts``) is built over it the same way.
    """

    def __init__(
        self,
        golden: DumpIndex,
        test: DumpIndex,
        pairing: Pairing,
        thresholds: Thresholds,
        build_engine: Callable[[], MetricsEngine],
        baseline: DumpIndex | None = None,
        build_judge: Callable[[MetricsEngine], Judge] | None = None,
    ) -> None:
        """``build_judge``: the judge over the engine (default: the verdicts with every rule and the
        built-in replay references)."""
        self.golden = golden
        self.test = test
        self.baseline = baseline  # --baseline: the clean run at the test's dtype setting the noise floor
        self.pairing = pairing
        self.thresholds = thresholds
        self._build_engine = build_engine
        self._engine: MetricsEngine | None = None
        self._build_judge = build_judge
        self._judge: Judge | None = None
        self._engine_lock = threading.Lock()  # the UI's workers may ask for it first at once

    @property
    def single(self) -> bool:
        """One dump checked on its own (``tui-acc DUMP``: anomalies/), not a golden/test pair."""
        return self.golden is self.test

    @property
    def engine(self) -> MetricsEngine:
        """The metrics engine, built on first use (polars and numpy are imported then); threads asking at
        once get the one engine. ``built_engine`` looks without building."""
        with self._engine_lock:
            if self._engine is None:
                self._engine = self._build_engine()
            return self._engine

    @property
    def verdicts(self) -> Judge:
        """The judge: every view's one source of labels, counts and culprits (``verdicts/judge.py``),
        built with the engine on first use."""
        engine = self.engine
        with self._engine_lock:
            if self._judge is None:
                if self._build_judge is not None:
                    self._judge = self._build_judge(engine)
                else:
                    from tui_acc.verdicts.judge import Judge

                    self._judge = Judge(engine)
            return self._judge

    @property
    def built_engine(self) -> MetricsEngine | None:
        """The engine if something has built it already, else None (never builds it: what the UI
        thread asks when it only wants to save, close or report on what exists)."""
        return self._engine


@dataclass(frozen=True)
class CompareOptions:
    """How two dumps are opened, paired and judged: the options of ``tui-acc GOLDEN TEST``, each with
    the command line's default. ``replace(options, rank=1)`` changes one.

    Attributes:
        logits_node: the golden module whose output holds the logits (default: the model's last).
        thresholds: pass/fail thresholds (default: ``Thresholds()``).
        mapping: an operator mapping file (msit ``op_mapping_file.json`` or our TOML) for torch<->ATB.
        token_offset: for ATB dumps, token = folder - offset (default: automatic, MindIE-aware).
        rank: for multi-rank dumps, which rank to compare (on both sides when both have ranks).
        gather: merge every rank of the test dump, for a single-device golden. A test of several
            ranks against a golden of one is gathered without it, unless ``rank`` picks one.
        cache: keep computed rows on disk (``tui_acc.metrics.cache``) and reuse them next time
            (never where ``$TUI_ACC_NO_CACHE`` is set).
        follow_links: read through symlinks (and ATB ``data=`` files) that lead out of a dump.
        data_mapping: two msprobe dumps: msprobe compare's ``-dm`` YAML (test tensor -> golden tensor).
        layer_mapping: two msprobe dumps: msprobe compare's ``-lm`` YAML (per class: test child ->
            golden child), or True for ``-lm`` without a file (records paired by layer position).
        baseline: a clean run at the test's dtype (``--baseline``): every tensor is then judged
            against the noise floor its error from the golden sets (``tolerances/noise.py``).
        replay_registry: the replay references the verdicts use (``[replay]`` of tui-acc.toml);
            default: the built-ins and installed plug-ins.
    """

    logits_node: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    mapping: str | Path | None = None
    token_offset: int | None = None
    rank: int | None = None
    gather: bool = False
    cache: bool = True
    follow_links: bool = False
    data_mapping: str | Path | None = None
    layer_mapping: str | Path | bool | None = None
    baseline: str | Path | None = None
    replay_registry: Registry | None = None
    test_side: TestSide | None = None


class TestSide(Protocol):
    """A test dump read elsewhere than here (``--ray``: each rank folder on the node that holds it,
    ``cluster/pair_on_ray.py``): its gathered index, made there, and the reader that computes its rows
    where its files are. Given one, ``open_comparison`` opens no test path and keeps no row cache (the
    files' identities are the nodes')."""

    def index(self) -> DumpIndex:
        """The test's ranks, opened on their nodes and gathered (``rank_merging.merge_ranks``)."""
        ...

    def reader(self, pairing: Pairing) -> PairReader:
        """What loads and compares the pairs of ``pairing`` (a ``PairReader`` that works remotely)."""
        ...


def open_comparison(
    golden: str | Path, test: str | Path, options: CompareOptions | None = None
) -> Comparison:
    """Index both dumps and pair them; no tensor is loaded yet.

    Args:
        golden, test: dump roots (any folder level a user naturally passes) or tensor files.
        options: how to open, pair and judge them (default: ``CompareOptions()``, the command line's
            defaults), e.g. ``open_comparison(golden, test, CompareOptions(cache=False))``.

    Raises:
        DumpError: a root (or the mapping file) cannot be used; the message names it.
    """
    options = options or CompareOptions()

    def read(path: str | Path) -> DumpIndex:
        return open_dump(
            path, token_offset=options.token_offset, rank=options.rank, follow_links=options.follow_links
        )

    golden_index = read(golden)
    if options.gather and len(golden_index.ranks) > 1:
        raise DumpError(
            f"{golden}: --gather merges the test's ranks for a single-device golden, but the golden has "
            f"{len(golden_index.ranks)} ranks; compare rank to rank with --rank instead"
        )
    if options.gather and options.rank is not None:
        raise DumpError(
            f"{test}: --gather merges every rank and --rank {options.rank} picks one: give one of them"
        )
    test_side = options.test_side
    test_index = read(test) if test_side is None else test_side.index()
    gather_ranks = test_side is not None or options.gather or sharded(golden_index, test_index, options.rank)
    if gather_ranks and test_side is None:
        test_index = gathered(
            test, test_index, options.token_offset, options.follow_links, unasked=not options.gather
        )
        gather_ranks = test_index.rank is None
    if golden_index.format == test_index.format == "sglang":
        from tui_acc.dumps.sglang.align import align_steps

        test_index = align_steps(golden_index, test_index)
    logits_node = options.logits_node
    known = {golden_index.stable_name(n) for n in golden_index.tree.nodes}
    if logits_node is not None and logits_node not in golden_index.tree.nodes and logits_node not in known:
        raise DumpError(
            f"{golden_index.data_dir}: --logits-node {logits_node!r} is not a module of this dump"
        )
    try:
        op_mapping = load_mapping(Path(options.mapping).expanduser() if options.mapping is not None else None)
        names = load_msprobe_mapping(
            Path(options.data_mapping).expanduser() if options.data_mapping is not None else None,
            options.layer_mapping
            if isinstance(options.layer_mapping, bool) or options.layer_mapping is None
            else Path(options.layer_mapping).expanduser(),
        )
        pairing = pair_dumps(golden_index, test_index, logits_node, op_mapping, names)
        # the golden as paired (its order may be borrowed from an ATB test): what everything reads,
        # the baseline's pairing first
        golden_index = pairing.golden
        baseline_index = baseline_pairing = None
        if options.baseline is not None:
            # read as the test is (its rank or its ranks gathered, its token offset): it is the same
            # run on another device
            baseline_index = read(options.baseline)
            if gather_ranks and len(baseline_index.ranks) > 1:
                baseline_index = gathered(
                    options.baseline,
                    baseline_index,
                    options.token_offset,
                    options.follow_links,
                    unasked=False,
                )
            baseline_pairing = pair_dumps(golden_index, baseline_index, logits_node, op_mapping, names)
    except MappingError as exc:
        raise DumpError(str(exc)) from exc
    thresholds, cache = options.thresholds, options.cache

    def build_engine() -> MetricsEngine:
        from tui_acc.metrics.cache import RowCache, cache_enabled
        from tui_acc.metrics.engine import MetricsEngine

        keep = cache and cache_enabled()  # $TUI_ACC_NO_CACHE: --no-cache for every command
        noise_floor = None
        if baseline_index is not None and baseline_pairing is not None:
            # one worker: its rows are computed by the test's workers, each with the test row it judges
            base_cache = RowCache(golden_index.data_dir, baseline_index.data_dir) if keep else None
            noise_floor = MetricsEngine(baseline_pairing, thresholds, workers=1, cache=base_cache)
        if test_side is not None:  # the test's files are on other nodes: no identity to key rows by here
            return MetricsEngine(pairing, thresholds, baseline=noise_floor, reader=test_side.reader)
        row_cache = RowCache(golden_index.data_dir, test_index.data_dir) if keep else None
        return MetricsEngine(pairing, thresholds, cache=row_cache, baseline=noise_floor)

    def build_judge(engine: MetricsEngine) -> Judge:
        from tui_acc.verdicts.judge import Judge

        return Judge(engine, options.replay_registry)

    return Comparison(
        golden_index, test_index, pairing, thresholds, build_engine, baseline_index, build_judge
    )


def check_comparable(cmp: Comparison) -> None:
    """Refuse a pair that cannot mean anything, before a front end shows it.

    ``open_comparison`` itself accepts any pair (a library user may compare a dump with itself on
    purpose); the command line calls this so that "every token passes" or an empty table never
    stands for "you gave the same dump twice" or "nothing in these two pairs".

    Raises:
        DumpError: the message says what is wrong.
    """
    golden, test = cmp.golden, cmp.test
    same_root = Path(golden.root).resolve() == Path(test.root).resolve()
    # two levels of one dump (its root and its torch_tensors/) share the folder the data is read from;
    # two tensor files do too when they sit side by side, so for files only the file counts
    files = "tensor" in (golden.format, test.format)
    if same_root or (not files and golden.data_dir.resolve() == test.data_dir.resolve()):
        raise DumpError(
            f"golden and test are the same dump ({golden.root if same_root else golden.data_dir}): give the "
            "reference run's dump and "
            "the dump of the run under suspicion"
        )
    sides = f"golden: {_described(golden)}; test: {_described(test)}"
    if cmp.baseline is not None:
        _check_baseline(cmp.baseline, golden, test)
    if not cmp.pairing.tokens:
        raise DumpError(f"no token is in both dumps ({sides})")
    # pairs token by token and stops at the first that has a pair: only a useless pair costs them all
    if not any(cmp.pairing.has_pairs(token) for token in cmp.pairing.tokens):
        hint = ""
        if (golden.format == "tensor") != (test.format == "tensor"):
            hint = "; a single tensor file compares only with another single tensor file"
        raise DumpError(f"nothing pairs: no tensor of the golden has a partner in the test ({sides}){hint}")


def _check_baseline(baseline: DumpIndex, golden: DumpIndex, test: DumpIndex) -> None:
    """A baseline that is one of the two runs, or shares no token with the golden, sets no noise floor."""
    for side, index in (("golden", golden), ("test", test)):
        if Path(baseline.root).resolve() == Path(index.root).resolve() or (
            baseline.data_dir.resolve() == index.data_dir.resolve()
        ):
            raise DumpError(
                f"--baseline {baseline.root} is the {side} dump: give a clean run of the model at the test's "
                "dtype (e.g. bf16 on a trusted device)"
            )
    if not set(baseline.tokens) & set(golden.tokens):
        raise DumpError(
            f"--baseline: no token is in both the golden and the baseline "
            f"(golden: {_described(golden)}; baseline: {_described(baseline)})"
        )


def _described(index: DumpIndex) -> str:
    tokens = sorted(index.tokens)
    span = (
        f"tokens {tokens[0]}..{tokens[-1]}"
        if len(tokens) > 1
        else f"token {tokens[0]}"
        if tokens
        else "no token"
    )
    kind = "single tensor file" if index.format == "tensor" else f"{index.format} dump"
    return f"{index.root} ({kind}, {span})"
