"""Allow ``python -m tui_acc``."""

from __future__ import annotations

from tui_acc.cli import main

raise SystemExit(main())
