"""Write a dump in msprobe's ATB probe layout by converting a real dump (the probe needs an NPU).

    python scripts/make_atb_probe_fixture.py --out /tmp/probe                 # the demo's test run
    python scripts/make_atb_probe_fixture.py --out /tmp/probe --msit A B      # msit ATB dumps, device 0, 1
    python scripts/make_atb_probe_fixture.py --out /tmp/probe --task statistics --param-names

Without ``--msit`` it builds the demo (seed 0: a torch golden and a test run with an injected
fault), exports the test run as an msit ATB dump (tui_acc/demo/atb_export.py) and converts that.
The tests do the same at test time (tests/unit/test_msprobe_atb_probe.py), so nothing is committed.

The conversion is tui_acc/demo/probe_export.py; each rule there cites msprobe's source
(Ascend/msprobe, August 2026). In short, from ccsrc/atb_probe/atb_probe.cpp:

* ``{ATB_OUTPUT_DIR}/atb_dump_data/`` (:247-254), ``data/`` (:31) + the path ATB passes (:1543):
  ``{dev}_{pid}/{exec}/{id}_{name}/.../{before|after}/{file}`` (:1334, :794-839)
* only ``before/intensor{i}`` and ``after/outtensor{i}`` are saved (:1570-1575); the file name is
  ATB's, with the parameter name on some CANN versions (:1688)
* ``.bin``: ``$Version``, ``$Object.Count``, ``$Object.Length``, format, dtype, dims, ``$Object.data``
  or ``data=`` alias, ``$End=1``, bytes (utils/bin_file.cpp:43-80; :1586-1628)
* ``data/{dev}_{pid}/{exec}/statistic.csv`` (:1703-1717), header (:927-928), row (:841-904),
  statistics (:1630-1668, utils/Statistics.h)
* ``op_param.json`` per operation (:1998-2028)
* ``info/layer/{dev}_{pid}/{opName}.json`` (:1892-1909), ``info/model/{dev}_{pid}/{Model}.json``
  (:2116-2133), opName suffixed ``_{n}`` (:369)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tui_acc.demo import make_demo
from tui_acc.demo.atb_export import export_atb
from tui_acc.demo.probe_export import TASKS, ProbeOptions, export_probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write atb_dump_data/ into")
    parser.add_argument("--msit", type=Path, nargs="*", help="msit_dump_* folders, one per device")
    parser.add_argument("--task", choices=TASKS, default="tensor")
    parser.add_argument("--param-names", action="store_true", help="intensor0_x.bin file names")
    parser.add_argument("--filter-level", type=int, choices=(0, 1), default=1)
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out}: not empty")
    options = ProbeOptions(task=args.task, param_names=args.param_names, filter_level=args.filter_level)
    with tempfile.TemporaryDirectory() as scratch:
        roots = args.msit
        if not roots:
            demo = make_demo(Path(scratch) / "demo", seed=0)
            roots = [export_atb(demo.test, Path(scratch) / "msit")]
            print(f"demo: {demo.fault_description}")
        written = export_probe(roots, args.out, options)
    print(f"wrote {written} ({sum(1 for _ in written.rglob('*.bin'))} tensor files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
