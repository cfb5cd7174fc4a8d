"""`tenure dashboard`: ownership at a glance, live, in a browser (Starlette + uvicorn).

Server-rendered HTML plus a small script that polls a JSON endpoint for fresh
fragments and shrinks the lease bars between polls. No build step, no CDN.

Access. Without an access token the dashboard is read-only and binds only to a
loopback address (`check_bind` refuses anything else). With one, every page
asks for it once (a signed, HttpOnly, SameSite=Strict session cookie follows,
valid until logout or twelve hours), /metrics and the JSON endpoints also take
``Authorization: Bearer <token>``, and cancel/retry are enabled — each form
carries a CSRF token bound to the session. Either way every request must name
this server in its Host header (`HostCheck`): DNS rebinding cannot turn a
visited page into a reader of a loopback dashboard; and a request a browser
sends from another origin is refused on every bind (`OriginCheck`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from importlib import resources
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from .._app import Admin, App
from .._errors import (
    ConfigError,
    Conflict,
    InvalidSearch,
    JobAlreadyEnded,
    JobNotFound,
    PayloadError,
    PermissionDenied,
    PolicyError,
    StoreError,
)
from .._observe._http import (
    HostCheck,
    MetricsState,
    OriginCheck,
    ServerThread,
    allowed_names,
    bounded_dsn,
    is_loopback,
    metrics_endpoint,
    parse_host,
    store_lifespan,
)
from .._observe._metrics import DatabaseGauges, ToolLabels
from .._payload import MAX_PAYLOAD_BYTES, decode
from . import _explorer, _pages, _picture, _queues_page, _run_page, _workers_page

TOKEN_ENV = "TENURE_DASHBOARD_TOKEN"  # noqa: S105 - the variable's name, not a secret
MIN_TOKEN = 16
SESSION_COOKIE = "tenure_session"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000  # live sign-ins kept; past it the oldest must sign in again
MAX_JOB_ID = 2**63 - 1  # a bigint; a larger id names no job
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 - names, not a bind
MAX_FORM_BYTES = 4096
MAX_FORM_FIELDS = 10
MAX_BULK_FORM_BYTES = 8192  # a bulk form: its CSRF token, its action, up to MAX_BULK ids
MAX_WAITPOINT_TOKEN = 200
METRICS_CONNECTIONS = 1
READ_TIMEOUT_MS = 2000  # each statement a page reads, at most
RUNNING_LIMIT = 200
EVENTS_LIMIT = 40
RUNS_LIMIT = 10  # on the overview
RUNS_PAGE = 100  # on /pipelines
CHART_WINDOW = 15 * 60.0
CHART_BUCKET = 30.0
CHART_CAP = 100_000
CHART_TTL = 5.0
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer makes Chromium send `Origin: null`
    "Cache-Control": "no-store",
}


def check_bind(
    host: str,
    token: str | None,
    allowed_hosts: Sequence[str] = (),
    *,
    what: str = "the dashboard",
    env: str = TOKEN_ENV,
    exposes: str = "read the journal",
) -> None:
    """Refuse to serve beyond this machine without an access token (and weak tokens),
    and allowed-host entries that are not host names. (The MCP server's rule too.)"""
    allowed_names(allowed_hosts)
    if token is not None and len(token) < MIN_TOKEN:
        raise ConfigError(f"{what}'s access token must be at least {MIN_TOKEN} characters")
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve {what} on {host}: anyone who can reach it could {exposes}. "
            f"Set {env} (at least {MIN_TOKEN} characters) or bind 127.0.0.1"
        )


def same_secret(given: str | bytes, expected: str | bytes) -> bool:
    """Constant-time equality of the bytes (`compare_digest` refuses non-ASCII text)."""
    return hmac.compare_digest(_utf8(given), _utf8(expected))


