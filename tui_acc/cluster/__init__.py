"""``tui-acc ranks DUMP --ray ADDRESS``: the check across ranks on a Ray cluster, each rank folder read
on the host that holds it (docs/cluster.md). Ray is an optional extra (``tui-acc[ray]``), imported only
inside these modules' functions: ``tui-acc`` without ``--ray`` never loads it."""
