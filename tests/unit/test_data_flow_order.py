"""Execution order from data flow where a copy lost the file times.

Dumps are written at test time, seeded, by the demo's msit-layout capture hook; their
model_tree.json is rewritten in ``named_children()`` order, as msit writes it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.conftest import device_dir
from tui_acc import CompareOptions, open_comparison
from tui_acc.demo.capture import MsitTorchCapture
from tui_acc.dumps import open_dump
from tui_acc.dumps.data_flow_order import order_by_data_flow, producer_edges
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchfile.storage_digest import list_storage

_COPY_TIME_NS = 1_700_000_000_000_000_000


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(hidden))


class DeclaredOutOfOrder(nn.Module):
    """Modules declared in another order than forward() calls them (as Hugging Face declares
    ``self_attn`` before ``input_layernorm``). ``attn`` is called with a keyword argument, so msit
    dumps no input of it and its input verdict comes from the module before it, or, first among
    its siblings, from its parent's input: which one decides whether it looks like where an error
    starts."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.head = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(hidden=self.norm(x)))


EXECUTION = ["root.norm", "root.attn", "root.head"]


def _capture(out: Path, fault: Callable[[nn.Module], Any] | None = None) -> Path:
    torch.manual_seed(7)
    model = DeclaredOutOfOrder().eval()
    handle = fault(model) if fault else None
    with torch.no_grad(), MsitTorchCapture(model, out) as capture:
        for step in range(2):
            model(torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(100 + step)))
    if handle is not None:
        handle.remove()
    _write_declared_tree(capture.data_dir / "model_tree.json", model)
    _stamp_as_a_copy(out)
    return out


def _write_declared_tree(path: Path, model: nn.Module) -> None:
    """model_tree.json as msit writes it: children in named_children() (declaration) order."""

    def node(name: str, module: nn.Module) -> dict[str, Any]:
        children = [node(f"{name}.{child}", sub) for child, sub in module.named_children()]
        return {"name": name, "type": type(module).__name__, "children": children}

    path.write_text(json.dumps(node("root", model)), encoding="utf-8")


def _stamp_as_a_copy(root: Path) -> None:
    """Every file the same time, as a copy that did not keep them (or a coarse filesystem) leaves."""
    for path in root.rglob("*"):
        os.utime(path, ns=(_COPY_TIME_NS, _COPY_TIME_NS))


def _noisy_norm(model: nn.Module) -> Any:
    """The test run's fault: the norm's output is off (seeded noise at a tenth of its scale)."""
    noise = torch.Generator().manual_seed(3)

    def hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return output + 0.1 * torch.randn(output.shape, generator=noise)

    return model.norm.register_forward_hook(hook, prepend=True)


@pytest.fixture
def out_of_order_pair(tmp_path: Path) -> tuple[Path, Path]:
    return _capture(tmp_path / "golden"), _capture(tmp_path / "test", _noisy_norm)


def test_data_flow_orders_a_copied_dump_as_it_ran(out_of_order_pair: tuple[Path, Path]) -> None:
    golden, _ = out_of_order_pair
    declared = json.loads((device_dir(golden) / "model_tree.json").read_text())
    assert [c["name"] for c in declared["children"]] == ["root.attn", "root.head", "root.norm"]  # the trap
    index = open_dump(golden)
    assert index.tree.children("root") == EXECUTION
    # norm -> attn.proj (lifted to norm -> attn) and attn -> head fix every neighbouring pair
    assert index.order_source.startswith("data flow (3 of 3 modules")
    assert index.order_is_execution


def test_first_failing_op_is_found_in_execution_order(out_of_order_pair: tuple[Path, Path]) -> None:
    """In model_tree.json's order attn comes first, judged by the model's input (which passes)
    since nothing before it says its undumped input was already off: it would be named where the
    error starts, ahead of the faulty norm it runs after."""
    golden, test = out_of_order_pair
    comparison = open_comparison(golden, test, CompareOptions(cache=False))
    op = comparison.verdicts.culprit(0)
    assert op is not None and op["golden_node"] == "root.norm" and op["label"] == "local"
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(0).rows}
    assert rows["root.attn"]["inputs_from"] == "root.norm" and rows["root.attn"]["label"] == "inherited"


def test_a_pass_through_module_is_not_a_producer(tmp_path: Path) -> None:
    """Dropout (eval) returns its input: its output equals what a module before it read too; that
    says nothing about which of them ran first, so no order comes from it."""

    class Fork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(0.1)  # declared first, runs after the reader
            self.reader = nn.Linear(8, 8)
            self.make = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            made = self.make(x)
            return self.reader(made) + self.drop(made)

    torch.manual_seed(1)
    model = Fork().eval()
    with torch.no_grad(), MsitTorchCapture(model, tmp_path) as capture:
        model(torch.randn(2, 8, generator=torch.Generator().manual_seed(2)))
    index = open_dump(capture.data_dir)
    edges = producer_edges(index.tree, index.tokens[0], index.load_policy)
    assert ("root.make", "root.reader") in edges and ("root.make", "root.drop") in edges
    assert ("root.drop", "root.reader") not in edges


