"""What the pages say about the command line, the configuration and the API is the code's.

``test_docs.py`` runs the pages' Python; this module checks the rest a reader
copies or relies on, cheaply (no server, no subprocess):

- every ``searchfuse ...`` command line on any page (console and shell
  blocks, inline code) names a command and options that command accepts;
- the configuration page lists exactly the environment variables, keys-file
  fields, ``Router`` options and commands the code has;
- every keys file shown as JSON loads (its placeholder keys replaced by
  made-up ones), and what ``searchfuse init`` and the status table print is
  what the pages quote;
- the Python examples import only public names (``__all__``, no ``_private``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import importlib
import inspect
import io
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import searchfuse
import searchfuse.router
from searchfuse.cli import build_parser, format_status, main
from searchfuse.errors import ConfigError
from searchfuse.providers import _registry
from searchfuse.router import MemoryStore, Router, load_config
from searchfuse.router._keys import _KNOWN_ITEM, _KNOWN_TOP, parse_config
from searchfuse.testing import BRAVE_TEST_KEYS, EXA_TEST_KEYS, SERPER_TEST_KEYS, TEST_KEYS

from .test_docs import python_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "SKILL.md", *(ROOT / "docs").rglob("*.md")],
    key=lambda p: p.as_posix(),
)
CONFIGURATION = ROOT / "docs" / "configuration.md"

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w-]*)")
#: Blocks whose every line is a command, and blocks that show commands after a prompt.
_SCRIPT = {"bash", "sh", "shell"}
_SHELL = {*_SCRIPT, "console", "text", ""}


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _fenced(page: Path) -> Iterator[tuple[str, int, list[str]]]:
    """``(language, first line number, lines)`` of every fenced block of a page."""
    return _fenced_in(page.read_text(encoding="utf-8"))


def _fenced_in(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """``(language, first line number, lines)`` of every fenced block of a text."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        yield language, i + 2, lines[i + 1 : j]
        i = j + 1


def _prose(page: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line outside fenced blocks."""
    fence: str | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            yield number, line


# -- command lines ----------------------------------------------------------------------


PARSER = build_parser()
COMMANDS: dict[str, argparse.ArgumentParser] = next(
    dict(action.choices)
    for action in PARSER._actions
    if isinstance(action, argparse._SubParsersAction)
)
GLOBAL_WITH_VALUE = {
    option
    for option, action in PARSER._option_string_actions.items()
    if action.nargs != 0 and option.startswith("--") and option != "--help"
}


def command_lines() -> list[tuple[str, str]]:
    """``(where, text)`` for every ``searchfuse ...`` command line a page shows."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        for language, start, lines in _fenced(page):
            if language not in _SCRIPT | {"console"}:
                continue
            # A console block with prompts shows output after them; one without is a script.
            prompts = language == "console" and any(x.startswith("$ ") for x in lines)
            for offset, line in enumerate(lines):
                text = line.strip()
                if prompts and not text.startswith("$ "):
                    continue  # what the command printed
                text = text.removeprefix("$ ").removeprefix("python -m ")
                if text.startswith("searchfuse ") or text == "searchfuse":
                    text = re.split(r"\s#\s|\s{2,}#", text)[0].split(" && ")[0]
                    found.append((f"{_name(page)}:{start + offset}", text.strip()))
        for number, line in _prose(page):
            for span in re.findall(r"`([^`\n]+)`", line):
                text = span.strip().removeprefix("python -m ")
                if text.startswith("searchfuse "):
                    found.append((f"{_name(page)}:{number}", text))
    return found


def parse_command(text: str) -> tuple[str | None, list[str]]:
    """The command and the options of one command line (values and placeholders skipped)."""
    tokens = [t.strip("[]") for t in shlex.split(text.replace("[", " [ ").replace("]", " ] "))]
    tokens = [t for t in tokens if t and t not in ("|", "...")]
    command: str | None = None
    options: list[str] = []
    i = 1
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("-"):
            option = token.split("=", 1)[0]
            options.append(option)
            if command is None and option in GLOBAL_WITH_VALUE and "=" not in token:
                i += 1
        elif command is None:
            command = token
        i += 1
    return command, options


LINES = command_lines()


def test_the_pages_command_lines_are_found() -> None:
    pages = {where.split(":")[0] for where, _ in LINES}
    assert {"README.md", "SKILL.md", "docs/getting-started.md", "docs/configuration.md"} <= pages
    assert len(LINES) > 50


@pytest.mark.parametrize(("where", "text"), LINES, ids=[w for w, _ in LINES])
def test_every_command_line_on_a_page_is_accepted(where: str, text: str) -> None:
    command, options = parse_command(text)
    if command is None:
        assert options and set(options) <= set(PARSER._option_string_actions), (
            f"{where}: {text!r} names no command"
        )
        return
    assert command in COMMANDS, f"{where}: {text!r}: there is no command {command!r}"
    accepted = set(COMMANDS[command]._option_string_actions)
    unknown = [option for option in options if option not in accepted]
    assert not unknown, f"{where}: {text!r}: `searchfuse {command}` has no option {unknown}"


def test_a_wrong_option_on_a_page_is_caught() -> None:
    assert parse_command("searchfuse status [--watch] [--interval S]") == (
        "status",
        ["--watch", "--interval"],
    )
    assert parse_command("searchfuse --state redis://h:6379/0 diagnose --probe") == (
        "diagnose",
        ["--state", "--probe"],
    )
    with pytest.raises(AssertionError, match="has no option"):
        test_every_command_line_on_a_page_is_accepted("page.md:1", "searchfuse status --live")


# -- the configuration page -------------------------------------------------------------


def _section(page: Path, title: str) -> str:
    text = page.read_text(encoding="utf-8")
    match = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.MULTILINE)
    assert match, f"{_name(page)} has no section {title!r}"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def _first_column(section: str) -> set[str]:
    """The code spans in the first cell of each table row."""
    names: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            names.update(re.findall(r"`([^`]+)`", cells[1]))
    return names


