"""The sending side for httpx: fence headers on, ownership checked, then send.

httpx runs an auth flow immediately before it writes the request, in both
``Client`` and ``AsyncClient``, which makes it the last point where a worker
can still decide not to act: ``ensure_owned()`` there closes the gap between
"I checked my lease" and "my request is on the wire" as far as a client can.
The receiver's fence stops whatever slips through that gap.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Protocol, Unpack, runtime_checkable

import httpx

from .._errors import StaleFence
from .._intercept import Interceptor, Interceptors
from .._log import log_event
from ._errors import RequestInProgress
from ._signing import KEY_HEADER, SentRequest

_log = logging.getLogger("tenure.fence")


@runtime_checkable
class FenceSource(Protocol):
    """Anything that can fence a request: tenure's Context, or a test double."""

    def fence_headers(self, operation: str, **request: Unpack[SentRequest]) -> dict[str, str]:
        """The Idempotency-Key, X-Execution-Fence, X-Fence-Scope (and signature) headers.

        A signing source signs the request's ``method``, ``path`` (URL) and ``body`` too.
        """
        ...

    def ensure_owned(self) -> None:
        """Raise an OwnershipError subclass unless an irreversible step may start now."""
        ...


class FencedAuth(httpx.Auth):
    """``client.post(url, json=..., auth=FencedAuth(ctx, "create_case"))``.

    The operation names the effect, so a retry of the same operation carries
    the same idempotency key. The signature (when the source has a key) covers
    the request's method, URL path and query and its body, which httpx reads
    before the flow runs (``requires_request_body``). Redirects are not
    re-checked: leave httpx's ``follow_redirects`` off (its default) for fenced
    calls. ``interceptors`` add headers of their own; with ``tenure.otel``
    instrumented, the current span's ``traceparent`` (and ``tracestate``) go along too,
    unless the request carries its own.
    """

    requires_request_body = True

    def __init__(
        self, source: FenceSource, operation: str, *, interceptors: Sequence[Interceptor] = ()
    ) -> None:
        if not operation:
            raise ValueError("a fenced request needs an operation name")
        self._source = source
        self._operation = operation
        self._interceptors = Interceptors(interceptors)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = self._source.fence_headers(
            self._operation, method=request.method, path=str(request.url), body=request.content
        )
        chain = self._interceptors.chain()
        if chain is not None:  # e.g. a traceparent: the receiver's spans join the sender's trace
            for name, value in chain.outgoing_headers().items():
                request.headers.setdefault(name, value)
        self._source.ensure_owned()  # last, so nothing slow runs between the check and the send
        request.headers.update(headers)
        _journal_start(self._source, self._operation, request)
        yield request


def _journal_start(source: FenceSource, operation: str, request: httpx.Request) -> None:
    """Emit tool_request_started: who sent which operation under which token, to which host.

    Never the body or the path (either may hold personal data); the idempotency key
    is tenure's own ``tool-job:{job}:{operation}``. A source that is not a tenure
    Context contributes what it has.
    """
    lease_left = getattr(source, "lease_remaining", None)
    log_event(
        _log,
        "tool_request_started",
        job=getattr(source, "job_id", None),
        token=getattr(source, "token", None),
        attempt=getattr(source, "attempt", None),
        tool=getattr(source, "tool", None),
        worker=getattr(source, "worker", None),
        operation=operation,
        key=request.headers.get(KEY_HEADER),
        method=request.method,
        host=request.url.host,
        lease_left=None if lease_left is None else round(lease_left, 3),
    )


def raise_for_fence(response: httpx.Response) -> None:
    """Turn a receiver's fence refusal into the typed error it stands for.

    A 409 ``stale_fence`` means a newer owner exists: the caller must stop, and
    tenure's worker abandons the attempt without writing anything. Other
    responses pass through untouched; check them as usual.
    """
    if response.status_code != 409:
        return
    try:
        body = response.json()
    except ValueError:
        return
    if isinstance(body, dict) and body.get("error") == "stale_fence":
        raise StaleFence(str(body.get("scope")), int(body["token"]), int(body["highest"]))
    if isinstance(body, dict) and body.get("error") == "in_progress":
        raise RequestInProgress("the receiver is still applying this idempotency key")
