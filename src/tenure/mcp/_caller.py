"""Who is calling: the scope that every key and job of one MCP caller lives in.

A caller's jobs are queued under a tenant of their own, and keys are unique per
tenant, so no caller can find, reuse or cancel another's job, whatever key it
sends. The caller is, in this order:

1. the authenticated principal, when the transport authenticated one (the SDK's
   bearer auth: its (client, issuer, subject), as the SDK itself binds request
   state) — tenant ``mcp:user:<digest>``, the same on every connection, so a
   client that reconnects finds the jobs its key names;
2. else the session: one stdio or in-process connection (the server's lifespan
   is entered once per connection there), or one stateful streamable-HTTP
   session (its ``Mcp-Session-Id``, which the SDK issued and checks against the
   credential that opened it) — tenant ``mcp:session:<digest>``;
3. else (stateless HTTP, the 2026-07-28 wire over HTTP) the request alone: a
   fresh random tenant, so nothing is shared, not even with the same client's
   next request.

Digests, not names: a session id is a live credential and must not sit in a
column that operators read.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.request_state import authenticated_principal
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, RequestParamsMeta
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request

from .._app import MAX_KEY_LENGTH
from ._sdk import Ctx

KEY_META = "idempotencyKey"  # the request `_meta` entry a client names its own key with
MAX_CLIENT_KEY = 400  # the rest of MAX_KEY_LENGTH is tenure's prefix
SESSION_HEADER = "mcp-session-id"
DIGEST_CHARS = 32  # 128 bits of SHA-256
REQUEST_TENANT = "mcp:request:"
MAX_SHOWN_ID = 64  # a longer (or unprintable) request id is keyed by its digest

assert len("mcp:key:") + MAX_CLIENT_KEY <= MAX_KEY_LENGTH


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True, slots=True)
class Channel:
    """What the server's lifespan yields: one per stdio or in-process connection."""

    id: str = field(default_factory=lambda: secrets.token_hex(16))


@dataclass(frozen=True, slots=True)
class Caller:
    """``tenant``: where the caller's jobs and keys live. ``channel``: the connection its
    request ids are unique on (None when stateless: there is nothing to address)."""

    tenant: str
    channel: str | None

    @property
    def returns(self) -> bool:
        """Whether this caller can come back for a job (False: a stateless request's)."""
        return not self.tenant.startswith(REQUEST_TENANT)


def caller_of(ctx: Ctx, server: Server[Any]) -> Caller:
    channel = _channel(ctx, server)
    principal = authenticated_principal(ctx)
    if principal is not None:
        return Caller(f"mcp:user:{_digest(principal)}", channel)
    if channel is not None:
        return Caller(f"mcp:session:{channel}", channel)
    return Caller(f"{REQUEST_TENANT}{secrets.token_hex(16)}", None)


def _channel(ctx: Ctx, server: Server[Any]) -> str | None:
    request = ctx.request
    if request is None:  # stdio or in-process: the lifespan is this connection's own
        lifespan = ctx.lifespan_context
        return lifespan.id if isinstance(lifespan, Channel) else None
    if not isinstance(request, Request) or ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None  # the 2026-07-28 wire has no sessions; an unknown transport gets none
    try:
        stateful = not server.session_manager.stateless
    except RuntimeError:  # a session manager we did not see built: its ids are unchecked
        stateful = False
    session = request.headers.get(SESSION_HEADER)
    return _digest(f"session:{session}") if stateful and session else None


def job_key(caller: Caller, ctx: Ctx, meta: RequestParamsMeta | None) -> str:
    """The call's idempotency key: the client's own (``_meta.idempotencyKey``), else its
    connection and request id (a request the client repeats finds its job), else random."""
    given = (meta or {}).get(KEY_META)
    if given is not None:
        if not isinstance(given, str) or not 1 <= len(given) <= MAX_CLIENT_KEY:
            raise MCPError(
                INVALID_PARAMS,
                f"_meta.{KEY_META} must be a string of 1-{MAX_CLIENT_KEY} printable characters",
            )
        if not given.isprintable():
            raise MCPError(INVALID_PARAMS, f"_meta.{KEY_META} must be printable characters")
        return f"mcp:key:{given}"
    if caller.channel is not None and ctx.request_id is not None:
        rid = str(ctx.request_id)
        shown = rid if len(rid) <= MAX_SHOWN_ID and rid.isprintable() else _digest(rid)
        return f"mcp:call:{caller.channel}:{shown}"
    return f"mcp:auto:{uuid.uuid4()}"
