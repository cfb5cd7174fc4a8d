#!/usr/bin/env bash
# One command for the whole bench:  bash bench/run.sh [--quick] [run.py options]
# Builds bench/.venv (tenure from this repo, pgqueuer[asyncpg] and procrastinate from PyPI,
# psutil and py-spy) on first use, then runs bench/run.py with the given options.
# PostgreSQL: $BENCH_ADMIN_DSN (default host=127.0.0.1 port=5432 user=postgres dbname=postgres);
# the bench creates its own database ($BENCH_DB, default tenure_bench) and drops it at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="$here/.venv"
python="${BENCH_PYTHON:-python3}"
stamp="$venv/.installed"
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$repo/pyproject.toml" -nt "$stamp" || "$here/requirements.txt" -nt "$stamp" ]]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
    if ! "$venv/bin/python" -m pip install -e "$repo" -r "$here/requirements.txt" \
            >"$venv/install.log" 2>&1; then
        cat "$venv/install.log" >&2
        echo "bench: installing the bench environment failed (log: $venv/install.log)" >&2
        exit 1
    fi
    touch "$stamp"
fi
exec "$venv/bin/python" "$here/run.py" "$@"
