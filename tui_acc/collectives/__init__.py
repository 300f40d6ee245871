"""Checks across the ranks of one run: each collective's output against the golden its ranks' inputs
give (the sum of every rank's input for an all-reduce), judged by the rounding a sum in the output's
dtype may carry. Headless: nothing here imports textual."""
