# ruff: noqa: E402
"""Principals as the operator names them: tokens files and variables read strictly, tokens
checked through the SDK's verifier surface, and ``tenure mcp``'s options refused where
they would mean nothing (a principal over HTTP, tokens over stdio)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.system.adapters.mcp.sdk import needs_sdk

needs_sdk()  # before the SDK's imports below, hence E402

from tests.support.workers import REPO_ROOT

from tenure import ConfigError
from tenure.mcp import Principals, parse_tokens, server
from tenure.mcp._auth import PrincipalToken

ALICE = "alice-" + "a" * 26
BOB = "bob-" + "b" * 28


def test_a_tokens_file_names_one_principal_per_token() -> None:
    text = f"# the agents\nalice={ALICE}\n\n  bob={BOB} \n"
    assert parse_tokens(text, "tokens") == {"alice": ALICE, "bob": BOB}
    assert parse_tokens(f"alice={ALICE} bob={BOB}", "env") == {"alice": ALICE, "bob": BOB}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("alice", "expected NAME=TOKEN"),
        (f"alice={ALICE}\nalice={BOB}", "named twice"),
        (f"bad/name={ALICE}", "a principal is 1-64"),
        (f"={ALICE}", "a principal is 1-64"),
    ],
)
def test_a_malformed_tokens_file_is_refused_saying_where(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_tokens(text, "tokens")


@pytest.mark.parametrize(
    ("tokens", "problem"),
    [
        ({}, "no MCP tokens"),
        ({"alice": "short"}, "16-512 characters"),
        ({"alice": ALICE, "bob": ALICE}, "share one MCP token"),
        ({"alice": "a b" + "c" * 20}, "without spaces"),
    ],
)
def test_weak_or_shared_tokens_are_refused(tokens: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        Principals(tokens)


async def test_a_token_is_its_principals_and_nobody_elses() -> None:
    principals = Principals({"alice": ALICE, "bob": BOB})
    found = await principals.verify_token(BOB)
    assert isinstance(found, PrincipalToken) and found.principal == "bob"
    assert found.token == ""  # the secret is not kept on the request
    for wrong in ("", ALICE[:-1], ALICE + "x", BOB.upper(), "\ud800"):
        assert await principals.verify_token(wrong) is None


def test_a_principal_name_is_checked_where_the_server_is_built() -> None:
    with pytest.raises(ConfigError, match="a principal is 1-64"):
        server(object(), principal="two words")  # type: ignore[arg-type]


def mcp(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tenure", "mcp", "tests.apps.mcp_app:app", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "TENURE_DSN": "dbname=unused host=/nonexistent", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--http", "--principal", "alice"), "over HTTP each caller's bearer token names it"),
        (("--tokens", "tokens.txt"), "--tokens is for --http"),
        (("--http", "--tokens", "/nonexistent/tokens"), "cannot read the MCP tokens file"),
        (("--principal", "two words"), "a principal is 1-64 letters"),
    ],
)
def test_tenure_mcp_refuses_options_that_would_mean_nothing(
    args: tuple[str, ...], problem: str
) -> None:
    done = mcp(*args)
    assert done.returncode != 0
    assert problem in done.stderr, done.stderr
