"""Reusable widgets of the operator screen."""
