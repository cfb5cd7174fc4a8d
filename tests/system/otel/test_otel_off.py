"""Tracing is an extra, and off until asked for: the core install does not pull
OpenTelemetry, tenure does not import it, a job runs without it; `instrument` is explicit,
checked, and undone by `uninstrument`. FencedAuth sends ``traceparent`` only when on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import httpx
import pytest
from tests.integration.otel.spans import Traced

import tenure._log
import tenure.otel
from tenure import ConfigError, _intercept
from tenure.fence import FencedAuth

ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_the_core_install_does_not_pull_opentelemetry_and_the_test_extra_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if "opentelemetry" in d]
    extras = project["optional-dependencies"]
    assert extras["otel"] == ["opentelemetry-api>=1.30,<2"]
    assert "tenure[otel]" in extras["test"]
    assert "opentelemetry-sdk>=1.30,<2" in extras["test"]


def test_importing_tenure_does_not_import_opentelemetry() -> None:
    loaded = run_python(
        """
        import sys
        import tenure, tenure.fence, tenure.telemetry, tenure._cli, tenure._worker._worker
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert loaded == "[]"


def test_tenure_otel_without_opentelemetry_says_which_extra_to_install() -> None:
    said = run_python(
        """
        import sys
        sys.modules["opentelemetry.trace"] = None  # as if the extra were not installed
        try:
            import tenure.otel
        except ImportError as exc:
            print(exc)
        """
    )
    assert said == "tenure.otel needs OpenTelemetry's API: pip install 'tenure[otel]'"


def test_a_job_and_a_fenced_request_run_without_importing_opentelemetry(tenure_dsn: str) -> None:
    loaded = run_python(
        """
        import asyncio, os, sys
        import httpx
        from tenure import App, Context

        app = App(os.environ["DSN"])
        sent = []

        @app.tool(lease=5, heartbeat=1, jitter=1)
        async def post(ctx: Context) -> int:
            transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(201))
            async with httpx.AsyncClient(transport=transport) as client:
                response = await client.post("http://receiver/x", auth=ctx.http_auth("op"))
            return response.status_code

        async def main() -> None:
            worker = app.worker(poll_interval=0.05)
            task = asyncio.create_task(worker.run(handle_signals=False))
            job = await app.enqueue("post", {})
            assert await app.wait(job.id, timeout=20) == 201
            worker.stop()
            await task
            await app.aclose()

        asyncio.run(main())
        assert "traceparent" not in sent[0].headers and "x-execution-fence" in sent[0].headers
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """,
        DSN=tenure_dsn,
    )
    assert loaded == "[]"


def test_the_public_surface_is_instrument_uninstrument_and_is_instrumented() -> None:
    public = sorted(n for n in vars(tenure.otel) if not n.startswith("_"))
    assert tenure.otel.__all__ == public == ["instrument", "is_instrumented", "uninstrument"]
    for name in public:
        value = getattr(tenure.otel, name)
        assert value.__doc__ and value.__module__.startswith("tenure._")


def test_instrument_takes_a_tracer_provider_only() -> None:
    with pytest.raises(ConfigError, match="TracerProvider, got str"):
        tenure.otel.instrument(tracer_provider="console")  # type: ignore[arg-type]
    assert not tenure.otel.is_instrumented()


def test_uninstrument_removes_the_interceptor_and_the_event_handler() -> None:
    handlers = tenure._log._handlers
    before = _intercept.process_interceptors()  # a worker's metrics may have added theirs
    tenure.otel.instrument()
    tenure.otel.instrument()  # again: replaces, never doubles
    assert tenure.otel.is_instrumented() and len(_intercept.process_interceptors()) == 1 + len(
        before
    )
    assert len(tenure._log._handlers) == len(handlers) + 1
    tenure.otel.uninstrument()
    assert _intercept.process_interceptors() == before and tenure._log._handlers == handlers
    tenure.otel.uninstrument()  # idempotent
    assert not tenure.otel.is_instrumented()


class Source:
    """A FenceSource that is not a tenure Context."""

    def fence_headers(self, operation: str, **request: object) -> dict[str, str]:
        return {"Idempotency-Key": f"k:{operation}", "X-Execution-Fence": "7", "X-Fence-Scope": "k"}

    def ensure_owned(self) -> None:
        return None


def sent_headers(headers: dict[str, str] | None = None) -> httpx.Headers:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    transport = httpx.MockTransport(answer)
    with httpx.Client(transport=transport) as client:
        client.post("http://receiver/cases", headers=headers, auth=FencedAuth(Source(), "op"))
    return seen[0].headers


def test_fenced_auth_sends_the_current_span_with_the_fence(tracing: Traced) -> None:
    with tracing.tracer.start_as_current_span("tool") as span:
        headers = sent_headers()
        own = sent_headers({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    context = span.get_span_context()
    flags = int(context.trace_flags)
    assert (
        headers["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    )
    assert headers["x-execution-fence"] == "7"
    assert own["traceparent"] == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"  # the caller's wins
    outside = sent_headers()  # no current span: nothing to continue
    assert "traceparent" not in outside


def test_fenced_auth_sends_no_trace_headers_when_not_instrumented() -> None:
    assert not tenure.otel.is_instrumented()
    assert "traceparent" not in sent_headers()