def _utf8(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


class _Sessions:
    """Sessions: the cookie is ``sid.mac``, signed with a secret that dies with the server,
    and valid only while ``sid`` is live here — so logging out really ends it.

    The live set is bounded (MAX_SESSIONS; only a correct token adds to it) and each
    entry expires SESSION_SECONDS after sign-in on the monotonic clock.
    """

    def __init__(self, token: str | None, *, seconds: float = SESSION_SECONDS) -> None:
        self.token = token
        self._seconds = seconds
        self._secret = secrets.token_bytes(32)
        self._live: dict[str, float] = {}  # sid -> monotonic expiry, oldest first

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        now = time.monotonic()
        for sid in [sid for sid, until in self._live.items() if until <= now]:
            del self._live[sid]
        while len(self._live) >= MAX_SESSIONS:
            del self._live[next(iter(self._live))]
        sid = secrets.token_urlsafe(18)
        self._live[sid] = now + self._seconds
        return f"{sid}.{self._mac('session', sid)}"

    def session(self, request: Request) -> str | None:
        """The request's live session id, if any."""
        sid, _, mac = request.cookies.get(SESSION_COOKIE, "").rpartition(".")
        if not sid or not same_secret(mac, self._mac("session", sid)):
            return None
        until = self._live.get(sid)
        if until is None or until <= time.monotonic():
            self._live.pop(sid, None)
            return None
        return sid

    def revoke(self, sid: str) -> None:
        self._live.pop(sid, None)

    def csrf(self, sid: str | None) -> str | None:
        return None if sid is None else self._mac("csrf", sid)

    def bearer(self, request: Request) -> bool:
        if self.token is None:
            return False
        given = request.headers.get("authorization", "").encode("latin-1")  # the raw bytes
        return same_secret(given, f"Bearer {self.token}")

    def is_token(self, given: str) -> bool:
        return self.token is not None and same_secret(given, self.token)

    def allowed(self, request: Request) -> bool:
        return self.token is None or self.bearer(request) or self.session(request) is not None


async def _form(request: Request) -> dict[str, str]:
    """The fields of a small urlencoded form (our forms have one to three short fields);
    a bigger body is not read past the cap, and any form we cannot read is empty."""
    fields = await _fields(request, MAX_FORM_BYTES, MAX_FORM_FIELDS)
    return {name: values[0] for name, values in fields.items()}


async def _fields(request: Request, max_bytes: int, max_fields: int) -> dict[str, list[str]]:
    """Every value of every field of a urlencoded form, within the caps (else none)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            return {}
    try:
        return parse_qs(body.decode("latin-1"), max_num_fields=max_fields)
    except ValueError:  # too many fields
        return {}


class _Guard(BaseHTTPMiddleware):
    """Authentication for everything but the login page and static files; security headers."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        sessions: _Sessions = request.app.state.sessions
        path = request.url.path
        if (
            path.startswith(("/static/", "/waitpoints/"))  # a waitpoint's token is its own key
            or path == "/login"
            or sessions.allowed(request)
        ):
            response = await call_next(request)
        elif path.startswith(("/api/", "/metrics")) or request.method != "GET":
            response = JSONResponse({"error": "access token required"}, status_code=401)
        else:
            target = path + (f"?{request.url.query}" if request.url.query else "")
            response = RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        response.headers.update(SECURITY_HEADERS)
        return response


class _Charts:
    """The outcome charts' data, read at most every CHART_TTL seconds whoever polls."""

    def __init__(self) -> None:
        self._at = 0.0
        self._html = ""
        self._lock = asyncio.Lock()

    async def render(self, admin: Admin) -> str:
        async with self._lock:
            if time.monotonic() - self._at > CHART_TTL:
                rows = await admin.outcomes(
                    round(CHART_WINDOW * 1000), round(CHART_BUCKET * 1000), CHART_CAP
                )
                self._html = _pages.charts(rows, CHART_WINDOW, CHART_BUCKET)
                self._at = time.monotonic()
            return self._html


def _reads(request: Request) -> Admin:
    """The admin the pages read through: the dashboard's own reading App's, every statement
    under READ_TIMEOUT_MS (a slow read cannot hang a page)."""
    admin: Admin = request.app.state.reads
    return admin


async def _overview_fragments(request: Request) -> dict[str, str]:
    admin = _reads(request)
    running = await admin.held_leases(RUNNING_LIMIT)
    now = running[0]["db_now"] if running else await admin.database_time()
    return {
        "running": _pages.running_table(running, now),
        "waiting": _pages.waiting_table(await admin.open_waitpoints(RUNNING_LIMIT)),
        "events": _pages.events_table(await admin.notable_events(EVENTS_LIMIT), with_job=True),
        "charts": await request.app.state.charts.render(admin),
        "pipelines": _pages.pipelines_table(await admin.pipeline_runs(RUNS_LIMIT)),
    }


async def _pipelines_fragments(request: Request) -> dict[str, str]:
    return {"pipelines": _pages.pipelines_table(await _reads(request).pipeline_runs(RUNS_PAGE))}


async def pipelines_page(request: Request) -> Response:
    """Every pipeline run (the newest RUNS_PAGE), one table row each; graphs on run pages."""
    body = _pages.pipelines_body((await _pipelines_fragments(request))["pipelines"])
    return _html(request, "pipelines", body, "/api/pipelines")


async def pipelines_api(request: Request) -> Response:
    return JSONResponse(await _pipelines_fragments(request))


async def run_page(request: Request) -> Response:
    """One run: its graph, each stage box a link to its job."""
    run_id = request.path_params["run_id"]
    run = await _reads(request).pipeline_run(run_id)
    if run is None:
        return HTMLResponse(
            _pages.page("not found", f"<p>No run {run_id}.</p>", poll="", interval=0, csrf=None),
            status_code=404,
        )
    body = _pages.pipeline_run_body(run, _pages.pipeline_run(run))
    return _html(request, f"run {run_id}", body, f"/api/pipelines/{run_id}")


async def run_api(request: Request) -> Response:
    run = await _reads(request).pipeline_run(request.path_params["run_id"])
    if run is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    return JSONResponse({"run": _pages.pipeline_run(run), "run-state": _pages.h(run["state"])})


async def _job_fragments(request: Request, job_id: int) -> dict[str, str]:
    admin = _reads(request)
    job = await admin.job(job_id)
    sessions: _Sessions = request.app.state.sessions
    csrf = sessions.csrf(sessions.session(request))
    timeline = await admin.events(job_id)
    return {
        "summary": _pages.job_summary(job, csrf=csrf, can_act=csrf is not None),
        "picture": _picture.picture(job, timeline),
        "timeline": _pages.events_table(timeline, with_job=False),
    }


def _html(
    request: Request, title: str, body: str, poll: str, at_least: float = 0.0
) -> HTMLResponse:
    """A page polling ``poll`` every poll interval (or ``at_least`` seconds, if longer)."""
    sessions: _Sessions = request.app.state.sessions
    csrf = sessions.csrf(sessions.session(request))
    interval = max(request.app.state.poll_interval, at_least)
    return HTMLResponse(_pages.page(title, body, poll=poll, interval=interval, csrf=csrf))


async def overview(request: Request) -> Response:
    fragments = await _overview_fragments(request)
    return _html(request, "ownership", _pages.overview(fragments), "/api/overview")


async def overview_api(request: Request) -> Response:
    return JSONResponse(await _overview_fragments(request))


async def workers_page(request: Request) -> Response:
    data = await _workers_page.workers_data(_reads(request))
    body = _workers_page.workers_body(data["fragments"]["workers"])
    return _html(request, "workers", body, "/api/workers")


async def workers_api(request: Request) -> Response:
    return _json(await _workers_page.workers_data(_reads(request)))


async def queues_page(request: Request) -> Response:
    try:
        window = _queues_page.window_of(request.query_params.get("window"))
    except ConfigError as exc:
        return HTMLResponse(
            _pages.page(
                "queues", f'<p class="error">{_pages.h(exc)}</p>', poll="", interval=0, csrf=None
            ),
            status_code=400,
        )
    data = await request.app.state.queues.read(_reads(request), window)
    body = _queues_page.queues_body(data["fragments"]["queues"], window)
    # The figures change at most every TTL seconds: polling faster would fetch the same
    # day of per-minute series again and again.
    poll = f"/api/queues?window={window.name}"
    return _html(request, "queues", body, poll, at_least=_queues_page.TTL)


async def queues_api(request: Request) -> Response:
    try:
        window = _queues_page.window_of(request.query_params.get("window"))
    except ConfigError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return _json(await request.app.state.queues.read(_reads(request), window))


def _json(data: object) -> Response:
    """JSON with times as ISO strings (the records carry datetimes)."""
    return Response(json.dumps(data, default=_iso), media_type="application/json")


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _job_id(request: Request) -> int:
    """The path's job id; one past a bigint names no job (JobNotFound, never a 500)."""
    job_id: int = request.path_params["job_id"]
    if job_id > MAX_JOB_ID:
        raise JobNotFound(f"no job {job_id}")
    return job_id


async def job_page(request: Request) -> Response:
    job_id = request.path_params["job_id"]
    try:
        fragments = await _job_fragments(request, _job_id(request))
    except JobNotFound:
        return HTMLResponse(
            _pages.page("not found", f"<p>No job {job_id}.</p>", poll="", interval=0, csrf=None),
            status_code=404,
        )
    notice = NOTICES.get(request.query_params.get("done", ""))
    body = _pages.job_page(job_id, fragments, notice)
    return _html(request, f"job {job_id}", body, f"/api/jobs/{job_id}")


async def job_api(request: Request) -> Response:
    try:
        return JSONResponse(await _job_fragments(request, _job_id(request)))
    except JobNotFound:
        return JSONResponse({"error": "no such job"}, status_code=404)


async def durable_run_page(request: Request) -> Response:
    """A durable run's steps on one time axis, its tools' jobs, its totals (_run_page)."""
    job_id = request.path_params["job_id"]
    try:
        fragments = await _run_page.run_fragments(_reads(request), _job_id(request))
    except JobNotFound:
        return HTMLResponse(
            _pages.page("not found", f"<p>No job {job_id}.</p>", poll="", interval=0, csrf=None),
            status_code=404,
        )
    return _html(
        request, f"run {job_id}", _run_page.run_body(job_id, fragments), f"/api/runs/{job_id}"
    )


async def durable_run_api(request: Request) -> Response:
    try:
        return JSONResponse(await _run_page.run_fragments(_reads(request), _job_id(request)))
    except JobNotFound:
        return JSONResponse({"error": "no such job"}, status_code=404)


def _tenure(request: Request) -> App:
    """The App whose client and admin every action goes through (the pages read through
    the dashboard's own reading App, `_reads`)."""
    app: App = request.app.state.tenure
    return app


async def _cancel(app: App, job_id: int) -> str:
    try:
        await app.cancel(job_id)
    except JobAlreadyEnded:
        return "not-cancelled"
    return "cancelled"


async def _retry(app: App, job_id: int) -> str:
    try:
        await app.admin.retry(job_id)
    except PolicyError:
        return "not-retried"
    return "retried"


ACTIONS: dict[str, Callable[[App, int], Awaitable[str]]] = {"cancel": _cancel, "retry": _retry}
# A bulk action's outcome per job (`Admin.cancel_many`, `Admin.retry_many`) as a notice.
BULK_NOTICES = {"ended": "not-cancelled", "not-failed": "not-retried"}
# What an action's redirect may say; the page shows these texts, never the query string.
NOTICES = {
    "cancelled": "Cancelled: a running call was told to stop at once.",
    "not-cancelled": "Not cancelled: the job had already ended.",
    "retried": "Queued again with one more attempt.",
    "not-retried": "Not retried: only failed or cancelled jobs are retried.",
}


def _refused(request: Request, form: dict[str, str]) -> Response | None:
    """Why an action may not run (403), or None: it needs an access token, a session and
    the session's CSRF token in the form (a cross-origin request never gets this far)."""
    sessions: _Sessions = request.app.state.sessions
    if sessions.token is None:
        return JSONResponse(
            {"error": f"actions need an access token: start the dashboard with {TOKEN_ENV}"},
            status_code=403,
        )
    expected = sessions.csrf(sessions.session(request))
    given = form.get("csrf", "")
    if expected is None or not same_secret(given, expected):
        return JSONResponse({"error": "CSRF check failed"}, status_code=403)
    return None


async def job_action(request: Request) -> Response:
    """Cancel or retry: a session, its CSRF token and a same-origin request, or 403."""
    refused = _refused(request, await _form(request))
    if refused is not None:
        return refused
    job_id = request.path_params["job_id"]
    action = request.path_params["action"]
    if action not in ACTIONS:
        return JSONResponse({"error": "unknown action"}, status_code=404)
    try:
        done = await ACTIONS[action](_tenure(request), _job_id(request))
    except JobNotFound:
        return JSONResponse({"error": "no such job"}, status_code=404)
    return RedirectResponse(f"/jobs/{job_id}?done={done}", status_code=303)


async def jobs_page(request: Request) -> Response:
    """The explorer: filters, a page of jobs, the next page's link, bulk actions."""
    query = dict(request.query_params)
    sessions: _Sessions = request.app.state.sessions
    csrf = sessions.csrf(sessions.session(request))
    try:
        search = _explorer.search_from(query)
    except InvalidSearch as exc:
        body = _explorer.explorer(query, None, error=str(exc), csrf=csrf, can_act=False)
        page = _pages.page("jobs", body, poll="", interval=0, csrf=csrf)
        return HTMLResponse(page, status_code=400)
    found = await _reads(request).search_page(search)
    body = _explorer.explorer(query, found, error=None, csrf=csrf, can_act=csrf is not None)
    return _html(request, "jobs", body, "")


async def jobs_api(request: Request) -> Response:
    """The explorer as JSON: ``{"jobs": [...], "next_cursor": ...}``, or 400 and why."""
    try:
        search = _explorer.search_from(dict(request.query_params))
    except InvalidSearch as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    found = await _reads(request).search_page(search)
    return JSONResponse(_explorer.listing_json(found))


async def jobs_bulk(request: Request) -> Response:
    """Cancel or retry the selected jobs, each through the job page's own action, and say
    per job what happened (a job that had ended, or is gone, is named with the reason)."""
    fields = await _fields(request, MAX_BULK_FORM_BYTES, _explorer.MAX_BULK + 4)
    refused = _refused(request, {name: values[0] for name, values in fields.items()})
    if refused is not None:
        return refused
    action = (fields.get("action") or [""])[0]
    if action not in ACTIONS:
        return JSONResponse({"error": "unknown action"}, status_code=404)
    try:
        ids = _explorer.bulk_ids(fields.get("job", []))
    except InvalidSearch as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    admin = _tenure(request).admin
    outcomes = await (admin.cancel_many if action == "cancel" else admin.retry_many)(ids)
    results: list[tuple[int, str, bool]] = []
    for job_id, outcome in outcomes.items():
        if outcome == "missing":
            results.append((job_id, "No such job.", False))
            continue
        done = BULK_NOTICES.get(outcome, outcome)
        results.append((job_id, NOTICES[done], not done.startswith("not-")))
    return _html(request, f"bulk {action}", _explorer.bulk_result(action, results), "")


async def answer_waitpoint(request: Request) -> Response:
    """``POST /waitpoints/{token}`` with a JSON answer: a webhook (a carrier, a signing
    service, a person's "approve" button) resumes the job that waits there. The token,
    handed out by the waiting tool, is the only key it needs; it answers once (409 after)."""
    token = request.path_params["token"]
    if not 1 <= len(token) <= MAX_WAITPOINT_TOKEN or not token.isascii():
        return JSONResponse({"error": "no open waitpoint has this token"}, status_code=409)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_PAYLOAD_BYTES:
            return JSONResponse({"error": "the answer is too large"}, status_code=413)
    try:
        job = await _tenure(request).answer_waitpoint(token, decode(body, "the answer"))
    except PayloadError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    except Conflict:
        return JSONResponse({"error": "no open waitpoint has this token"}, status_code=409)
    return JSONResponse({"job": job.id, "state": job.state})


async def _store_refused(request: Request, exc: Exception) -> Response:
    """A statement the database refused or never answered: a status that says which, never
    a 500 with a traceback. Under a role that may only read (docs: operations/roles.md),
    cancel, retry and the waitpoint webhook are 403: nothing was written."""
    if isinstance(exc, PermissionDenied):
        return JSONResponse(
            {"error": "this dashboard's database role may only read: nothing was changed"},
            status_code=403,
        )
    if isinstance(exc, StoreError) and exc.verdict != "fail":
        return JSONResponse({"error": "the database did not answer; try again"}, status_code=503)
    return JSONResponse({"error": f"the database refused: {exc}"}, status_code=500)


def _safe_next(value: str) -> str:
    """Only same-site paths after login (never an open redirect).

    Browsers read ``/\\host`` as ``//host`` and drop tabs and newlines from URLs, so
    only a plain path of printable ASCII without backslashes, not starting ``//``, passes.
    """
    plain = value.isascii() and value.isprintable() and " " not in value and "\\" not in value
    return value if plain and value.startswith("/") and not value.startswith("//") else "/"


async def login(request: Request) -> Response:
    sessions: _Sessions = request.app.state.sessions
    if request.method == "GET":
        next_url = _safe_next(request.query_params.get("next", "/"))
        body = _pages.login_page(next_url, failed=False)
        return HTMLResponse(_pages.page("sign in", body, poll="", interval=0, csrf=None))
    form = await _form(request)
    next_url = _safe_next(form.get("next", "/"))
    token = form.get("token", "")
    if sessions.token is None:
        return RedirectResponse(next_url, status_code=303)
    if not sessions.is_token(token):
        await asyncio.sleep(0.5)  # a wrong guess costs time
        body = _pages.login_page(next_url, failed=True)
        page = _pages.page("sign in", body, poll="", interval=0, csrf=None)
        return HTMLResponse(page, status_code=403)
    response = RedirectResponse(next_url, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        sessions.issue(),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """End the session here, not just in the browser: a copy of its cookie stops working."""
    sessions: _Sessions = request.app.state.sessions
    sid = sessions.session(request)
    if sid is not None:
        form = await _form(request)
        expected = sessions.csrf(sid) or ""
        if not same_secret(form.get("csrf", ""), expected):
            return JSONResponse({"error": "CSRF check failed"}, status_code=403)
        sessions.revoke(sid)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response(status_code=404)
    text = resources.files("tenure._dashboard").joinpath("static", name).read_text("utf-8")
    return Response(text, media_type=STATIC[name])


def _lifespan(
    dsn: str, tenure: App, reading: App, owned: bool
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """/metrics' one-connection store (tenure._observe._http's, for its gauges); at the end
    the reading App's connections closed, and the App's too when the dashboard made it."""
    metrics = store_lifespan(dsn, METRICS_CONNECTIONS)

    @asynccontextmanager
    async def lifespan(board: Starlette) -> AsyncIterator[None]:
        async with metrics(board):
            try:
                yield
            finally:
                await reading.aclose()
                if owned:
                    await tenure.aclose()

    return lifespan


def create_dashboard(
    dsn: str,
    *,
    app: App | None = None,
    access_token: str | None = None,
    labels: ToolLabels | None = None,
    poll_interval: float = 1.0,
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """The dashboard as an ASGI app (serve it with `serve_dashboard`, or mount it yourself).

    It answers requests whose Host names the address they arrived on (plus
    ``localhost``/``127.0.0.1``/``[::1]`` on loopback) or one of ``allowed_hosts``
    (``name`` or ``name:port``): list the names a proxy or DNS gives it.

    Cancel, retry and the waitpoint webhook go through ``app``'s client and admin (an
    App on ``dsn`` that never migrates, when not given); the pages read through the
    admin of an App of the dashboard's own on ``dsn``, every statement under
    READ_TIMEOUT_MS.
    """
    if access_token is not None and len(access_token) < MIN_TOKEN:
        raise ConfigError(f"the dashboard's access token must be at least {MIN_TOKEN} characters")
    allowed_names(allowed_hosts)  # now, not at the first request
    labels = labels or ToolLabels()
    tenure = app if app is not None else App(dsn, migrate=False)
    reading = App(bounded_dsn(dsn, READ_TIMEOUT_MS), migrate=False)
    board = Starlette(
        routes=[
            Route("/", overview),
            Route("/api/overview", overview_api),
            Route("/jobs", jobs_page),
            Route("/api/jobs", jobs_api),
            Route("/jobs/bulk", jobs_bulk, methods=["POST"]),
            Route("/workers", workers_page),
            Route("/api/workers", workers_api),
            Route("/queues", queues_page),
            Route("/api/queues", queues_api),
            Route("/pipelines", pipelines_page),
            Route("/api/pipelines", pipelines_api),
            Route("/pipelines/{run_id:int}", run_page),
            Route("/api/pipelines/{run_id:int}", run_api),
            Route("/jobs/{job_id:int}", job_page),
            Route("/runs/{job_id:int}", durable_run_page),
            Route("/api/runs/{job_id:int}", durable_run_api),
            Route("/api/jobs/{job_id:int}", job_api),
            Route("/jobs/{job_id:int}/{action}", job_action, methods=["POST"]),
            Route("/waitpoints/{token}", answer_waitpoint, methods=["POST"]),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/metrics", metrics_endpoint),
            Route("/static/{name}", static),
        ],
        middleware=[
            Middleware(HostCheck, allowed_hosts=allowed_hosts, headers=SECURITY_HEADERS),
            Middleware(OriginCheck, headers=SECURITY_HEADERS),
            Middleware(_Guard),
        ],
        lifespan=_lifespan(dsn, tenure, reading, owned=app is None),
        exception_handlers={StoreError: _store_refused},
    )
    board.router.redirect_slashes = False  # no URL of ours ends in "/", so none to redirect to
    board.state.tenure = tenure
    board.state.reads = reading.admin
    board.state.sessions = _Sessions(access_token)
    board.state.charts = _Charts()
    board.state.queues = _queues_page.QueueCharts()
    board.state.poll_interval = poll_interval
    board.state.metrics = MetricsState([], DatabaseGauges(labels, journal_counts=True))
    return board


def serve_dashboard(
    dsn: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    access_token: str | None = None,
    labels: ToolLabels | None = None,
    poll_interval: float = 1.0,
    allowed_hosts: Sequence[str] = (),
) -> ServerThread:
    """Check the bind, then serve the dashboard on a thread; ``.url`` says where.

    A bind to a name (``--host dash.internal``) also answers to that name.
    """
    check_bind(host, access_token, allowed_hosts)
    wildcard = host in WILDCARD_BINDS or is_loopback(host) or parse_host(host, None) is None
    named = [] if wildcard else [host]  # an address is matched as the one a request came to
    app = create_dashboard(
        dsn,
        access_token=access_token,
        labels=labels,
        poll_interval=poll_interval,
        allowed_hosts=[*allowed_hosts, *named],
    )
    server = ServerThread(app, host, port, name="tenure-dashboard")
    server.start()
    return server
