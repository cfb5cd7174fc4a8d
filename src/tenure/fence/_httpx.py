"""The sending side for httpx: fence headers on, ownership checked, then send.

httpx runs an auth flow immediately before it writes the request, in both
``Client`` and ``AsyncClient``, which makes it the last point where a worker
can still decide not to act: ``ensure_owned()`` there closes the gap between
"I checked my lease" and "my request is on the wire" as far as a client can.
The receiver's fence stops whatever slips through that gap.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol, runtime_checkable

import httpx

from .._errors import StaleFence
from ._errors import RequestInProgress


@runtime_checkable
class FenceSource(Protocol):
    """Anything that can fence a request: tenure's Context, or a test double."""

    def fence_headers(self, operation: str) -> dict[str, str]:
        """The Idempotency-Key, X-Execution-Fence, X-Fence-Scope (and signature) headers."""
        ...

    def ensure_owned(self) -> None:
        """Raise an OwnershipError subclass unless an irreversible step may start now."""
        ...


class FencedAuth(httpx.Auth):
    """``client.post(url, json=..., auth=FencedAuth(ctx, "create_case"))``.

    The operation names the effect, so a retry of the same operation carries
    the same idempotency key. Redirects are not re-checked: leave httpx's
    ``follow_redirects`` off (its default) for fenced calls.
    """

    def __init__(self, source: FenceSource, operation: str) -> None:
        if not operation:
            raise ValueError("a fenced request needs an operation name")
        self._source = source
        self._operation = operation

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = self._source.fence_headers(self._operation)
        self._source.ensure_owned()  # last, so nothing slow runs between the check and the send
        request.headers.update(headers)
        yield request


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
