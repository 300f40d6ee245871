"""Two SGLang dumper runs: pair their steps by the tokens each step processes.

A step is a forward pass of the server, and two runs need not number them alike: a warm-up
request, another request scheduled in between, or a re-dump started later shifts every step.
SGLang's comparator aligns by ``input_ids`` (comparator/aligner/token_aligner); here a test step is
renumbered to the golden step that processed the same ``input_ids``, in order, where both sides
dumped them (the hooks dump them under that name at every step).

See docs/formats.md §5.2.
"""

from __future__ import annotations

from dataclasses import replace

from tui_acc.dumps.model import DumpIndex
from tui_acc.dumps.sglang.dump import INPUT_IDS
from tui_acc.dumps.tensors import TensorLoadError, load_tensor


def align_steps(golden: DumpIndex, test: DumpIndex) -> DumpIndex:
    """``test`` with its steps numbered as the golden's steps that processed the same tokens.

    A test step no golden step matches keeps a number after every golden step (listed unmatched,
    with a note). Without ``input_ids`` on both sides the steps pair by number, as dumped.
    """
    golden_ids, test_ids = _tokens_by_step(golden), _tokens_by_step(test)
    if golden_ids is None or test_ids is None or not golden_ids or not test_ids:
        return test
    matched = match_steps(golden_ids, test_ids)
    # a step without input_ids (a file lost, a stray step folder) cannot be placed: where the others
    # align as numbered it keeps its number, else it is set apart, named (alignment had been dropped
    # for every step, and a step paired by number with another's tokens, without a word)
    unplaced = sorted(set(test.tokens) - set(test_ids))
    if all(matched.get(step) == step for step in test_ids):
        return test  # numbered alike: a step without input_ids pairs by its number too
    spare = max([*golden.tokens, *matched.values()], default=-1) + 1  # past every golden step
    numbering: dict[int, int] = {}
    notes: list[str] = []
    for step in sorted([*test_ids, *unplaced]):
        if step in matched:
            numbering[step] = matched[step]
            continue
        numbering[step] = spare
        why = (
            "holds no input_ids, so the tokens it processes are unknown"
            if step in unplaced
            else "processes tokens no golden step does (a warm-up or another request?)"
        )
        notes.append(f"test step {step} {why}; listed as token {spare}, not compared")
        spare += 1
    shifted = [f"test step {step} is golden step {matched[step]}" for step in sorted(matched)]
    notes.insert(0, "steps aligned by the input_ids they process: " + ", ".join(shifted))
    return replace(
        test,
        tokens={numbering[step]: test.tokens[step] for step in sorted(numbering, key=numbering.__getitem__)},
        exec_counts={new: test.exec_counts.get(step, step) for step, new in numbering.items()},
        notes=[*test.notes, *notes],
    )


def match_steps(
    golden_ids: dict[int, tuple[int, ...]], test_ids: dict[int, tuple[int, ...]]
) -> dict[int, int]:
    """Test step -> the golden step that processed the same tokens, in order.

    Anchored on the golden's first step (the prefill: the prompt's tokens, which a warm-up or
    another request's decode step does not process): test steps before the first that processes
    them match nothing, so a one-token warm-up whose token happens to equal a later decode token
    cannot pull the alignment past the prefill. Without such a step, steps match greedily in order.
    """
    golden_steps = sorted(golden_ids)
    test_steps = sorted(test_ids)
    if golden_steps:
        prefill = golden_ids[golden_steps[0]]
        anchor = next((i for i, step in enumerate(test_steps) if test_ids[step] == prefill), None)
        if anchor is not None:
            test_steps = test_steps[anchor:]
    matched: dict[int, int] = {}
    cursor = 0
    for step in test_steps:
        for position in range(cursor, len(golden_steps)):
            if golden_ids[golden_steps[position]] == test_ids[step]:
                matched[step] = golden_steps[position]
                cursor = position + 1
                break
    return matched


def _tokens_by_step(index: DumpIndex) -> dict[int, tuple[int, ...]] | None:
    """Each step's ``input_ids``, for the steps that dumped them; None where they cannot be read or
    are not integers (the comparison names the file).

    This loads tensors while pairing (the readers never do): which tokens a step processed is
    written nowhere else. They are a few integers per step.
    """
    found: dict[int, tuple[int, ...]] = {}
    for step, nodes in index.tokens.items():
        refs = [ref for ref in nodes.get(INPUT_IDS, []) if ref.has_data]
        if not refs:
            continue  # placed by align_steps
        try:
            ids = load_tensor(refs[0].path, index.load_policy)
        except TensorLoadError:
            return None  # the comparison reports the file itself
        if ids.dtype.kind not in "iu":  # token ids are integers
            return None
        found[step] = tuple(int(i) for i in ids.reshape(-1).tolist())
    return found
