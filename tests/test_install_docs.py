"""Every ``pip install`` the docs show works: searchfuse is not on a package index yet.

A reader copies the command as it stands. ``pip install "searchfuse[testing]"``
would fail (no index has searchfuse), so each one must name a checkout
(``.``, ``./path``) or a git URL (``searchfuse[...] @ git+https://...``), and
every extra it names must be one pyproject.toml declares.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "SKILL.md", *(ROOT / "docs").rglob("*.md")],
    key=lambda p: p.as_posix(),
)
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)
_COMMAND = re.compile(r"pip install ([^`\n#]+)")
_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.-]*)(?:\[(?P<extras>[^\]]*)\])?(?P<rest>.*)$")


def _requirements(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for match in _COMMAND.finditer(line):
            command = match.group(1).split("&&")[0].strip()
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            found += [(number, word) for word in words if not word.startswith("-")]
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_pip_install_lines_can_succeed(page: Path) -> None:
    for number, requirement in _requirements(page):
        where = f"{page.relative_to(ROOT)}:{number}: pip install {requirement!r}"
        spec = _SPEC.match(requirement)
        assert spec is not None, where
        local = requirement.startswith((".", "/"))
        if spec.group("name") == "searchfuse" or local:
            assert local or "@ git+" in spec.group("rest"), (
                f"{where}: searchfuse is on no package index; write "
                f'pip install ".[extra]" (a checkout) or '
                f'"searchfuse[extra] @ git+https://..." (a git URL)'
            )
            extras = {e.strip() for e in (spec.group("extras") or "").split(",") if e.strip()}
            assert extras <= EXTRAS, f"{where}: no such extra {sorted(extras - EXTRAS)}"


def test_the_check_sees_the_install_lines() -> None:
    readme = [req for _, req in _requirements(ROOT / "README.md")]
    assert "." in readme and ".[testing]" in readme
    assert any(req.startswith("searchfuse[testing,langchain] @ git+") for req in readme)


#: An install hint in the code naming an index package: searchfuse is on no index yet.
_INDEX_HINT = re.compile(r"""pip install ["']?searchfuse\[""")


def test_install_hints_in_the_code_can_succeed() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "searchfuse").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _INDEX_HINT.search(line)
    ]
    assert not offenders, f'write pip install ".[extra]" (a checkout): {offenders}'
