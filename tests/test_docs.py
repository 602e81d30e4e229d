"""The docs run: every Python example in ``docs/`` and ``README.md`` is executed.

Each page is one test. Its ```` ```python ```` blocks run in order, in one
namespace, inside a *docs environment* that stands in for a reader's machine:

- the working directory is a fresh temporary folder holding
  ``config/keys.json`` (format v2) with the made-up keys
  ``tvly-dev-test0001`` .. ``tvly-dev-test0004``;
- a simulated Tavily (:class:`searchfuse.testing.FakeTavily`) accepting those
  keys is served on loopback; ``TAVILY_BASE_URL`` points at it,
  ``TAVILY_API_KEYS`` holds the four keys and ``TAVILY_API_KEY`` the first;
- searchfuse's testing mode is on (:func:`searchfuse.testing.testing_mode`):
  guards and routers built without ``clock=`` read a fake clock and never
  really sleep. The simulator keeps real time for its rate windows, as
  upstream does.

A fenced block right after the comment ``<!-- output -->`` is what the
Python block before it prints: the page's claim about the output is checked
(``...`` stands for any text, runs of white space compare equal).

Two kinds of block are not run that way:

- a block right after the comment ``<!-- from: examples/NAME.py -->`` must
  appear verbatim in that file (the examples have tests of their own);
- a block that defines ``test_*`` functions is a test module for the reader's
  own suite: it runs under pytest, with searchfuse's pytest plugin and
  without the docs environment, and every test in it must pass.

A failure names the page and the line of the block that failed.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import doctest
import inspect
import io
import json
import linecache
import re
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

import pytest

import searchfuse.testing
from searchfuse.testing import TEST_KEYS, FakeTavily

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_FROM = re.compile(r"^\s*<!--\s*from:\s*(?P<path>\S+)\s*-->\s*$")
_OUTPUT = re.compile(r"^\s*<!--\s*output\s*-->\s*$")
# The reader's suite runs with the plugins installed here; pytest-asyncio wants its loop scope set.
PYTEST_INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
_ENV_VARIABLES = (
    "TAVILY_API_KEYS",
    "TAVILY_API_KEY",
    "TAVILY_BASE_URL",
    "SEARCHFUSE_CONFIG",
    "SEARCHFUSE_STATE",
    "SEARCHFUSE_COOLDOWN_MINUTES",
    # A reader's machine may name other providers, budgets or rates: the pages assume none.
    "SEARCHFUSE_PROVIDERS",
    "SEARCHFUSE_BUDGETS",
    "SEARCHFUSE_RPM",
    "EXA_API_KEYS",
    "EXA_API_KEY",
    "BRAVE_API_KEYS",
    "BRAVE_API_KEY",
    "SERPER_API_KEYS",
    "SERPER_API_KEY",
    "SEARXNG_URL",
)


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts (1-based line of its first code line)."""

    page: str
    line: int
    code: str
    source_file: str | None  # set for ``<!-- from: examples/NAME.py -->`` blocks
    #: What the block prints, from the block after it marked ``<!-- output -->``.
    output: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """The ```` ```python ```` blocks of a Markdown file, in order."""
    page = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    previous = ""  # the last non-blank line outside a block
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        fence, indent = opening["fence"], opening["indent"]
        language = (opening["info"].split() or [""])[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if _OUTPUT.match(previous) and blocks:
            blocks[-1] = dataclasses.replace(blocks[-1], output="\n".join(body) + "\n")
        elif language in ("python", "py"):
            marker = _FROM.match(previous)
            blocks.append(
                Block(
                    page=page,
                    line=i + 2,
                    code=textwrap.dedent("\n".join(body)) + "\n",
                    source_file=marker["path"] if marker else None,
                )
            )
        previous = lines[i]
        i = j + 1
    return blocks


def _pages() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        pages.append(readme)
    return [page for page in pages if python_blocks(page)]


PAGES = _pages()


def _defines_tests(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        for node in tree.body
    )


# -- the docs environment ---------------------------------------------------------


def write_keys_file(folder: Path) -> Path:
    """``config/keys.json`` (format v2) with the made-up keys, as ``searchfuse init`` leaves it."""
    config = folder / "config"
    config.mkdir(parents=True, exist_ok=True)
    path = config / "keys.json"
    data = {
        "format_version": 2,
        "cooldown_minutes": 1.0,
        "keys": [
            {"key": key, "account": f"dev{n}@example.com", "notes": f"test key {n}"}
            for n, key in enumerate(TEST_KEYS, 1)
        ],
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


@dataclass
class DocsEnvironment:
    folder: Path
    tavily: FakeTavily
    url: str
    clock: searchfuse.testing.FakeClock


@pytest.fixture
def docs_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DocsEnvironment]:
    """A reader's machine in miniature: keys file, simulated Tavily, environment, fake time."""
    folder = tmp_path / "project"
    folder.mkdir()
    write_keys_file(folder)
    monkeypatch.chdir(folder)
    for name in _ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # Real time for the simulator's rate windows: a fake clock that never moves
    # would pile every request of a page into one window.
    tavily = FakeTavily(keys=TEST_KEYS, clock=time.time)
    with tavily.serve() as url, searchfuse.testing.testing_mode() as clock:
        monkeypatch.setenv("TAVILY_BASE_URL", url)
        monkeypatch.setenv("TAVILY_API_KEYS", ",".join(TEST_KEYS))
        monkeypatch.setenv("TAVILY_API_KEY", TEST_KEYS[0])
        yield DocsEnvironment(folder, tavily, url, clock)


# -- running blocks -----------------------------------------------------------------


def _compile(block: Block) -> tuple[ast.Module, CodeType]:
    # Padded with blank lines so tracebacks point at the line in the page itself.
    source = "\n" * (block.line - 1) + block.code
    linecache.cache[block.page] = (len(source), None, source.splitlines(True), block.page)
    tree = ast.parse(source, block.page)
    code = compile(
        tree, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    return tree, code


def _run(code: CodeType, namespace: dict[str, object]) -> None:
    if inspect.CO_COROUTINE & code.co_flags:
        # Top-level await, as in an async REPL or notebook.
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


_OUTPUT_CHECK = doctest.OutputChecker()
_OUTPUT_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _check_output(block: Block, printed: str) -> None:
    """The page's ``<!-- output -->`` block against what the example printed."""
    assert block.output is not None
    assert _OUTPUT_CHECK.check_output(block.output, printed, _OUTPUT_FLAGS), (
        f"{block.where}: the page shows this output:\n{block.output}\n"
        f"but the example printed:\n{printed}"
    )


def _check_excerpt(block: Block, source_file: str) -> None:
    path = ROOT / source_file
    assert path.is_file(), f"{block.where}: {source_file} does not exist"
    assert block.code.strip() in path.read_text(encoding="utf-8"), (
        f"{block.where}: the block is not (any more) a verbatim excerpt of {source_file}"
    )


def _run_as_test_module(block: Block, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a block that defines tests as a reader's test module, under pytest."""
    suite = folder.parent / "suite"
    suite.mkdir(exist_ok=True)
    name = re.sub(r"\W", "_", f"test_{block.page}_{block.line}")
    module = suite / f"{name}.py"
    module.write_text("\n" * (block.line - 1) + block.code, encoding="utf-8")
    (suite / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
    output = io.StringIO()
    with monkeypatch.context() as patch:
        # A reader's test suite: no docs environment, real time until a fixture says otherwise.
        for variable in _ENV_VARIABLES:
            patch.delenv(variable, raising=False)
        patch.chdir(suite)
        with (
            searchfuse.testing.testing_mode(),  # only to restore the page's clock afterwards
            contextlib.redirect_stdout(output),
            contextlib.redirect_stderr(output),
        ):
            searchfuse.testing.set_testing(False)
            code = pytest.main(
                [
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "--rootdir",
                    str(suite),
                    "-c",
                    str(suite / "pytest.ini"),
                    "--import-mode=importlib",
                    str(module),
                ]
            )
    assert code == pytest.ExitCode.OK, (
        f"{block.where}: the tests in this block did not pass\n{output.getvalue()}"
    )


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page(
    page: Path, docs_environment: DocsEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run as a script is: `if __name__ == "__main__":` blocks run too.
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in python_blocks(page):
        if block.source_file is not None:
            _check_excerpt(block, block.source_file)
            continue
        try:
            tree, code = _compile(block)
        except SyntaxError as exc:
            pytest.fail(f"{block.where}: not valid Python: {exc}", pytrace=False)
        if _defines_tests(tree):
            _run_as_test_module(block, docs_environment.folder, monkeypatch)
            continue
        # Each block starts in testing mode on the page's clock, whatever the last one did.
        searchfuse.testing.set_testing(True, clock=docs_environment.clock)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                _run(code, namespace)
        except Exception as exc:
            raise AssertionError(f"{block.where}: the example raised {exc!r}") from exc
        if block.output is not None:
            _check_output(block, printed.getvalue())


def test_pages_with_examples_are_found() -> None:
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"docs/guard.md", "docs/router.md", "docs/testing.md"} <= pages


def test_blocks_are_read_with_their_line_numbers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "# Title\n\n```python\nx = 1\n```\n\n<!-- from: examples/demo.py -->\n"
        "```python\ny = 2\n```\n\n- item\n\n  ```python\n  z = 3\n  ```\n\n```console\n$ ls\n```\n"
    )
    page.write_text(text, encoding="utf-8")
    blocks = python_blocks(page)
    assert [(b.line, b.code, b.source_file) for b in blocks] == [
        (4, "x = 1\n", None),
        (9, "y = 2\n", "examples/demo.py"),
        (15, "z = 3\n", None),
    ]


def test_a_failing_example_test_fails_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = Block("docs/page.md", 12, "def test_wrong(fake_clock):\n    assert False\n", None)
    (tmp_path / "project").mkdir()
    with pytest.raises(AssertionError, match=r"docs/page\.md:12: the tests in this block"):
        _run_as_test_module(block, tmp_path / "project", monkeypatch)


def test_an_output_block_belongs_to_the_python_block_before_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "```python\nprint('a')\n```\n\n<!-- output -->\n```text\na\n```\n\n"
        "```text\nnot an output\n```\n\n```python\nprint('b')\n```\n"
    )
    page.write_text(text, encoding="utf-8")
    assert [(b.code, b.output) for b in python_blocks(page)] == [
        ("print('a')\n", "a\n"),
        ("print('b')\n", None),
    ]


def test_a_page_showing_other_output_than_printed_fails() -> None:
    block = Block("docs/page.md", 3, "print(1)\n", None, output="refused: ...\n")
    _check_output(block, "refused: wait 25 s\n")  # `...` stands for any text
    with pytest.raises(AssertionError, match=r"docs/page\.md:3: the page shows this output"):
        _check_output(block, "served\n")


def test_an_excerpt_must_be_verbatim() -> None:
    block = Block("docs/page.md", 3, "print('not in the file')\n", "pyproject.toml")
    with pytest.raises(AssertionError, match=r"not \(any more\) a verbatim excerpt"):
        _check_excerpt(block, "pyproject.toml")