def _variables_the_code_reads() -> set[str]:
    names = {"TAVILY_BASE_URL"}
    for spec in _registry.PROVIDERS.values():
        names |= {spec.list_env, spec.single_env}
        names.add(_registry.lookup(spec.name).base_url_env)
    for path in (ROOT / "searchfuse").rglob("*.py"):
        names.update(re.findall(r"[\"'](SEARCHFUSE_[A-Z_]+)[\"']", path.read_text("utf-8")))
    return names


def test_the_environment_table_lists_every_variable_the_code_reads() -> None:
    documented = _first_column(_section(CONFIGURATION, "Environment"))
    read = _variables_the_code_reads()
    assert read - documented == set(), "read by the code, missing from configuration.md"
    singles = {spec.single_env for spec in _registry.PROVIDERS.values()}
    numbered = {name for name in documented if re.sub(r"_\d+$", "", name) in singles}
    assert documented - read - numbered == set(), "in configuration.md, read by no code"


def test_the_keys_file_fields_are_the_ones_the_loader_knows() -> None:
    section = _section(CONFIGURATION, "`config/keys.json`")
    fields = set(re.findall(r"`keys\[\]\.(\w+)`", section))
    assert fields == _KNOWN_ITEM - {"source"}, "keys[] fields (source: see Legacy files)"
    top = {name for name in _KNOWN_TOP if f"`{name}`" in section or f'"{name}"' in section}
    assert top == _KNOWN_TOP


def test_the_router_options_table_is_the_constructors_signature() -> None:
    documented: set[str] = set()
    for cell in _first_column(_section(CONFIGURATION, "Router options")):
        documented.update(name.strip() for name in cell.split(","))
    parameters = set(inspect.signature(Router.__init__).parameters) - {"self", "keys"}
    assert documented == parameters


def test_the_cli_table_names_every_command() -> None:
    table = _section(CONFIGURATION, "CLI")
    named = {parse_command(cell)[0] for cell in _first_column(table)}
    assert named == set(COMMANDS)


# -- keys files and quoted output -------------------------------------------------------


_MADE_UP = {
    "tavily": list(TEST_KEYS),
    "exa": list(EXA_TEST_KEYS),
    "brave": list(BRAVE_TEST_KEYS),
    "serper": list(SERPER_TEST_KEYS),
}


