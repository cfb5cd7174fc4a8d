"""What one bench run measures: sizes, systems, phases, where it writes (from run.py's options)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

# The workers run under the bench's own interpreter (bench/.venv), with its console scripts.
PY = sys.executable
BIN = Path(sys.executable).parent
BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
APPS = BENCH / "apps"
SYSTEMS = ("tenure", "pgqueuer", "procrastinate", "raw")


@dataclass
class Config:
    admin_dsn: str
    db: str
    quick: bool
    jobs: int
    procs: list[int]
    rounds: int
    pgq_batches: list[int]
    tenure_concurrency: int
    tenure_claim_batch: int
    tenure_log_levels: list[str]
    procr_concurrency: int
    procr_jobs: int
    raw_batch: int
    raw_extra_batches: list[int]
    latency_jobs: int
    hold_jobs: int
    hold_seconds: float
    hold_lease: float
    hold_heartbeat: float
    hold_jitter: float
    recovery_trials: int
    slow_lease: float
    slow_heartbeat: float
    slow_jitter: float
    bloat_rows: int
    bloat_jobs: int
    bloat_reps: int
    rss_jobs: int
    phases: list[str]
    systems: list[str]
    keep_db: bool
    out: Path
    tenure_src: str | None
    tenure_ref: str | None
    tenure_variants: list[tuple[str, str]]
    latency_nofsync: bool
    logs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.logs = self.out / "logs"

    @property
    def dsn(self) -> str:
        return psycopg.conninfo.make_conninfo(self.admin_dsn, dbname=self.db)

    @property
    def dsn_url(self) -> str:
        p = psycopg.conninfo.conninfo_to_dict(self.dsn)
        user = p.get("user", "postgres")
        password = f":{p['password']}" if p.get("password") else ""
        return (
            f"postgresql://{user}{password}@{p.get('host', '127.0.0.1')}:"
            f"{p.get('port', 5432)}/{self.db}"
        )
