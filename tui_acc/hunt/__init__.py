"""``tui-acc hunt``: from a bad case to the culprit operator, dumping coarse to fine.

The Ascend accuracy guides' manual loop, run for the user: the logits of every token on both sides
(the first failing token), then at that token the outputs of the model's blocks (the first failing
block), then that block's subtree with inputs and outputs (the first failing operator, by the same
rule as everywhere else). Each step re-dumps both sides with the ``[redump]`` settings, into its
own folder under ``./tui-acc-runs/hunt-<timestamp>/``, and compares what it dumped.
"""
