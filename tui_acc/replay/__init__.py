"""Replay: recompute one operator's output from its own dumped inputs, in float64, on each side.

``call.py`` is what a reference implementation receives (``Call``) and returns (``Replayed``);
``torch_ops.py`` and ``atb_ops.py`` hold the built-in references; ``registry.py`` chooses one by the
node's record name or type (user plug-ins from ``tui-acc.toml`` and the ``tui_acc.replay`` entry
points first); ``gather.py`` collects a node's tensors and arguments from a dump; ``judge.py`` turns
the distance between the dumped output and the replay into a verdict at the output's dtype;
``run.py`` does both sides and the combined reading. No textual here, and no torch.
"""
