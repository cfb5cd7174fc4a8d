"""The public surface is small and deliberate: __all__ lists exactly the public names."""

import types
import typing

import tenure
import tenure.fence


def _public(module: object) -> list[str]:
    """Public attributes, less submodules (``tenure.fence`` is reached as a module)."""
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )


def test_all_is_sorted_and_complete() -> None:
    assert tenure.__all__ == sorted(tenure.__all__)
    assert sorted(tenure.__all__) == _public(tenure)


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in tenure.__all__:
        value = getattr(tenure, name)
        assert value.__doc__, f"tenure.{name} has no docstring"
        assert value.__module__ == "tenure", f"tenure.{name} reports {value.__module__}"
        if isinstance(value, type):  # and its annotations still resolve (tenure._report_as_tenure)
            typing.get_type_hints(value, include_extras=True)


def test_fence_surface() -> None:
    names = tenure.fence.__all__
    assert len(set(names)) == len(names)
    assert sorted(names) == sorted([*_public(tenure.fence), *tenure.fence._LAZY])
    for name in names:
        assert getattr(tenure.fence, name) is not None


def test_the_fence_observer_is_exported_but_loaded_only_when_asked_for() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, tenure.fence; loaded = 'prometheus_client' in sys.modules; "
        "from tenure.fence import FenceObserver; "
        "print(loaded, 'prometheus_client' in sys.modules, FenceObserver.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "tenure.fence._observer"]


def test_telemetry_states_and_maintenance_surfaces() -> None:
    import tenure.maintenance
    import tenure.states
    import tenure.telemetry

    for module in (tenure.telemetry, tenure.states, tenure.maintenance):
        assert len(set(module.__all__)) == len(module.__all__)
        assert sorted(module.__all__) == _public(module)
    assert "job_claimed" in tenure.telemetry.EVENTS
    assert "WorkerInfo" in tenure.telemetry.__all__  # App.admin.workers' record
    assert "WorkerPrunerConfig" in tenure.maintenance.__all__
    assert "WorkerPrunerConfig" not in tenure.__all__  # services' settings stay out of the top
    for name in tenure.maintenance.__all__:
        value = getattr(tenure.maintenance, name)
        assert value.__module__ == "tenure.maintenance" and value.__doc__
        typing.get_type_hints(value, include_extras=True)
    assert tenure.telemetry.EVENTS["job_claimed"].kind == "job_claimed"
    assert tenure.states.has_ended("failed") and not tenure.states.has_ended("waiting")


def test_attach_hands_events_to_the_handler_until_detached() -> None:
    import logging

    from tenure._log import log_event
    from tenure.telemetry import Event, attach

    seen: list[Event] = []
    detach = attach(seen.append, kinds={"lease_expired"})
    try:
        log_event(logging.getLogger("t"), "lease_expired", job=7, token=3)
        log_event(logging.getLogger("t"), "job_claimed", job=8, token=4)
    finally:
        detach()
    log_event(logging.getLogger("t"), "lease_expired", job=9, token=5)
    assert [(e.kind, e.job, e.token) for e in seen] == [("lease_expired", 7, 3)]


def test_examples_import_only_public_names() -> None:
    """The examples are what users copy: nothing in them may reach into tenure's privates
    (or up out of their package, where a copy would not find it)."""
    import ast
    from pathlib import Path

    examples = Path(tenure.__file__).parent / "examples"
    offending: list[str] = []
    for path in sorted(examples.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
                upward = node.level > 1
            elif isinstance(node, ast.Import):
                names, upward = [a.name for a in node.names], False
            else:
                continue
            parts = [p for name in names for p in name.split(".")]
            if upward or any(p.startswith("_") and p != "__future__" for p in parts):
                offending.append(f"{path.name}:{node.lineno}")
    assert offending == []


def test_every_coroutine_of_the_app_and_its_admin_has_a_generated_blocking_twin() -> None:
    """``app.sync`` mirrors the App's coroutines and ``app.sync.admin`` its admin's, by the
    same names and signatures, generated (not written a second time)."""
    import inspect

    from tenure._app import Admin, Client, SyncAdmin, SyncApp

    pairs = ((Client, SyncApp), (Admin, SyncAdmin))
    for async_face, sync_face in pairs:
        coroutines = {
            name
            for name, member in vars(async_face).items()
            if not name.startswith("_") and inspect.iscoroutinefunction(member)
        }
        assert coroutines, async_face
        twins = {name for name in vars(sync_face) if not name.startswith("_")}
        assert coroutines == twins, (async_face.__name__, coroutines ^ twins)
        for name in coroutines:
            twin = vars(sync_face)[name]
            assert twin.__wrapped__ is vars(async_face)[name], f"{name} is written by hand"
            assert inspect.signature(twin) == inspect.signature(vars(async_face)[name]).replace(
                return_annotation=inspect.signature(twin).return_annotation
            )
    assert {"enqueue", "wait", "answer_waitpoint"} <= set(vars(SyncApp))
    assert {"jobs", "doctor", "migrate", "retry_many"} <= set(vars(SyncAdmin))


def test_the_app_is_a_small_face_over_its_parts() -> None:
    """App's public names: registration, the client's coroutines, the lifecycle and its
    three parts (``registry``, ``admin``, ``sync``); no ``*_sync`` twins, no operator
    reads. The count is the one issue 23 closed with (it was 74 on the class)."""
    from tenure import App

    app = App("host=127.0.0.1 dbname=x", migrate=False)
    names = {n for n in dir(app) if not n.startswith("_")}
    assert not [n for n in names if n.endswith("_sync")]
    assert {"registry", "admin", "sync", "enqueue", "answer_waitpoint", "tool"} <= names
    assert not names & {"list_jobs", "search_jobs", "doctor", "complete_waitpoint", "summary"}
    assert len(names) == 33, sorted(names)
    assert App.__module__ == "tenure"
