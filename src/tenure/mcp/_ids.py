"""The ids an MCP caller holds for a job: a task's id, and the ``requestState`` of a call
that asked its caller a question. Made and read here only, so how they are derived can
change in one place.

An id is ``<job>.<MAC>``: HMAC-SHA256, under `App.derived_key` ``"mcp-task"``, of the job
and the caller's scope (its tenant, and for a caller without a principal its
connection), so it is unguessable, the same from every connection of a principal and
after a restart, and needs no table. Read strictly: ASCII digits (a ``²`` or a
full-width digit is not one), a job id that fits PostgreSQL's bigint, the MAC's exact
length; anything else names no job, and is never an error.
"""

from __future__ import annotations

import base64
import hmac

KEY_PURPOSE = "mcp-task"
MAC_CHARS = 32  # of base64url: 192 bits
MAX_JOB_DIGITS = 18  # below 2**63, whatever the digits
MAX_ID = MAX_JOB_DIGITS + 1 + MAC_CHARS


def make_id(key: bytes, scope: str, job_id: int) -> str:
    """The id of job ``job_id`` for the caller of ``scope``."""
    mac = hmac.new(key, f"mcp-task\0{scope}\0{job_id}".encode(), "sha256").digest()
    return f"{job_id}.{base64.urlsafe_b64encode(mac).decode()[:MAC_CHARS]}"


def job_of(task_id: object) -> int | None:
    """The job an id claims to name (not yet checked: see `same`), or None."""
    if not isinstance(task_id, str) or len(task_id) > MAX_ID or not task_id.isascii():
        return None
    job, dot, mac = task_id.partition(".")
    if not dot or len(mac) != MAC_CHARS or not job.isdigit() or len(job) > MAX_JOB_DIGITS:
        return None
    number = int(job)
    return number if number > 0 else None


def same(key: bytes, scope: str, job_id: int, task_id: str) -> bool:
    """Whether ``task_id`` is job ``job_id``'s id for the caller of ``scope``."""
    return hmac.compare_digest(make_id(key, scope, job_id), task_id)
