"""Metrics: kernels (pure torch), the caching engine, and verdict thresholds."""

from __future__ import annotations

from tui_acc.metrics.engine import Cancelled, MetricsEngine
from tui_acc.metrics.verdict import Thresholds

__all__ = ["Cancelled", "MetricsEngine", "Thresholds"]
