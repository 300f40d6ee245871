"""Hostile torch files (forged pickles, views, zip records) against ``tui-acc report``, one process each.

Each case is the demo pair with one tensor file (token 3, after the injected fault) replaced by a
file built at test time (tests/fuzz/attacks.py). ``report --json`` runs in a subprocess under a wall
bound the harness enforces (past it the process is killed and the case fails: a hang is caught by
the harness, never by asserting a duration), and must: end on its own, not on a signal; print no
traceback; stay under a memory bound (its peak RSS, VmHWM: the child's own, not the forked
parent's that wait4's ru_maxrss would include); name the bad file with the problem;
and still compare the rest of the dump (the injected fault found, every token judged).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import device_dir
from tests.fuzz import attacks
from tests.processes import all_end

WALL_SECONDS = 60  # a report of the demo takes about a second; past this it hangs
PEAK_RSS_BYTES = 384 << 20  # a report of the demo peaks near 100 MiB; the bombs inflate 512 MiB
FAULT_OP = "root.model.layers.2.mlp.down_proj"
TARGET = Path("3") / "root.model.layers.3.mlp.up_proj" / "output.pth"  # compared: token 3 fails first
BOMB_BYTES = 512 << 20


@dataclass(frozen=True)
class Outcome:
    code: int  # the exit status, or minus the signal that ended it
    stdout: str
    stderr: str
    peak_rss: int  # bytes


# the child writes its peak RSS as it exits (VmHWM belongs to the process image exec made)
_PEAK = (
    "import atexit, re, sys\n"
    "_peak_file = sys.argv[1]\n"
    "def _peak():\n"
    "    status = open('/proc/self/status').read()\n"
    "    open(_peak_file, 'w').write(re.search(r'VmHWM:\\s*(\\d+) kB', status).group(1))\n"
    "atexit.register(_peak)\n"
)


def run_report(golden: Path, test: Path, prelude: str = "") -> Outcome:
    """``tui-acc report golden test --json --no-cache`` in a subprocess (``prelude``: Python run first
    in it), waited for on its pidfd up to WALL_SECONDS."""
    code = f"{_PEAK}{prelude}\nfrom tui_acc.cli.main import main\nraise SystemExit(main(sys.argv[2:]))\n"
    args = ["report", str(golden), str(test), "--json", "--no-cache"]
    with tempfile.TemporaryDirectory() as scratch:
        out, err, peak = (Path(scratch) / name for name in ("out", "err", "peak"))
        with out.open("wb") as stdout, err.open("wb") as stderr:
            command = [sys.executable, "-c", code, str(peak), *args]
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        pidfd = os.pidfd_open(process.pid)
        try:
            ended = all_end([pidfd], WALL_SECONDS)
        finally:
            os.close(pidfd)
        if not ended:
            process.kill()  # SIGKILL: the hangs this catches ignore SIGTERM
            process.wait()
            pytest.fail(f"report still running after {WALL_SECONDS} s: killed (it hangs)")
        process.wait()
        peak_kib = int(peak.read_text()) if peak.exists() else 0  # none: it ended on a signal
        return Outcome(process.returncode, out.read_text(), err.read_text(), peak_kib * 1024)


def _zip(pickled: bytes, storages: dict[str, bytes] | None = None) -> bytes:
    return attacks.zip_of(attacks.torch_records(pickled, storages or {}))


def _floats(path: Path) -> np.ndarray:
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor

    return np.asarray(load_tensor(path, ANYWHERE), dtype=np.float32)


def _contiguous(values: np.ndarray, storage: bytes | None = None) -> bytes:
    """data.pkl of a float32 tensor shaped like ``values``, over storage "0"."""
    strides = tuple(s // 4 for s in np.zeros(values.shape, dtype=np.float32).strides)
    numel = len(storage) // 4 if storage is not None else values.size
    return attacks.pickle_of(attacks.float_tensor(numel, 0, values.shape, strides))


# --- the cases: each gets (golden file, test file) at TARGET, returns the problem to be named ------


def deep_key(_golden: Path, test: Path) -> str:
    test.write_bytes(_zip(attacks.as_dict_key(attacks.deep_tuple(200_000))))  # SIGSEGV hashing it
    return "nests tuples more than 100 deep"


def deep_set_member(_golden: Path, test: Path) -> str:
    test.write_bytes(_zip(attacks.as_set_member(attacks.deep_tuple(200_000))))
    return "nests tuples more than 100 deep"


def tuple_dag_key(_golden: Path, test: Path) -> str:
    pickled = attacks.as_dict_key(attacks.tuple_dag(60))  # 2^60 tuples to hash, deaf to signals
    assert len(pickled) < 320
    test.write_bytes(_zip(pickled))
    return "hashes more than 4,194,304 elements"


def colliding_keys(_golden: Path, test: Path) -> str:
    """250,000 int keys sharing one hash: inserting them is 3e10 probes (most of an hour); 3.5 MB."""
    test.write_bytes(_zip(attacks.colliding_keys(250_000)))
    return "more than 16,384 keys in one dict or set"


def broadcast_view(golden: Path, test: Path) -> str:
    """2^40 elements over 128 floats (stride 0), on both sides: compared element by element for hours."""
    forged = _zip(attacks.pickle_of(attacks.float_tensor(128, 0, (1 << 40,), (0,))), {"0": bytes(512)})
    golden.write_bytes(forged)
    test.write_bytes(forged)
    return "more than 1024 times what the storage holds"


def pickle_bomb(_golden: Path, test: Path) -> str:
    pickled = attacks.deflated_zeros("archive/data.pkl", BOMB_BYTES)
    test.write_bytes(attacks.zip_of([pickled, attacks.stored("archive/byteorder", b"little")]))
    return "more than a tensor file's pickle"


def storage_bomb(golden: Path, test: Path) -> None:
    """A view of the golden's shape over a storage deflated from 512 MiB: only the view's bytes are
    inflated, and the file is compared (its values are zeros)."""
    values = _floats(golden)
    records = attacks.torch_records(_contiguous(values), {})
    test.write_bytes(attacks.zip_of([*records, attacks.deflated_zeros("archive/data/0", BOMB_BYTES)]))


def duplicate_record(golden: Path, test: Path) -> str:
    """torch.load reads the first data/0 (the golden's values), zipfile the last (-1000 times them)."""
    values = _floats(golden)
    honest = values.astype("<f4").tobytes()
    records = attacks.torch_records(_contiguous(values), {"0": honest})
    forged = attacks.stored("archive/data/0", (values * -1000).astype("<f4").tobytes())
    test.write_bytes(attacks.zip_of([*records, forged]))
    return "holds archive/data/0 twice"


def legacy_deep_key(_golden: Path, test: Path) -> str:
    """torch's legacy format goes to torch.load, which crashes on a deep key as we did."""
    test.write_bytes(attacks.legacy(attacks.as_dict_key(attacks.deep_tuple(200_000))))
    return "nests tuples more than 100 deep"


CASES: dict[str, Callable[[Path, Path], str | None]] = {
    "deep tuple as a dict key": deep_key,
    "deep tuple in a set": deep_set_member,
    "300-byte tuple DAG as a dict key": tuple_dag_key,
    "250,000 int keys sharing a hash": colliding_keys,
    "2^40-element stride-0 view": broadcast_view,
    "data.pkl deflated from 512 MiB": pickle_bomb,
    "storage deflated from 512 MiB": storage_bomb,
    "two data/0 records": duplicate_record,
    "legacy format, deep tuple key": legacy_deep_key,
}


def _copy(demo_pair, tmp_path: Path) -> tuple[Path, Path]:
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.test, test)
    return golden, test


