"""Small builders for store-level tests."""

from tenure._payload import encode, fingerprint
from tenure._store import NewJob


def new_job(key: str, tool: str = "t", payload: object = None, attempts: int = 3) -> NewJob:
    text = encode(payload if payload is not None else {"key": key})
    return NewJob(tool, key, text, fingerprint(tool + "\n" + text), attempts)
