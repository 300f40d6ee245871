"""Verdicts: whether a tensor matches its golden, and which operator an error starts at."""