def test_two_unrelated_makers_of_the_same_bytes_order_nothing(tmp_path: Path) -> None:
    """Two modules whose outputs are the same bytes (a constant): which one fed the reader is unknown."""

    class Constants(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.reader = nn.Linear(4, 4)
            self.first = nn.ReLU()
            self.second = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.reader(self.first(-x.abs()) + self.second(-x.abs()))  # both all zeros

    model = Constants()
    with torch.no_grad(), MsitTorchCapture(model, tmp_path) as capture:
        model(torch.randn(4, generator=torch.Generator().manual_seed(5)))
    index = open_dump(capture.data_dir)
    assert not any(
        first in ("root.first", "root.second")
        for first, _ in producer_edges(index.tree, index.tokens[0], index.load_policy)
    )


def test_archives_saved_without_crc_are_compared_by_their_data(tmp_path: Path) -> None:
    """torch can be told not to compute CRC-32s: equal storages are then found by hashing them."""
    tensor = torch.arange(16, dtype=torch.float32)
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(tensor, tmp_path / "output.pth")
        torch.save(tensor[4:], tmp_path / "input_0.pth")  # a view: the same storage
        torch.save(tensor + 1, tmp_path / "input_1.pth")
    finally:
        torch.serialization.set_crc32_options(True)
    policy = LoadPolicy.inside(tmp_path)
    listings = {
        name: list_storage(str(tmp_path / name), policy)
        for name in ("output.pth", "input_0.pth", "input_1.pth")
    }
    assert all(listing is not None and listing.records[0][2] == 0 for listing in listings.values())
    identities = {name: listing.identity(policy) for name, listing in listings.items() if listing is not None}
    assert identities["output.pth"] == identities["input_0.pth"] != identities["input_1.pth"]


def test_files_that_are_not_plain_torch_archives_are_skipped(tmp_path: Path) -> None:
    """Torch's legacy format, a damaged file, a missing one: no listing. A link out of the dump is
    not followed unless the dump's load policy allows any place (--follow-links)."""
    dump, elsewhere = tmp_path / "dump", tmp_path / "elsewhere"
    dump.mkdir()
    elsewhere.mkdir()
    tensor = torch.ones(4)
    torch.save(tensor, dump / "legacy.pth", _use_new_zipfile_serialization=False)
    torch.save(tensor, dump / "real.pth")
    torch.save(tensor, elsewhere / "secret.pth")
    (dump / "inside.pth").symlink_to(dump / "real.pth")
    (dump / "outside.pth").symlink_to(elsewhere / "secret.pth")
    (dump / "broken.pth").write_bytes(b"PK\x03\x04 not really")
    os.mkfifo(dump / "fifo.pth")
    confined = LoadPolicy.inside(dump)
    for name in ("real.pth", "inside.pth"):
        assert list_storage(str(dump / name), confined) is not None, name
    for name in ("legacy.pth", "outside.pth", "broken.pth", "fifo.pth", "missing.pth"):
        assert list_storage(str(dump / name), confined) is None, name
    assert list_storage(str(dump / "outside.pth"), LoadPolicy.anywhere()) is not None


@pytest.mark.parametrize("name", ["gpt2-msit", "qwen2moe-msit"])
def test_data_flow_agrees_with_the_file_times_of_real_dumps(model_case, tmp_path: Path, name: str) -> None:
    """Real msit dumps whose file times hold: every sibling order the data flow decides on a copy
    that lost them is the order the times give, and the fault is still found where it is."""
    folder = model_case(name)
    timed = open_dump(folder / "golden")
    assert timed.order_source == "file times"
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    _stamp_as_a_copy(copy)
    untimed = open_dump(copy / "golden")
    assert untimed.order_source.startswith("data flow")
    position = {node.name: i for i, node in enumerate(timed.tree.preorder())}
    edges = producer_edges(untimed.tree, untimed.tokens[0], untimed.load_policy)
    assert len(edges) > 10
    for first, then in edges:
        assert position[first] < position[then], (first, then)
    moved = {n.name for n in untimed.tree.nodes.values() if n.children != timed.tree.children(n.name)}
    declared = open_dump(copy / "golden")  # reordered again the same way: the order is deterministic
    assert [n.name for n in declared.tree.preorder()] == [n.name for n in untimed.tree.preorder()]
    case = json.loads((folder / "case.json").read_text())
    comparison = open_comparison(copy / "golden", copy / "test", CompareOptions(cache=False))
    op = comparison.verdicts.culprit(case["fault_token"])
    assert op is not None and op["golden_node"] == f"root.{case['fault_module']}", (op, moved)


def test_without_any_producer_the_tree_stays(tmp_path: Path) -> None:
    """Outputs only (msit tensor_part=1): nothing links two modules, model_tree.json stays, said so."""
    torch.manual_seed(7)
    model = DeclaredOutOfOrder().eval()
    with torch.no_grad(), MsitTorchCapture(model, tmp_path, tensor_part=1) as capture:
        model(torch.randn(1, 3, 8))
    _write_declared_tree(capture.data_dir / "model_tree.json", model)
    _stamp_as_a_copy(tmp_path)
    index = open_dump(tmp_path)
    assert index.order_source == "model_tree.json" and not index.order_is_execution
    assert order_by_data_flow(index.tree, index.tokens[0], index.load_policy) is None


def test_an_archive_the_quick_reader_does_not_know_is_read_by_zipfile(tmp_path: Path) -> None:
    """A torch archive with a comment after its directory (not what torch writes, but a valid
    zip): the standard library's reader lists it, with the same storage identity."""
    import zipfile

    torch.save(torch.arange(8.0), tmp_path / "output.pth")
    shutil.copy(tmp_path / "output.pth", tmp_path / "input_0.pth")
    with zipfile.ZipFile(tmp_path / "input_0.pth", "a") as archive:
        archive.comment = b"rewritten"
    policy = LoadPolicy.inside(tmp_path)
    plain, commented = (
        list_storage(str(tmp_path / "output.pth"), policy),
        list_storage(str(tmp_path / "input_0.pth"), policy),
    )
    assert plain is not None and commented is not None
    assert plain.identity(policy) == commented.identity(policy)
