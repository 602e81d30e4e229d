"""SKILL.md stays true to the code: its commands, options, verdicts and refusals exist.

Agents act on SKILL.md without reading the code, so every ``searchfuse``
command and option it names must be one ``build_parser()`` accepts (checked
subcommand by subcommand), every command of the CLI must be in it, and the
verdicts and refusal reasons it explains must be the ones the code produces.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import searchfuse
from searchfuse.cli import build_parser
from searchfuse.errors import SearchRefused
from searchfuse.router.diagnose import VERDICTS

from .test_docs_facts import parse_command

ROOT = Path(__file__).resolve().parent.parent
SKILL = ROOT / "SKILL.md"

#: Commands SKILL.md need not explain: a demonstration, not a tool for agents.
NOT_FOR_AGENTS = {"demo"}

_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _split(text: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"\A---\n(.*?)\n---\n", text, re.DOTALL)
    assert match, "SKILL.md must open with YAML front matter between --- lines"
    front = yaml.safe_load(match.group(1))
    assert isinstance(front, dict), "the front matter must be a YAML mapping"
    return front, text[match.end() :]


FRONT, BODY = _split(SKILL.read_text(encoding="utf-8"))


def _code_snippets(body: str) -> list[str]:
    """Inline code spans, and each line of fenced blocks, in order."""
    snippets: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            else:
                snippets.append(line.strip().removeprefix("$ "))
            continue
        snippets += re.findall(r"`([^`\n]+)`", line)
    return snippets


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("build_parser() has no subcommands")


PARSER = build_parser()
COMMANDS = _subparsers(PARSER)
GLOBAL_OPTIONS = set(PARSER._option_string_actions)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def _own_options(name: str) -> set[str]:
    """The options of one subcommand that are not global, ``-h`` or ``--help``."""
    return _options(COMMANDS[name]) - GLOBAL_OPTIONS - {"-h", "--help"}


def command_lines(body: str) -> list[tuple[str, list[str], str]]:
    """Every ``searchfuse COMMAND [options]`` SKILL.md shows: (command, options, text)."""
    found = []
    for snippet in _code_snippets(body):
        if not snippet.startswith("searchfuse "):
            continue
        command, options = parse_command(snippet)
        assert command is not None, f"no command in {snippet!r}"
        found.append((command, options, snippet))
    return found


LINES = command_lines(BODY)


def _section(title_word: str) -> list[str]:
    """The lines of the first ``## `` section whose title contains ``title_word``."""
    lines = BODY.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## ") and title_word.lower() in line.lower():
            rest = lines[i + 1 :]
            end = next((j for j, text in enumerate(rest) if text.startswith("## ")), len(rest))
            return rest[:end]
    raise AssertionError(f"SKILL.md has no section about {title_word!r}")


def _first_column(lines: list[str]) -> list[str]:
    """The code span in the first cell of each table row (header and rule rows skipped)."""
    cells = []
    for line in lines:
        match = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if match:
            cells.append(match.group(1))
    return cells


# -- front matter ---------------------------------------------------------------------


def test_front_matter_has_name_and_description() -> None:
    name, description = FRONT.get("name"), FRONT.get("description")
    assert isinstance(name, str) and re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name)
    assert len(name) <= 64
    assert isinstance(description, str) and 0 < len(description.strip()) <= 1024


def test_front_matter_version_is_the_package_version() -> None:
    assert FRONT.get("version") == searchfuse.__version__


def test_front_matter_agent_metadata() -> None:
    metadata = FRONT.get("metadata")
    assert isinstance(metadata, dict)
    hermes, openclaw = metadata.get("hermes"), metadata.get("openclaw")
    assert isinstance(hermes, dict) and isinstance(openclaw, dict)
    tags = hermes.get("tags")
    assert isinstance(tags, list) and tags and all(isinstance(t, str) for t in tags)
    # OpenClaw loads the skill only when these programs are on PATH: they must be ours.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    bins = openclaw.get("requires", {}).get("bins")
    assert isinstance(bins, list) and bins
    assert set(bins) <= set(scripts)


# -- commands and options ----------------------------------------------------------


def test_skill_names_commands() -> None:
    assert LINES, "SKILL.md shows no `searchfuse ...` command"


@pytest.mark.parametrize("command, options, text", LINES, ids=[line[2] for line in LINES])
def test_every_command_and_option_exists(command: str, options: list[str], text: str) -> None:
    assert command in COMMANDS, f"{text!r}: `searchfuse {command}` is not a command"
    accepted = _options(COMMANDS[command])
    unknown = [option for option in options if option not in accepted]
    assert not unknown, f"{text!r}: `searchfuse {command}` has no option {unknown}"


def test_every_option_named_anywhere_exists() -> None:
    known = set(GLOBAL_OPTIONS)
    for parser in COMMANDS.values():
        known |= _options(parser)
    named = {
        option
        for snippet in _code_snippets(BODY)
        if not snippet.startswith(("cp ", "{", '"'))  # shell and JSON are not our options
        for option in _OPTION.findall(snippet)
    }
    assert named, "SKILL.md names no option"
    assert named <= known, f"options SKILL.md names that no command has: {named - known}"


def test_every_command_and_its_options_are_documented() -> None:
    shown: dict[str, set[str]] = {}
    for command, options, _ in LINES:
        shown.setdefault(command, set()).update(options)
    for name in sorted(set(COMMANDS) - NOT_FOR_AGENTS):
        assert name in shown, f"SKILL.md does not explain `searchfuse {name}`"
        missing = _own_options(name) - shown[name]
        # Either spelling of an option (-v / --verbose) documents it.
        missing = {
            option
            for option in missing
            if not set(COMMANDS[name]._option_string_actions[option].option_strings) & shown[name]
        }
        assert not missing, f"SKILL.md does not show `searchfuse {name}` with {sorted(missing)}"


# -- what the code says -----------------------------------------------------------------


def test_verdicts_are_the_diagnosis_verdicts() -> None:
    assert tuple(_first_column(_section("verdict"))) == VERDICTS


def test_refusal_reasons_are_the_exceptions_reasons() -> None:
    reasons = {cls.reason for cls in SearchRefused.__subclasses__()}
    assert set(_first_column(_section("rules"))) == reasons


def test_the_command_line_parser_of_this_test() -> None:
    lines = command_lines(
        'Run `searchfuse --config c.json search "q" [--count N] [--json]`, then\n'
        "```console\n$ searchfuse diagnose --probe\n```\n"
    )
    assert [(c, o) for c, o, _ in lines] == [
        ("search", ["--config", "--count", "--json"]),
        ("diagnose", ["--probe"]),
    ]


def test_extraction_is_covered_by_the_rules() -> None:
    """Extraction is rate-limited like search; during a cooldown a known URL is fetched
    directly (the rule the skill this comes from gives for `web_extract`)."""
    rules = BODY.split("## The rules", 1)[1].split("\n## ", 1)[0]
    assert "web_extract" in rules
    assert "fetch that URL directly" in rules
