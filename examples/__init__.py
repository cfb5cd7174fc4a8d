"""Runnable examples of tenure in use (not part of the installed package)."""
