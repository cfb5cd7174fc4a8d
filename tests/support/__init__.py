"""Helpers shared by the test suite (fault injection, polling, a virtual clock)."""
