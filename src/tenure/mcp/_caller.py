"""Who is calling: the scope every key, task and job of one MCP caller lives in.

A caller's jobs are queued under a tenant, keys are unique per tenant, and quotas and the
fair share of the queue are per tenant. The caller is, in this order:

1. a principal (`_auth`): authenticated by a bearer token, or named for the process
   (``tenure mcp --principal``, stdio) — tenant ``mcp:principal:NAME`` (a token's
   principal from another verifier: ``mcp:user:<digest>``). The same on every
   connection, replica and restart: a key names the same job, a task id the same task,
   and ``app.quota("mcp:*", N)`` caps the principal, however many sessions it opens;
2. else a connection without a principal (a stdio or in-memory connection, a stateful
   HTTP session): scope ``session``. Its jobs go to the one tenant ``mcp:anonymous``
   that every caller without a principal shares (so a quota caps them together, and
   opening sessions gains no share), and its keys and task ids are its connection's
   (``mcp:<connection>:key:K``): a repeated key finds its job on that connection only,
   and the reply says so (``_meta["tenure/job"].scope``);
3. else a stateless request without a principal (2026-07-28 over HTTP, a stateless
   server): scope ``request``. Nothing can name its job again, so a call with a key is
   refused (running it would silently run a repeated key twice), and so is a task; a
   plain call without a key runs, in ``mcp:anonymous``.

Digests, not names, for connections: a session id is a live credential and must not sit
in a column that operators read.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from typing import Literal

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, RequestParamsMeta

from .._app import MAX_KEY_LENGTH
from .._job import Job
from ._auth import named_tenant, principal_tenant
from ._wire import Ctx, Wire, digest

KEY_META = "idempotencyKey"  # the request `_meta` entry a client names its own key with
MAX_CLIENT_KEY = 400  # the rest of MAX_KEY_LENGTH is tenure's prefix
ANONYMOUS = "mcp:anonymous"  # the tenant of every caller without a principal
MAX_SHOWN_ID = 64  # a longer (or unprintable) request id is keyed by its digest

Scope = Literal["principal", "session", "request"]

assert len("mcp::key:") + 32 + MAX_CLIENT_KEY <= MAX_KEY_LENGTH


@dataclass(frozen=True, slots=True)
class Channel:
    """What the server's lifespan yields: one per stdio or in-memory connection."""

    id: str = field(default_factory=lambda: secrets.token_hex(16))


@dataclass(frozen=True, slots=True)
class Caller:
    """``tenant``: where the caller's jobs live; ``channel``: the connection its request
    ids (and, without a principal, its keys and tasks) are scoped to; ``scope``: which of
    the three kinds of caller (see the module docstring)."""

    tenant: str
    channel: str | None
    scope: Scope

    @property
    def returns(self) -> bool:
        """Whether this caller can come back for a job (by key or task id)."""
        return self.scope != "request"

    @property
    def id_scope(self) -> str:
        """What its task ids are bound to: the principal, or the connection."""
        return self.tenant if self.scope == "principal" else f"{self.tenant}\0{self.channel}"

    @property
    def _prefix(self) -> str:
        return f"mcp:{self.channel}:"

    def owns(self, job: Job) -> bool:
        """Whether ``job`` is one of this caller's."""
        if job.tenant != self.tenant or self.scope == "request":
            return False
        return self.scope == "principal" or job.idempotency_key.startswith(self._prefix)

    def job_key(self, ctx: Ctx, meta: RequestParamsMeta | None) -> str:
        """The call's idempotency key: the client's own (``_meta.idempotencyKey``) in the
        caller's scope, else its connection and request id (a request the client repeats
        finds its job), else random. MCPError for a key it cannot honour."""
        given = (meta or {}).get(KEY_META)
        if given is not None:
            if not isinstance(given, str) or not 1 <= len(given) <= MAX_CLIENT_KEY:
                raise MCPError(
                    INVALID_PARAMS,
                    f"_meta.{KEY_META} must be a string of 1-{MAX_CLIENT_KEY} printable characters",
                )
            if not given.isprintable():
                raise MCPError(INVALID_PARAMS, f"_meta.{KEY_META} must be printable characters")
            if self.scope == "request":
                raise MCPError(
                    INVALID_PARAMS,
                    f"_meta.{KEY_META} needs a principal on this wire: a stateless request "
                    "cannot be found again, so a repeated key would run twice. Call with a "
                    "bearer token that names you (tenure mcp --tokens), or without a key",
                )
            return f"mcp:key:{given}" if self.scope == "principal" else f"{self._prefix}key:{given}"
        if self.channel is not None and ctx.request_id is not None:
            rid = str(ctx.request_id)
            shown = rid if len(rid) <= MAX_SHOWN_ID and rid.isprintable() else digest(rid)
            return f"{self._prefix}call:{shown}"
        return f"mcp:auto:{uuid.uuid4()}"


def caller_of(ctx: Ctx, wire: Wire, principal: str | None) -> Caller:
    """The caller of request ``ctx`` on ``wire``; ``principal``: the process's own (stdio's
    ``--principal``), used when the transport authenticated none."""
    tenant = principal_tenant(ctx)
    if tenant is None and principal is not None:
        tenant = named_tenant(principal)
    if tenant is not None:
        return Caller(tenant, wire.channel, "principal")
    if wire.channel is not None:
        return Caller(ANONYMOUS, wire.channel, "session")
    return Caller(ANONYMOUS, None, "request")
