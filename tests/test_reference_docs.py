"""The API reference: one page per public module, in the nav; internals stay out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"

#: Modules that are not API: the command line, the demo, and the halves'
#: internals (their public names are re-exported by the package above them).
INTERNAL = {
    "searchfuse.__main__",
    "searchfuse.cli",
    "searchfuse.demo",
    "searchfuse.integrations",  # a namespace: each integration has its page
    "searchfuse.testing.plugin",  # documented on the searchfuse.testing page
}
INTERNAL_PACKAGES = (
    "searchfuse.guard.",
    "searchfuse.router.",
    "searchfuse.integrations.langchain.",
)


def _modules() -> set[str]:
    found = set()
    for path in (ROOT / "searchfuse").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts):
            continue
        found.add(".".join(parts))
    return found


def _documented() -> dict[str, Path]:
    out = {}
    for page in REFERENCE.rglob("*.md"):
        for module in re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.MULTILINE):
            out[module] = page
    return out


def _nav_pages() -> set[str]:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may hold !!python/name tags (plugins); they do not matter here.
    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    pages: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            pages.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(config["nav"])
    return pages


def test_every_public_module_has_a_reference_page() -> None:
    documented = _documented()
    public = {
        m
        for m in _modules()
        if m not in INTERNAL and not any(m.startswith(p) for p in INTERNAL_PACKAGES)
    }
    missing = sorted(public - set(documented))
    assert not missing, (
        f"{missing}: give each a page under docs/reference/ (and the nav), "
        "or list it in INTERNAL here"
    )


def test_no_internal_module_is_rendered() -> None:
    documented = set(_documented())
    for module in documented:
        assert not any(part.startswith("_") for part in module.split(".")), module
    assert "searchfuse.cli" not in documented


def test_every_reference_page_is_in_the_nav() -> None:
    nav = _nav_pages()
    for page in REFERENCE.rglob("*.md"):
        assert page.relative_to(ROOT / "docs").as_posix() in nav, page


# -- one docstring style: Google sections, Markdown, mkdocstrings cross-references ------

#: Sphinx roles render literally under mkdocstrings; write [`Name`][searchfuse.Name].
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`")
#: reST's `text::` literal block marker; write a fenced block instead.
LITERAL_MARKER = re.compile(r"::\s*$")


def _docstrings_and_comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = [(n, line) for n, line in enumerate(lines, 1) if line.lstrip().startswith("#")]
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            end = node.end_lineno or node.lineno
            found += [(n, lines[n - 1]) for n in range(node.lineno, end + 1)]
    return found


def test_no_sphinx_role_or_rest_literal_block_in_docstrings() -> None:
    offenders = []
    for path in sorted((ROOT / "searchfuse").rglob("*.py")):
        for number, line in _docstrings_and_comments(path):
            if SPHINX_ROLE.search(line) or (
                LITERAL_MARKER.search(line) and not line.lstrip().startswith("#")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "reST in docstrings (use Markdown):\n" + "\n".join(offenders)
