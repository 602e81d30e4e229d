"""A configuration or environment error exits 2 in every command, with one line on
stderr (no traceback) and, under `--json`, a JSON error on stdout: a missing state
folder, a state path that is a folder or a keys file, a URL scheme searchfuse does not
know, an unreachable Redis, a missing keys file, a bad setting, no keys at all. Exit 1
stays for searches that failed or were refused, and keys that failed a check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from searchfuse.cli import main

from ..scripted import isolate_cli

KEY = "tvly-dev-test0001"
PASSWORD = "Pw0rdSecret9"

#: Each cause: (what it does to the folder and environment, the words the error says).
Cause = Callable[[Path, pytest.MonkeyPatch], list[str]]


def _keys(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", KEY)


def missing_state_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    return ["--state", str(folder / "no-such-folder" / "searchfuse.db")]


def state_is_a_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    return ["--state", str(folder)]


def state_is_a_keys_file(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    other = folder / "keys.json"
    other.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY}]}))
    return ["--state", str(other)]


def unknown_url_scheme(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    return ["--state", f"redis+sentinel://:{PASSWORD}@127.0.0.1:1/0"]


def unreachable_redis(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    return ["--state", f"redis://:{PASSWORD}@127.0.0.1:1/0"]  # nothing listens on port 1


def missing_keys_file(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return ["--config", str(folder / "config" / "missing.json")]


def bad_setting(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    _keys(folder, monkeypatch)
    monkeypatch.setenv("TAVILY_BASE_URL", "ftp://tavily.example")
    return []


def no_keys(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return []


CAUSES = [
    missing_state_folder,
    state_is_a_folder,
    state_is_a_keys_file,
    unknown_url_scheme,
    unreachable_redis,
    missing_keys_file,
    bad_setting,
    no_keys,
]
COMMANDS = [
    ["status"],
    ["diagnose"],
    ["test-keys"],
    ["search", "q"],
    ["reset-month"],
    ["mcp"],
    ["gateway"],
]
WITH_JSON = {"status", "diagnose", "test-keys", "search", "reset-month"}


@pytest.fixture(autouse=True)
def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mcp` and `gateway` must stop before they serve: were one to start, fail, not hang."""

    def serve(*_: object, **__: object) -> None:
        raise AssertionError("the server started despite the error")

    import searchfuse.gateway
    import searchfuse.integrations.mcp

    monkeypatch.setattr(searchfuse.gateway, "serve", serve)
    monkeypatch.setattr(searchfuse.integrations.mcp, "serve", serve)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: c.__name__)
def test_a_configuration_or_environment_error_exits_2_in_every_command(
    cause: Cause,
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    isolate_cli(tmp_path, monkeypatch)
    options = cause(tmp_path, monkeypatch)
    assert main([*command, *options]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if not line.startswith("WARNING ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert PASSWORD not in out + err
    if command[0] in WITH_JSON:
        assert main([*command, *options, "--json"]) == 2
        out, err = capsys.readouterr()
        assert json.loads(out)["error"] in {"usage", "config", "store"}
        assert PASSWORD not in out + err


def test_ctrl_c_while_the_command_line_is_still_importing_exits_130_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    from searchfuse import _entry

    def interrupted(name: str) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", interrupted)
    assert _entry.main(["status"]) == 130
    out, err = capsys.readouterr()
    assert (out, err) == ("", "searchfuse: interrupted\n")


def test_the_installed_command_and_python_m_run_the_same_entry() -> None:
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"searchfuse": "searchfuse._entry:main"}
    assert "from searchfuse._entry import main" in (root / "searchfuse/__main__.py").read_text()
