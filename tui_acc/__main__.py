"""Allow ``python -m tui_acc``."""

from __future__ import annotations

from tui_acc.cli.main import main

raise SystemExit(main())
