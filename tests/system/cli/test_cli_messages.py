"""What the command says when a newcomer gets something wrong, as a real subprocess shows it.

The tutorial's tool is ``fetch_statement(ctx, invoice_id: str)``, in ``myapp.py``.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_tenure
from tests.support.docs import example

from tenure import App


def _myapp(directory: Path) -> Path:
    """The tutorial's module, saved as the reader saves it."""
    (directory / "myapp.py").write_text(example("tutorial").code, encoding="utf-8")
    return directory


def test_a_payload_that_does_not_fit_shows_every_problem(tenure_dsn: str, tmp_path: Path) -> None:
    """Issue 22, item 7: the command printed the first line only, ending in a colon."""
    work = _myapp(tmp_path)
    payload = '{"invoice_id": 42, "region": "eu"}'
    command = ["enqueue", "myapp:app", "fetch_statement", payload]
    done = run_tenure(command, dsn=tenure_dsn, cwd=work)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "Traceback" not in err and done.stdout == b""
    head, *problems = err.splitlines()
    assert head == "tenure: error: payload does not fit tool 'fetch_statement' (2 problems):"
    assert problems == [
        "  invoice_id: Input should be a valid string (got 42)",
        "  region: Extra inputs are not permitted (got 'eu')",
    ]
    app = App(tenure_dsn)
    try:
        assert app.sync.admin.jobs() == []  # nothing was queued
    finally:
        app.close()


def test_a_mistyped_app_names_what_is_missing_and_what_is_there(tmp_path: Path) -> None:
    """Issue 22, item 15: ``myapp:ap`` said "is not a tenure.App (found NoneType)"."""
    work = _myapp(tmp_path)
    (work / "two.py").write_text(
        "import tenure\n\nprimary = tenure.App()\nreplica = tenure.App()\nlimit = 5\n"
    )
    cases = {
        "myapp:ap": "myapp has no attribute 'ap' (its tenure.App objects: app); "
        "did you mean myapp:app?",
        "two:limit": "two.limit is of type int, not a tenure.App "
        "(its tenure.App objects: primary, replica)",
        "json:loads": "json.loads is of type function, not a tenure.App "
        "(json defines no tenure.App at its top level)",
    }
    for target, said in cases.items():
        done = run_tenure(["worker", target], cwd=work)
        assert done.returncode == 1
        assert done.stderr.decode() == f"tenure: error: {said}\n"
