"""The error map of one tensor of the highlighted operator (``m``): where its error sits, as a picture.

Computed when shown, on a thread worker (a 1 GB pair takes seconds), one at a time: moving the cursor
cancels the map being computed between two chunks. The last few maps are kept, so going back is free.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from tui_acc.pairing import NodePair, TensorPair
from tui_acc.tui import formatting as fmt

if TYPE_CHECKING:
    from tui_acc.metrics.engine import MetricsEngine
    from tui_acc.metrics.error_map import ErrorMap

KEPT = 16  # maps kept (a few KiB each): the operators around the cursor
CHROME = 8  # the panel's lines besides the heatmap's rows: title, sentence, axes, scale, histogram
HEAT_ROWS_MIN, HEAT_ROWS_MAX = 4, 16


class ErrorMapView(Static):
    """|Δ| over rows x channel blocks and the relative error against u, for one tensor pair."""

    class Computed(Message):
        """A map arrived from the worker, or why there is none."""

        def __init__(self, pair: TensorPair, emap: ErrorMap | None, problem: str | None = None) -> None:
            super().__init__()
            self.pair = pair
            self.emap = emap
            self.problem = problem

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._node: NodePair | None = None
        self._engine: MetricsEngine | None = None
        self._index: int | None = None  # chosen when first shown: the rows known by then decide it
        self._maps: OrderedDict[TensorPair, ErrorMap | str] = OrderedDict()
        self._computing: TensorPair | None = None

    @property
    def pair(self) -> TensorPair | None:
        """The tensor pair the panel is about."""
        if self._node is None or not self._node.tensors:
            return None
        return self._node.tensors[(self._index or 0) % len(self._node.tensors)]

    def show(self, node: NodePair | None, engine: MetricsEngine) -> None:
        """Follow the highlighted operator: its worst output first. Nothing is read while hidden."""
        if engine is not self._engine:  # a re-dump opened in place: other files, other maps
            self._engine, self._maps = engine, OrderedDict()
        if node != self._node:
            self._node, self._index = node, None
        self.redraw()

    def step(self, by: int) -> None:
        """The operator's next (``by=1``) or previous tensor."""
        if self._node is not None and self._node.tensors:
            self._index = ((self._index or 0) + by) % len(self._node.tensors)
            self.redraw()

    def on_resize(self) -> None:
        """Draw the picture again at the new width."""
        self.redraw()

    def redraw(self) -> None:
        """Show the current tensor's picture, or why there is none; a map not yet computed starts its worker
        (nothing is read while the panel is hidden)."""
        if not self.display or self._engine is None:
            return
        if self._index is None and self._node is not None:
            self._index = _worst_tensor(self._node, self._engine)
        pair = self.pair
        if pair is None:
            self.update(Text("no tensor files paired for this operator" if self._node else "", style="dim"))
            return
        if self._engine.pairing.golden is self._engine.pairing.test:  # tui-acc DUMP: nothing to differ
            self.update(Text("one dump checked on its own: no golden, so no error to picture", style="dim"))
            return
        known = self._maps.get(pair)
        if isinstance(known, str):
            self.update(Group(self._title(pair), Text(known, style=fmt.palette().error)))
        elif known is not None:
            # numpy's and the engine's: here once a map exists, never on the token list's first frame
            from tui_acc.tui.widgets.error_picture import render

            self._maps.move_to_end(pair)
            self.update(render(self._title(pair, known), known, self._width(), self._heat_rows()))
        elif not (pair.golden.has_data and pair.test.has_data):
            self.update(Group(self._title(pair), Text("statistics only: no tensor data", style="dim")))
        else:
            self.update(Group(self._title(pair), Text("reading the tensors…", style=fmt.PENDING_STYLE)))
            if pair != self._computing:
                self._computing = pair
                self.compute(self._engine, pair)

    def _title(self, pair: TensorPair, emap: ErrorMap | None = None) -> Text:
        """The tensor, its operator (elided to the room left), its shape and dtypes once read."""
        assert self._node is not None
        count = len(self._node.tensors)
        which = f"   tensor {(self._index or 0) % count + 1}/{count}" + (" ([ ])" if count > 1 else "")
        what = f"  {list(emap.shape)} {fmt.dtypes(emap.golden_dtype, emap.test_dtype)}" if emap else ""
        room = self._width() - len(pair.slot) - len(which) - len(what) - 2
        name = fmt.elide_middle(fmt.display_name(pair.golden_node), max(room, 12))
        return Text.assemble((pair.slot, "bold"), "  ", (name, "dim"), what, (which, "dim"))

    def _width(self) -> int:
        return self.content_size.width or self.app.size.width - 2

    def _heat_rows(self) -> int:
        """A third of the terminal for the whole panel, at least HEAT_ROWS_MIN rows of cells."""
        return max(HEAT_ROWS_MIN, min(HEAT_ROWS_MAX, self.app.size.height * 2 // 3 - CHROME - 2))

    @work(thread=True, exclusive=True, group="error-map", exit_on_error=False, name="error map")
    def compute(self, engine: MetricsEngine, pair: TensorPair) -> None:
        """Read the pair (under its dumps' load policy, a large one alone) and map it, off the UI."""
        from tui_acc.dumps.model import DumpError
        from tui_acc.dumps.tensors import TensorLoadError
        from tui_acc.metrics.engine import Cancelled
        from tui_acc.metrics.error_map import error_map
        from tui_acc.metrics.kernels import ShapeMismatch

        worker = get_current_worker()
        try:
            with engine.held_pair(pair) as (golden, test):
                emap = error_map(golden, test, should_stop=lambda: worker.is_cancelled)
        except Cancelled:
            return
        except (TensorLoadError, DumpError, ShapeMismatch) as exc:
            self.post_message(self.Computed(pair, None, str(exc)))
            return
        except Exception as exc:  # one odd pair is its own message, as the engine's rows are
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            self.post_message(self.Computed(pair, None, f"{pair.test.path}: {type(exc).__name__}: {first}"))
            return
        self.post_message(self.Computed(pair, emap))

    @on(Computed)
    def _arrived(self, message: Computed) -> None:
        self._maps[message.pair] = message.emap if message.emap is not None else str(message.problem)
        while len(self._maps) > KEPT:
            self._maps.popitem(last=False)
        if message.pair == self._computing:
            self._computing = None
        if message.pair == self.pair:
            self.redraw()


def _worst_tensor(node: NodePair, engine: MetricsEngine) -> int:
    """The failing output with the lowest cosine, else the first output, else the first tensor."""
    outputs = [i for i, pair in enumerate(node.tensors) if pair.role == "output"]
    failing = []
    for i in outputs:
        row = engine.known_row(node.tensors[i])  # memory only: this is the UI thread
        if row is not None and row.get("passed") is False:
            cosine = row.get("cosine")
            failing.append((cosine if isinstance(cosine, float) else -2.0, i))
    if failing:
        return min(failing)[1]
    return outputs[0] if outputs else 0