def _check(outcome: Outcome, named: tuple[Path, ...], problem: str | None) -> None:
    assert outcome.code >= 0, f"ended by signal {-outcome.code}: {outcome.stderr[-2000:]}"
    assert "Traceback" not in outcome.stderr, outcome.stderr[-4000:]
    assert outcome.code in (0, 1), outcome.stderr[-2000:]
    assert outcome.peak_rss < PEAK_RSS_BYTES, f"peak RSS {outcome.peak_rss >> 20} MiB"
    report = json.loads(outcome.stdout)
    errors = [f"{e['file']}: {e['message']}" for e in report["errors"]]
    mentioning = [e for e in errors if any(str(path) in e for path in named)]
    if problem is None:
        assert not mentioning, mentioning  # read and compared
    else:
        assert mentioning and problem in mentioning[0], errors
    # the rest of the dump is compared: the injected fault is found, every token judged
    assert report["first_failing_op"]["golden"] == FAULT_OP
    assert len(report["tokens"]) == 8


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_torch_file_is_named_and_the_rest_compared(demo_pair, tmp_path: Path, case: str) -> None:
    golden, test = _copy(demo_pair, tmp_path)
    targets = (device_dir(golden) / TARGET, device_dir(test) / TARGET)
    problem = CASES[case](*targets)
    _check(run_report(golden, test), targets, problem)


