"""Principals: who is calling, named by the operator, so that a caller's keys, tasks, quota
and share of the queue outlive its connection, its session and the server process.

- stdio: ``tenure mcp --principal NAME`` (or ``TENURE_MCP_PRINCIPAL``): the host that
  starts the server is its one caller;
- HTTP: bearer tokens, each naming its principal, from a file (``--tokens FILE``) or the
  environment (``TENURE_MCP_TOKENS``): ``NAME=TOKEN`` entries separated by whitespace or
  newlines, ``#`` starting a comment line. `Principals` checks a token through the SDK's
  `TokenVerifier` surface (its bearer middleware calls it), comparing the token's SHA-256
  with every entry's in constant time (no early exit, no length leak), so the response
  time says nothing about which entry came close;
- or any other `TokenVerifier` of the SDK (an OAuth resource server's): its principal is
  the token's (client, issuer, subject), as the SDK itself binds request state.

A principal's name is the operator's (not a secret); tokens are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from pathlib import Path

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.request_state import authenticated_principal

from .._errors import ConfigError
from ._wire import digest

PRINCIPAL_ENV = "TENURE_MCP_PRINCIPAL"
TOKENS_ENV = "TENURE_MCP_TOKENS"
MIN_TOKEN = 16
MAX_TOKEN = 512
MAX_TOKENS = 10_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


def check_principal(name: object) -> str:
    """A principal's name: 1-64 of letters, digits and ``. _ @ -`` (it names a tenant)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            "a principal is 1-64 letters, digits, '.', '_', '@' or '-' (starting with a "
            f"letter or digit), got {name!r:.80}"
        )
    return name


class PrincipalToken(AccessToken):
    """The SDK's access token for a token of `Principals`: it carries its principal."""

    principal: str


class Principals:
    """Bearer tokens, each naming its principal: the SDK's `TokenVerifier` for them."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        """``tokens``: principal name → its token (at least 16 characters, no two alike)."""
        if not tokens:
            raise ConfigError("no MCP tokens given: at least one NAME=TOKEN entry is needed")
        if len(tokens) > MAX_TOKENS:
            raise ConfigError(f"at most {MAX_TOKENS} MCP tokens")
        seen: set[bytes] = set()
        self._entries: list[tuple[bytes, str]] = []
        for name, token in tokens.items():
            check_principal(name)
            if not isinstance(token, str) or not MIN_TOKEN <= len(token) <= MAX_TOKEN:
                raise ConfigError(
                    f"the MCP token of {name!r} must be {MIN_TOKEN}-{MAX_TOKEN} characters"
                )
            if not token.isprintable() or any(c.isspace() for c in token):
                raise ConfigError(f"the MCP token of {name!r} must be printable, without spaces")
            hashed = _hash(token)
            if hashed in seen:
                raise ConfigError("two principals share one MCP token; give each its own")
            seen.add(hashed)
            self._entries.append((hashed, name))

    @property
    def names(self) -> list[str]:
        return sorted(name for _, name in self._entries)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The principal's access token, or None: compared with every entry, in constant
        time whatever the token is."""
        given = _hash(token)
        found: str | None = None
        for hashed, name in self._entries:
            if hmac.compare_digest(given, hashed) and found is None:
                found = name
        if found is None:
            return None
        return PrincipalToken(token="", client_id=found, scopes=[], principal=found)


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """``NAME=TOKEN`` entries (whitespace or newlines between them, ``#`` comment lines)."""
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for entry in line.split():
            name, equals, token = entry.partition("=")
            if not equals:
                raise ConfigError(f"{source}, line {number}: expected NAME=TOKEN entries")
            check_principal(name)
            if name in tokens:
                raise ConfigError(f"{source}: principal {name!r} is named twice")
            tokens[name] = token
    return tokens


def tokens_from(path: str | None) -> Principals | None:
    """The principals of ``--tokens FILE``, else of ``TENURE_MCP_TOKENS``, else None."""
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the MCP tokens file {path}: {exc}") from None
        return Principals(parse_tokens(text, path))
    given = os.environ.get(TOKENS_ENV)
    return Principals(parse_tokens(given, TOKENS_ENV)) if given else None


def principal_tenant(ctx: ServerRequestContext[object, object]) -> str | None:
    """The tenant of the request's authenticated principal, or None: ``mcp:principal:NAME``
    for a token of `Principals`, ``mcp:user:<digest>`` for another verifier's (its client,
    issuer and subject, digested: a subject may be a person's address)."""
    token = get_access_token()
    if isinstance(token, PrincipalToken):
        return named_tenant(token.principal)
    found = authenticated_principal(ctx)
    return None if found is None else f"mcp:user:{digest(found)}"


def named_tenant(principal: str) -> str:
    """The tenant of a principal named by the operator (``--principal``, a token's name)."""
    return f"mcp:principal:{check_principal(principal)}"
