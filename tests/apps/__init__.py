"""Tool apps that tests run in real worker processes (``python -m tenure worker ...``)."""
