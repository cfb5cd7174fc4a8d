"""Long storms (soaks) with the same engine and checker as the quick storms of the tests.

    .venv/bin/python bench/soak/soak.py crash            # ≈6,000 jobs, a kill every 2 s for 60 s
    .venv/bin/python bench/soak/soak.py all --minutes 10 # every storm, each for ten minutes
    .venv/bin/python bench/soak/soak.py pause --jobs 20000 --window 600 --keep /tmp/soak

Run from the repository root. The database is ``$TENURE_TEST_DSN`` (a fresh
database is created on it and dropped afterwards), else an embedded server in
a temporary directory; the restart storm always starts its own. Figures go to
stdout and to ``artifacts/storms/soak-<storm>.json``; the exit status is 0 only
if every storm passed (``unknown`` counts as a failure). Histories, worker logs
and the receiver's decision log stay in ``--keep DIR`` if given.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.support.storm.storm import StormPlan, run_storm  # noqa: E402

from tenure._embedded import EmbeddedPostgres  # noqa: E402
from tenure._store import migrate  # noqa: E402

STORMS = ("crash", "pause", "network", "restarts", "skew")
SKEWS = {"w1": ("+30s", True), "w2": ("-30s", True), "w3": ("+0 x1.5", False)}


def plan_for(name: str, jobs: int, window: float, seed: int) -> StormPlan:
    """The soak version of a storm: ``jobs`` spread over ``window`` seconds of faults."""
    plan = StormPlan(
        f"soak-{name}",
        name,
        jobs=jobs,
        enqueue_seconds=window * 0.95,
        fault_seconds=window,
        drain_timeout=max(120.0, window, jobs / 10.0),
        seed=seed,
    )
    if name == "network":
        plan.proxies = True
    if name == "restarts":
        plan.single_enqueue = True
        plan.restart_modes = ("immediate", "immediate", "fast", "immediate") * max(
            1, int(window // 60)
        )
    if name == "skew":
        plan.skews = dict(SKEWS)
        plan.pause_leases = (1.2, 2.0)
    return plan


@contextmanager
def private_dir(keep: Path | None, name: str) -> Iterator[Path]:
    if keep is not None:
        path = keep / name
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o755)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix=f"tenure-soak-{name}-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def database(root: Path) -> Iterator[str]:
    """A fresh database on $TENURE_TEST_DSN, or an embedded server's own."""
    given = os.environ.get("TENURE_TEST_DSN")
    if not given:
        server = EmbeddedPostgres(root / "shared-pg", port=5434)
        try:
            yield server.start()
        finally:
            server.stop()
        return
    name = f"tenure_soak_{secrets.token_hex(4)}"
    with psycopg.connect(given, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    params = conninfo_to_dict(given)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)  # type: ignore[arg-type]
    finally:
        with psycopg.connect(given, autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)
                )
            )


def schema(dsn: str, prefix: str) -> str:
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(name)))
    params = conninfo_to_dict(dsn)
    params["options"] = f"-c search_path={name}"
    return make_conninfo(**params)  # type: ignore[arg-type]


def soak(name: str, plan: StormPlan, shared: str, root: Path) -> bool:
    receiver = schema(shared, "r")
    common = {
        "receiver_dsn": receiver,
        "workdir": root / name,
        "cwd": REPO_ROOT,
        "artifacts": REPO_ROOT / "artifacts" / "storms",
    }
    if name == "restarts":
        data = root / "restart-pg"
        data.mkdir(exist_ok=True)
        os.chmod(data, 0o755)
        server = EmbeddedPostgres(data / "data", port=5435)
        dsn = server.start()
        try:
            migrate(dsn)
            result = run_storm(plan, tenure_dsn=dsn, server=server, **common)  # type: ignore[arg-type]
        finally:
            server.stop()
    else:
        tenure = schema(shared, "t")
        migrate(tenure)
        result = run_storm(plan, tenure_dsn=tenure, **common)  # type: ignore[arg-type]
    print(f"storm {plan.name}:\n{result.table()}", flush=True)
    for violation in result.report.violations[:20]:
        print(f"  ! {violation}")
    for gap in result.report.uncovered:
        print(f"  ? {gap}")
    print(f"  figures: {result.artifact}", flush=True)
    return result.report.verdict == "pass"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("storm", choices=[*STORMS, "all"])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds of faults")
    parser.add_argument("--minutes", type=float, help="shorthand for --window in minutes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep histories and logs under this dir")
    args = parser.parse_args()
    # The producer's pool reports every failed reconnect during the restarts; expected.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    window = args.minutes * 60 if args.minutes else args.window
    jobs = args.jobs if not args.minutes else int(args.jobs * window / 60)
    names = STORMS if args.storm == "all" else (args.storm,)
    ok = True
    with private_dir(args.keep, "soak") as root, database(root) as shared:
        for name in names:
            ok &= soak(name, plan_for(name, jobs, window, args.seed), shared, root)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
