"""Screens: the token list, one token's operators, help."""
