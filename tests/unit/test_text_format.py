"""The graph text's two readers (tui_acc/dumps/torchair/text_format.py): what ``str(GraphDef)`` writes
is read a field at a time (``_plain``), anything else token by token (``_tokenized``). The first is
only a faster way to the second's answer: wherever it answers, the two agree, and where the text is
not protobuf text it leaves the naming of the problem to the second."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tui_acc.dumps.torchair.text_format import _PLAIN, GraphTextError, _plain, _tokenized, parse

HERE = Path(__file__).resolve().parents[1]
# bits of the text format and of what is not it: strings with escapes, single quotes, a string
# continued or left open, comments, the other brackets, lists, odd characters, other white space
_PIECES = [
    "a", "op", "b_1", "x.y", ":", " ", "\n", "\t", "{", "}", "<", ">", "[", "]", ",", ";", "1", "-2.5e3",
    '"x"', '"a\\"b"', '"\\n\\101\\x41"', '"\\\\"', '"é"', "'y'", '"open', "#c\n", "\\", "\f", "~", "\r",
]  # fmt: skip
_NAMES = st.sampled_from(["op", "name", "input", "attr", "key", "value", "s", "dim", "shape", "x_1.y"])
_SCALARS = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["DT_BF16", "true", "1e-06", "-inf", "nan"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).map(
        lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    ),
)


def _message(depth: int) -> st.SearchStrategy[list[tuple[str, object]]]:
    field = st.tuples(_NAMES, _SCALARS)
    if depth:
        field = st.one_of(field, st.tuples(_NAMES, st.deferred(lambda: _message(depth - 1))))
    return st.lists(field, max_size=5)


def _written(message: list[tuple[str, object]], indent: str = "") -> str:
    """A message as str() of a protobuf message writes it: a field or a brace a line."""
    lines = []
    for name, value in message:
        if isinstance(value, list):
            lines += [f"{indent}{name} {{", _written(value, indent + "  "), f"{indent}}}"]
        else:
            lines.append(f"{indent}{name}: {value}")
    return "\n".join(line for line in lines if line)


def _either(text: str) -> object:
    try:
        return _tokenized(text, Path("g.txt"))
    except GraphTextError as exc:
        return exc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_where_the_field_reader_answers_it_answers_as_the_tokenizer(pieces: list[str]) -> None:
    text = "".join(pieces)
    plain, tokenized = _plain(text), _either(text)
    assert plain is None or plain == tokenized
    assert parse(text, Path("g.txt")) == tokenized if not isinstance(tokenized, Exception) else True


@settings(max_examples=200, deadline=None)
@given(_message(3))
def test_what_str_of_a_message_writes_is_read_a_field_at_a_time(message: list[tuple[str, object]]) -> None:
    text = _written(message)
    assert _plain(text) is not None
    assert _plain(text) == _tokenized(text, Path("g.txt"))


def test_the_fixtures_graph_texts_take_the_fast_reader(tmp_path: Path) -> None:
    """The texts written as TorchAir writes them (str of the GraphDef) are read a field at a time:
    were they sent to the tokenizer, opening a GE dump would take twice as long."""
    with tarfile.open(HERE / "data/torchair/llama.tar.xz") as archive:
        archive.extractall(tmp_path, filter="data")
    texts = sorted(tmp_path.rglob("dynamo_original_graph_*.txt"))
    assert len(texts) == 6
    for path in texts:
        text = path.read_text(encoding="utf-8")
        assert _plain(text) is not None, path.name
        assert _plain(text) == _tokenized(text, path)


def test_a_long_name_before_a_string_left_open_is_not_read_again_at_each_character() -> None:
    """Past the first thing the field reader does not know, the rest of the text is one match (the
    tokenizer then names the problem): not matched again at each character, which is quadratic."""
    text = "a: 1\n" + "n" * 20_000 + ': "' + '\\"' * 20_000 + "\nc: 2\n"
    assert len(_PLAIN.findall(text)) == 3  # ``a: 1``, the rest, the end
    with pytest.raises(GraphTextError, match="line 2: unexpected character '\"'"):
        parse(text, Path("g.txt"))


def test_a_name_before_a_long_run_of_spaces_and_no_brace_is_not_tried_at_every_split() -> None:
    """The white space around a message's optional colon is matched one way: were it two runs that
    may share the spaces, each split of 200,000 would be tried (a minute and a half), not one."""
    text = "a" + " " * 200_000 + "x"
    assert _plain(text) is None  # not what str() writes: the tokenizer names it
    with pytest.raises(GraphTextError, match="'x' after field 'a' without ':'"):
        parse(text, Path("g.txt"))