def _with_made_up_keys(data: Any) -> Any:
    """A shown keys file with each placeholder key replaced by a made-up key of its provider."""
    data = copy.deepcopy(data)
    items = data["keys"] if isinstance(data, dict) else data
    used = {name: 0 for name in _MADE_UP}
    for i, item in enumerate(items):
        provider = item.get("provider", "tavily") if isinstance(item, dict) else "tavily"
        if provider not in _MADE_UP or (isinstance(item, dict) and "key" not in item):
            continue
        key = _MADE_UP[provider][used[provider]]
        used[provider] += 1
        if isinstance(item, dict):
            item["key"] = key
        else:
            items[i] = key
    return data


def keys_files() -> list[tuple[str, Any]]:
    found = []
    for page in PAGES:
        for language, start, lines in _fenced(page):
            if language != "json":
                continue
            try:
                data = json.loads("\n".join(lines))
            except ValueError:
                continue
            if isinstance(data, dict) and "keys" in data and "format_version" in data:
                found.append((f"{_name(page)}:{start}", data))
    return found


KEYS_FILES = keys_files()


def test_the_pages_keys_files_are_found() -> None:
    pages = {where.split(":")[0] for where, _ in KEYS_FILES}
    assert {"SKILL.md", "docs/configuration.md", "docs/getting-started.md"} <= pages


@pytest.mark.parametrize(("where", "data"), KEYS_FILES, ids=[w for w, _ in KEYS_FILES])
def test_every_keys_file_shown_loads(where: str, data: Any) -> None:
    config = parse_config(_with_made_up_keys(data), where)
    assert len(config.keys) == len(data["keys"])
    assert not config.extra, f"{where}: top-level fields the loader does not know"
    unknown = [entry.extra for entry in config.keys if entry.extra]
    assert not unknown, f"{where}: key fields the loader does not know: {unknown}"


def _console_output(page: Path, command: str) -> list[str]:
    """The lines a page's console block shows after ``$ COMMAND``."""
    for language, _, lines in _fenced(page):
        if language == "console" and f"$ {command}" in lines:
            after = lines[lines.index(f"$ {command}") + 1 :]
            end = next((i for i, line in enumerate(after) if line.startswith("$ ")), len(after))
            return [line for line in after[:end] if line.strip()]
    raise AssertionError(f"{_name(page)} shows no `$ {command}`")


def test_init_prints_what_getting_started_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        assert main(["init"]) == 0
    shown = _console_output(ROOT / "docs" / "getting-started.md", "searchfuse init")
    assert printed.getvalue().splitlines() == shown


def test_status_tables_on_the_pages_have_the_real_columns() -> None:
    with Router(["tvly-dev-test0001"], state=MemoryStore()) as router:
        header = format_status(router.status()).splitlines()[0].split()
    shown = [
        (f"{_name(page)}:{start + i}", line.split())
        for page in PAGES
        for language, start, lines in _fenced(page)
        if language in _SHELL
        for i, line in enumerate(lines)
        if line.strip().startswith("KEY ") and "STATE" in line
    ]
    assert shown, "no page shows the status table"
    for where, columns in shown:
        assert columns == header, f"{where}: the status table's columns are {header}"


# -- public names -----------------------------------------------------------------------


_PRIVATE_ATTRIBUTE = re.compile(r"\bsearchfuse(?:\.\w+)*\._[a-z]\w*")


def _imports(code: str) -> Iterator[tuple[str, str]]:
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("searchfuse"):
            for alias in node.names:
                yield node.module or "", alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("searchfuse"):
                    yield alias.name, ""


def test_the_examples_use_public_names_only() -> None:
    wrong = []
    for page in PAGES:
        for block in python_blocks(page):
            for module, name in _imports(block.code):
                if any(part.startswith("_") for part in [*module.split("."), name] if part):
                    wrong.append(f"{block.where}: {module}.{name} is private")
                    continue
                if not name:
                    continue
                exported = getattr(__import__(module, fromlist=["__all__"]), "__all__", None)
                if exported is not None and name not in exported:
                    wrong.append(f"{block.where}: {name} is not in {module}.__all__")
            wrong += [f"{block.where}: {m}" for m in _PRIVATE_ATTRIBUTE.findall(block.code)]
    assert not wrong


