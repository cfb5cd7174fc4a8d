"""The bench's phases, in the order they run and appear in the report.

throughput  n no-op jobs drained by idle workers, every system, 1 and 4 processes
latency     enqueue → tool start on an idle queue, every system
heartbeat   thousands of held leases in one tenure worker: statements, rows, CPU, WAL
recovery    SIGKILL of a job's owner → its start on another worker
bloat       claim throughput: empty table, 1M terminal rows, after a prune
rss         a tenure worker's memory, idle and with 1,000 running jobs
profile     py-spy of one tenure worker draining (top frames)
"""

from __future__ import annotations

from ..phase import Phase
from . import bloat, heartbeat, latency, profile, recovery, rss, throughput

ALL: tuple[Phase, ...] = (
    throughput.PHASE,
    latency.PHASE,
    heartbeat.PHASE,
    recovery.PHASE,
    bloat.PHASE,
    rss.PHASE,
    profile.PHASE,
)
NAMES = tuple(p.name for p in ALL)
