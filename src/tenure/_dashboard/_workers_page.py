"""The dashboard's workers page: who is alive, who went silent, and what each holds.

Read from the workers registry (`Admin.workers`: the leases are counted from the jobs
each worker owns, never stored twice). ``/api/workers`` returns the records and the page's
fragment, so a script, a curl or the page's own poll reads the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._app import Admin
from ..telemetry import WorkerInfo
from ._pages import h, seconds

WORKERS_LIMIT = 500


async def workers_data(admin: Admin) -> dict[str, Any]:
    """The records and the rendered fragment, for the page and ``/api/workers``."""
    workers = await admin.workers(limit=WORKERS_LIMIT)
    return {"workers": workers, "fragments": {"workers": workers_table(workers)}}


def workers_table(workers: Sequence[WorkerInfo]) -> str:
    if not workers:
        return '<p class="empty">no worker has registered</p>'
    counts = {
        s: sum(1 for w in workers if w["status"] == s) for s in ("alive", "silent", "stopped")
    }
    summary = " · ".join(f'<span class="worker-{s}">{n} {s}</span>' for s, n in counts.items())
    rows = "".join(_row(w) for w in workers)
    return (
        f'<p class="counts">{summary}</p>'
        '<table class="workers"><thead><tr><th>worker</th><th>status</th><th>leases held</th>'
        "<th>last seen</th><th>host</th><th>pid</th><th>version</th><th>concurrency</th>"
        f"<th>started</th><th>tools</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _row(w: WorkerInfo) -> str:
    held = str(w["leases_held"])
    if w["leases_expired"]:
        held += f' <span class="expired">({w["leases_expired"]} expired)</span>'
    # Only the owner is a link target: its leases show on the overview's held-lease table.
    return (
        f'<tr class="worker-{h(w["status"])}" data-worker="{h(w["name"])}">'
        f'<td class="name">{h(w["name"])}</td><td class="status">{h(w["status"])}</td>'
        f'<td class="held">{held}</td>'
        f'<td><span class="age" data-age="{w["seen_ago"]:.3f}">{seconds(w["seen_ago"])}</span>'
        f" ago</td><td>{h(w['host'])}</td><td>{w['pid']}</td><td>{h(w['version'])}</td>"
        f"<td>{w['concurrency']}</td><td>{h(w['started_at'].isoformat(timespec='seconds'))}</td>"
        f'<td class="tools">{h(", ".join(w["tools"]))}</td></tr>'
    )


def workers_body(fragment: str) -> str:
    return (
        '<section><h2>Workers</h2><p class="hint">each worker process registers at start; its '
        "heartbeat thread keeps it alive. Silent: not seen for three of its keep-alive "
        "periods (killed, paused or cut off): what it held stays running until another "
        "worker reclaims it after the lease expires.</p>"
        f'<div id="workers">{fragment}</div></section>'
    )
