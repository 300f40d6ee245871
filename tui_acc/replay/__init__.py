"""Replay: recompute one operator's output from its own dumped inputs, on one side of a comparison.

``call.py`` is what a reference implementation receives (``Call``) and returns (``Replayed``);
``torch_ops.py`` and ``atb_ops.py`` hold the built-in references; ``registry.py`` chooses one by the
node's record name or type (user plug-ins from ``tui-acc.toml`` and the ``tui_acc.replay`` entry
points first); ``dumped_call.py`` collects a node's tensors and arguments from a dump; ``sampling.py``
chooses which output rows a large output is replayed on; ``distance.py`` measures the dumped output
against the replay. What that distance means is ``tui_acc.verdicts``'s to say. No textual here, and
no torch.
"""
