"""msprobe's dumps: ``dump.json`` at levels L0, L1 and mix (``dump``, with ``passes``, ``refs``,
``steps`` and L1's ``stack``), level debug (``debug``), graph mode (``graph``, ``graph_order``), and its
two ATB dumps: ``statistic.csv`` (``atb_csv``) and the ATB probe's folders (``atb_probe``,
``atb_topology``)."""

from tui_acc.dumps.msprobe import atb_csv, atb_probe, debug, dump, graph  # noqa: F401  (importing a reader registers it)
