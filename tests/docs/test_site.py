"""The documentation site builds from the repository with warnings as errors (MkDocs Material, the reference from
the docstrings by mkdocstrings), every page is in its navigation, and a broken link fails the build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from .pages import DOCS, ROOT

#: A build reads the whole package's docstrings: generous, for a loaded machine.
BUILD_TIMEOUT = 300.0


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = ["mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    built = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    reference = (tmp_path / "site" / "reference" / "conversation" / "index.html").read_text(encoding="utf-8")
    assert 'id="dial_runtime.Conversation.decide"' in reference  # generated from the docstrings
    assert ":class:`" not in reference  # Sphinx roles became links or code
    assert sorted(path.name for path in (tmp_path / "site" / "diagrams").iterdir()) == sorted(
        path.name for path in (ROOT / "diagrams").glob("*.svg")
    )


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [page for item in items for page in pages(item)]  # type: ignore[attr-defined]

    assert sorted(pages(config["nav"])) == sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The check the build makes: a copy of the site with one link to a page that does not exist."""
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copytree(ROOT / "diagrams", copy / "diagrams")
    (copy / "scripts").mkdir()
    for hook in ("docs_hooks.py", "docs_roles.py"):
        shutil.copy(ROOT / "scripts" / hook, copy / "scripts" / hook)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "dial_runtime").symlink_to(ROOT / "dial_runtime")
    tutorial = copy / "docs" / "tutorial.md"
    tutorial.write_text(tutorial.read_text(encoding="utf-8") + "\nSee [the guide](how-to/nowhere.md).\n")
    built = build(copy / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "nowhere.md" in built.stderr