def test_the_public_surface_the_examples_rely_on_is_exported() -> None:
    assert {"Router", "guard", "turn", "Budget", "spend_scope", "BudgetExhausted"} <= set(
        searchfuse.__all__
    )
    assert {"Router", "KeyStatus", "MemoryStore", "open_store"} <= set(searchfuse.router.__all__)


def test_the_reference_shows_every_exported_name_and_lists_every_page() -> None:
    reference = ROOT / "docs" / "reference"
    # Router has its place on the searchfuse page; the exceptions on the errors page.
    top = set(re.findall(r"^\s+- (\w+)$", (reference / "searchfuse.md").read_text(), re.M))
    guard_package = importlib.import_module("searchfuse.guard")  # the attribute is guard()
    pages = ((searchfuse, "searchfuse.md"), (searchfuse.router, "router.md"))
    for module, page in (*pages, (guard_package, "guard.md")):
        members = set(re.findall(r"^\s+- (\w+)$", (reference / page).read_text(), re.MULTILINE))
        members |= top  # what the package re-exports is documented there
        errors = set(
            re.findall(r"^class (\w+)", (ROOT / "searchfuse" / "errors.py").read_text(), re.M)
        )
        missing = set(module.__all__) - members - errors - {"__version__", "Router"}
        assert not missing, f"docs/reference/{page} leaves out {sorted(missing)}"
    index = (reference / "index.md").read_text(encoding="utf-8")
    written = {p.relative_to(reference).as_posix() for p in reference.rglob("*.md")}
    assert {p for p in written if f"]({p})" not in index} == {"index.md"}


def test_the_mcp_page_lists_the_options_of_searchfuse_mcp() -> None:
    table = _section(ROOT / "docs" / "integrations" / "mcp.md", "Options")
    documented = {cell.split()[0] for cell in _first_column(table)}
    accepted = {o for o in COMMANDS["mcp"]._option_string_actions if o.startswith("--")}
    assert documented == (accepted - {"--help", "--verbose"}) | {"-v"}


def test_every_option_of_every_command_says_what_it_does() -> None:
    silent = [
        f"searchfuse {name} {action.option_strings[0]}"
        for name, parser in COMMANDS.items()
        for action in parser._actions
        if action.option_strings and not action.help  # SUPPRESS hides init's/demo's paths
    ]
    assert not silent, "options without a help text"
    untold = [name for name, parser in COMMANDS.items() if not parser.description]
    assert not untold


def test_the_guard_pages_options_table_is_guards_signature() -> None:
    from searchfuse import guard

    page = (ROOT / "docs" / "guard.md").read_text(encoding="utf-8")
    table = page.split("The options, all keyword-only:")[1].split("\n## ")[0]
    documented = _first_column(table)
    keywords = {
        name
        for name, parameter in inspect.signature(guard).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert documented == keywords


def test_the_configuration_pages_error_is_the_loaders(tmp_path: Path) -> None:
    section = _section(CONFIGURATION, "Errors")
    shown = next(lines for _, _, lines in _fenced_in(section))
    keys = tmp_path / "config" / "keys.json"
    keys.parent.mkdir()
    keys.write_text(json.dumps({"format_version": 2, "keys": [{"key": TEST_KEYS[0]}] * 2}))
    with pytest.raises(ConfigError) as caught:
        load_config(keys)
    assert str(caught.value).replace(str(keys), "config/keys.json") == "\n".join(shown)


def test_the_readme_and_testing_page_name_every_fixture_of_the_plugin() -> None:
    source = (ROOT / "searchfuse" / "testing" / "plugin.py").read_text(encoding="utf-8")
    fixtures = set(re.findall(r"@pytest\.fixture[^\n]*\n(?:@[^\n]*\n)*def (\w+)", source))
    fixtures.discard("searchfuse_reset")  # autouse: nobody asks for it
    readme = _section(ROOT / "README.md", "Testing your agent")
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    for where, text in (("README.md", readme), ("docs/testing.md", testing)):
        missing = {name for name in fixtures if f"`{name}`" not in text}
        assert not missing, f"{where} leaves out the fixtures {sorted(missing)}"
