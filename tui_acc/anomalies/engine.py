"""The metrics engine over a dump paired with itself, judging each tensor by ``rules.py``.

Every row still holds what the engine reads of a tensor (NaN and Inf counts, max, min, norm, or the
recorded statistics); only the verdict differs: a tensor passes when nothing is wrong with it on its
own. Node rows, labels (local: the anomaly starts at this operator; inherited: it came in with the
inputs) and the first anomalous operator then come from the judge as they do for a pair.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from tui_acc.anomalies.arithmetic import NEEDS_ARGUMENTS, expected, reads_parameters
from tui_acc.anomalies.calls import Call, Operand, is_api, number, operator_name, parse_shape, place
from tui_acc.anomalies.rules import AnomalySettings, Inputs, anomaly, is_float, largest_magnitude
from tui_acc.metrics.engine import MetricsEngine
from tui_acc.metrics.schema import TensorRow, TokenRow
from tui_acc.pairing import NodePair, Pairing, TensorPair
from tui_acc.replay.dumped_call import recorded_arguments
from tui_acc.tolerances.thresholds import Thresholds
from tui_acc.verdicts.judge import Judge


class AnomalyEngine(MetricsEngine):
    def __init__(self, pairing: Pairing, thresholds: Thresholds, settings: AnomalySettings) -> None:
        # no disk cache: its rows would be keyed as a pair's, and a dump's own facts are cheap to read;
        # each tensor passes or fails by what is wrong with it on its own, not by the thresholds
        super().__init__(pairing, thresholds, cache=None, judge_tensor=self._judge_tensor)
        self.judge = Judge(self, models=False)  # a tensor fails for an anomaly alone: no error model
        self.settings = settings
        self._token_rows: dict[int, TokenRow] = {}
        self._token_lock = threading.Lock()

    def _judge_tensor(self, pair: TensorPair, row: TensorRow, baseline_row: TensorRow | None) -> None:
        """A tensor row's verdict (the engine's ``judge_tensor``): failed for an error or an anomaly."""
        found = None
        if not row.get("error"):
            inputs = self._inputs(pair, row) if pair.role == "output" else None
            found = anomaly(row, inputs, self.settings)
        row["anomaly"], row["anomaly_figure"] = found if found is not None else (None, None)
        row["passed"] = not row.get("error") and found is None

    def _inputs(self, pair: TensorPair, output: TensorRow) -> Inputs:
        """The node's dumped inputs (their rows computed here when needed: an output's row waits for
        its inputs' rows, which never wait for anything), and what its arithmetic expects of
        ``output`` from them."""
        node = next((n for n in self.pairing.node_pairs(pair.token) if n.golden == pair.golden_node), None)
        # a module's parameters only where its bound reads them (a norm's weight): L0 dumps every
        # module's weights at every call, and reading them all would double what a scan reads
        weights = node is not None and reads_parameters(operator_name(node.golden_type), is_api(node.golden))
        kept = ("input", "param") if weights else ("input",)
        tensors = [(t, self.tensor_row(t)) for t in (node.tensors if node else []) if t.role in kept]
        rows = [row for t, row in tensors if t.role == "input"]
        readable = [row for row in rows if not row.get("error")]
        found = [m for row in readable if is_float(row) and (m := largest_magnitude(row)) is not None]
        largest = max(found) if found else None
        call = self._call(node, tensors, output) if node is not None else None
        return Inputs(
            dumped=bool(rows),
            largest=largest,
            expected=expected(call, largest) if call is not None else None,
        )

    def _call(self, node: NodePair, tensors: list[tuple[TensorPair, TensorRow]], output: TensorRow) -> Call:
        """The node's call for arithmetic.py: its numeric tensors by argument, a module's parameters,
        and the scalars msprobe records beside them where the operator's bound needs them."""
        op = operator_name(node.golden_type)
        args: dict[int, Operand] = {}
        kwargs: dict[str, Operand] = {}
        params: list[Operand] = []
        for tensor, row in tensors:
            operand = _operand(row)
            if operand is None:
                continue
            if tensor.role == "param":
                params.append(operand)
            elif isinstance(at := place(tensor.slot), int):
                args.setdefault(at, operand)
            elif at is not None:
                kwargs.setdefault(at, operand)
        api = is_api(node.golden)
        if api and op in NEEDS_ARGUMENTS:
            for key, value in recorded_arguments(self.pairing.golden, node.token, node.golden).items():
                if (scalar := number(value)) is None:
                    continue
                if isinstance(at := place(key), int):
                    args.setdefault(at, scalar)
                else:
                    kwargs.setdefault(key, scalar)
        return Call(
            op=op,
            api=api,
            args=args,
            kwargs=kwargs,
            params=tuple(params),
            output_shape=parse_shape(output.get("test_shape")),
            output_dtype=output.get("test_dtype"),
        )

    # --- tokens: every operator of a token, not only its logits -------------------------------

    def token_row(self, token: int) -> TokenRow:
        """Every operator of ``token`` judged (their rows computed here when needed: tensors are read),
        summed up as the token's row: its verdict, how many anomalies start in it and where the first one
        does. Kept, so asked again it is not judged again; any thread."""
        with self._token_lock:
            known = self._token_rows.get(token)
        if known is not None:  # every operator of the token: judged once, not at each asking
            return known
        judged = self.judge.token(token)
        rows = judged.rows
        first = judged.culprit_row
        local = [r for r in rows if r.get("label") == "local"]
        failing = [r for r in rows if r.get("outputs_passed") is False]
        errors = [r for r in rows if r.get("error")]
        verdict = "fail" if failing else "error" if errors else "pass"
        result: TokenRow = {
            "token": token,
            "passed": not failing and not errors,
            "verdict": verdict,
            "anomalies": len(local),
            "first_anomaly": first["golden_node"] if first is not None else None,
            "anomaly": first.get("anomaly") if first is not None else None,
            "node": self.pairing.logits_node,
            "error": errors[0]["error"] if errors and not failing else None,
        }
        with self._token_lock:
            self._token_rows[token] = result
        return result

    def cached_token_row(self, token: int) -> TokenRow | None:
        """The token's row if ``token_row`` already made it, else None; reads nothing (the UI thread may
        ask)."""
        with self._token_lock:
            return self._token_rows.get(token)


def _operand(row: Mapping[str, Any]) -> Operand | None:
    """A readable numeric tensor's range (a bool mask is not a number: it selects)."""
    dtype = str(row.get("test_dtype") or "")
    high, low = row.get("test_max"), row.get("test_min")
    if row.get("error") or not isinstance(high, (int, float)) or not isinstance(low, (int, float)):
        return None
    if not (is_float(row) or dtype.startswith(("int", "uint"))):  # bool, complex: not magnitudes
        return None
    return Operand(float(high), float(low), row.get("numel"), parse_shape(row.get("test_shape")), dtype)
