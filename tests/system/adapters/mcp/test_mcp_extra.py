"""The MCP SDK comes with the ``mcp`` extra only, and CI's ``test`` extra brings it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_the_core_install_does_not_pull_the_sdk_and_the_test_extra_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split("[")[0].startswith("mcp")]
    assert project["optional-dependencies"]["mcp"] == ["mcp>=2.3,<3"]
    assert "tenure[mcp]" in project["optional-dependencies"]["test"]


def test_importing_tenure_does_not_import_the_sdk() -> None:
    code = "import sys, tenure, tenure._cli; print('mcp' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "False", done.stderr
