"""What both adapters share, without a database: job keys from hostile ids, what a model is
told, and that the core install and ``import tenure`` leave the frameworks out."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from tests.support.workers import REPO_ROOT

from tenure import PayloadError, PolicyError
from tenure._app import MAX_KEY_LENGTH
from tenure.integrations._calls import call_key, check_defer_after, failure

HOSTILE_IDS = [
    "call_abc",
    "x" * 10_000,
    "a:b:c",  # a colon could forge another conversation's key
    "nul\x00byte",
    "line\nbreak",
    "\ud800",  # a lone surrogate
    "\ud801",
    "😀" * 300,
]


@pytest.mark.parametrize("conversation", HOSTILE_IDS)
@pytest.mark.parametrize("call_id", HOSTILE_IDS)
def test_any_ids_make_a_valid_key_of_their_own(conversation: str, call_id: str) -> None:
    key = call_key("fw", conversation, call_id)
    assert 1 <= len(key) <= MAX_KEY_LENGTH and key.isprintable()
    assert key.count(":") == 2 and key.startswith("fw:")
    assert call_key("fw", conversation, call_id) == key


def test_distinct_ids_never_share_a_key() -> None:
    keys = {call_key("fw", c, i) for c in HOSTILE_IDS for i in HOSTILE_IDS}
    assert len(keys) == len(HOSTILE_IDS) ** 2
    assert call_key("fw", "a:b", "c") != call_key("fw", "a", "b:c")


@pytest.mark.parametrize(
    ("conversation", "call_id"), [("", "c"), (None, "c"), ("c", ""), ("c", None)]
)
def test_a_call_without_ids_is_refused(conversation: str | None, call_id: str | None) -> None:
    with pytest.raises(PolicyError, match="id"):
        call_key("fw", conversation, call_id)


@pytest.mark.parametrize("bad", [-0.1, 86_401, float("nan"), float("inf"), True, "1", [1]])
def test_defer_after_outside_its_range_is_refused(bad: object) -> None:
    with pytest.raises(PolicyError, match="defer_after"):
        check_defer_after(bad)


def test_a_payload_error_tells_the_model_its_problems() -> None:
    told = failure("post_entry", PayloadError("bad", ["cents: Input should be a valid integer"]))
    assert told.retry
    assert told.message == (
        "The arguments for post_entry do not fit its schema:\n"
        "- cents: Input should be a valid integer"
    )


def test_the_core_install_and_import_leave_the_frameworks_out() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    assert "pydantic-ai" not in core and "openai" not in core and "agents" not in core
    extras = project["optional-dependencies"]
    assert extras["pydantic-ai"] == ["pydantic-ai-slim>=2.78,<3"]
    assert extras["openai-agents"] == ["openai-agents>=0.24,<0.25"]
    assert "tenure[pydantic-ai,openai-agents]" in extras["test"]
    frameworks = "{'pydantic_ai', 'agents', 'openai'}"
    check = f"import sys, tenure, tenure.fence; print(sorted({frameworks} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
