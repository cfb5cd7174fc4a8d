"""Structured log lines: ``event=job_claimed job=42 token=1043 ...``.

Lines carry ids, tokens, codes and durations only — never payloads, results
or error messages, which may hold personal data. ``TENURE_LOG_FORMAT=json``
switches to one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Protocol


class _JobLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def token(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def tool(self) -> str: ...


def _render(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def log_event(
    logger: logging.Logger,
    kind: str,
    *,
    job: _JobLike | None = None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """Emit one event line; `job` contributes id, token, attempt and tool."""
    if not logger.isEnabledFor(level):
        return
    record: dict[str, Any] = {"event": kind}
    if job is not None:
        record.update(job=job.id, token=job.token, attempt=job.attempt, tool=job.tool)
    record.update({k: v for k, v in fields.items() if v is not None})
    if os.environ.get("TENURE_LOG_FORMAT") == "json":
        logger.log(level, json.dumps(record, default=str, ensure_ascii=False))
    else:
        logger.log(level, " ".join(f"{k}={_render(v)}" for k, v in record.items()))
