"""The site builds with ``mkdocs build --strict``: no broken link, no missing page, no
docstring mkdocstrings cannot read, and the generated CLI listing is in it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.docs import ROOT


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="tenure.App.enqueue"' in api  # from the docstrings
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "tenure jobs show" in cli and "--claim-batch" in cli  # the generated listing


def test_the_readmes_links_point_at_files_that_exist() -> None:
    """README.md is read on the forge, not in the site: its relative links are checked here."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert len(links) > 20 and "docs/tutorial.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to what is not there: {missing}"