def test_a_torch_too_old_for_the_fallback_is_named(demo_pair, tmp_path: Path) -> None:
    """A legacy-format file needs torch.load, which torch before 2.10 cannot run safely on a file from
    elsewhere: refused, naming the torch installed (here made to say 2.5.1) and what to install."""
    import torch

    golden, test = _copy(demo_pair, tmp_path)
    target = device_dir(test) / TARGET
    torch.save(torch.from_numpy(_floats(target)), target, _use_new_zipfile_serialization=False)
    outcome = run_report(golden, test, prelude="import torch\ntorch.__version__ = '2.5.1'")
    _check(outcome, (target,), "needs torch's own loader, which torch 2.5.1 (installed) cannot run safely")
    assert "install torch 2.10 or later" in outcome.stdout


def test_a_mapped_file_truncated_while_compared_is_named(demo_pair, tmp_path: Path) -> None:
    """A settled 2 MiB pair (mapped, not read) truncated in place while it is compared: no SIGBUS;
    the file is named as changed while being read."""
    golden, test = _copy(demo_pair, tmp_path)
    values = np.arange(1 << 19, dtype=np.float32).reshape(1, 512, 1024)
    targets = (device_dir(golden) / TARGET, device_dir(test) / TARGET)
    for path in targets:
        path.write_bytes(_zip(_contiguous(values), {"0": values.tobytes()}))
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))  # settled: mapped
    prelude = (
        "import os\nfrom tui_acc.metrics import kernels\n_compare = kernels.compare_tensors\n"
        "def _truncating(g, t, kl=True):\n"
        f"    if g.size == {values.size}:\n"
        f"        os.truncate({str(targets[1])!r}, 0)\n"
        "    return _compare(g, t, kl=kl)\n"
        "kernels.compare_tensors = _truncating\n"
    )
    _check(run_report(golden, test, prelude), targets[1:], "changed while being read")


def test_the_attacks_are_what_they_claim() -> None:
    """The builders write what torch itself reads as described (so each case attacks what it names)."""
    import torch

    dag = attacks.pickle_of(attacks.tuple_dag(3))
    assert torch.load(io.BytesIO(_zip(dag)), weights_only=True) == ((((), ()), ((), ())),) * 2
    data = struct.pack("<4f", 1, 2, 3, 4)
    view = attacks.pickle_of(attacks.float_tensor(4, 1, (3,), (1,)))
    assert torch.load(io.BytesIO(_zip(view, {"0": data})), weights_only=True).tolist() == [2, 3, 4]
    bomb = attacks.deflated_zeros("x", 4 << 20)
    assert len(bomb.data) < 8 << 10
    assert zipfile.ZipFile(io.BytesIO(attacks.zip_of([bomb]))).read("x") == bytes(4 << 20)
