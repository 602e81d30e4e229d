"""A password in a URL never reaches a message, whatever the URL's scheme.

Every URL searchfuse takes (a state URL, a base URL, a SearXNG instance, a
keys file's `url`) may carry `user:password@`. The error that refuses one
quotes it: with the user name and password replaced by `***`, on every path
(the exception, the CLI's stderr and its `--json` output).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from searchfuse import ConfigError, Router
from searchfuse._secrets import redact, redact_userinfo
from searchfuse.cli import main

from ..scripted import isolate_cli

SECRET = "Pw0rdSecret9"
KEY = "tvly-dev-test0001"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    return tmp_path


URLS = [
    f"redis+sentinel://:{SECRET}@host/0",
    f"foo://admin:{SECRET}@x",
    f"sqlite://u:{SECRET}@/tmp/x.db",
    f"HTTP+unix://:{SECRET}@sock",
    f"ftp://user:{SECRET}@files.example",
]


@pytest.mark.parametrize("url", URLS)
def test_a_refused_state_url_is_quoted_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Router([KEY], state=url)
    text = str(caught.value)
    assert SECRET not in text and SECRET not in repr(caught.value)
    assert "***@" in text
    assert SECRET not in caught.value.problem + caught.value.fix + caught.value.source


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize(
    "build",
    [
        lambda url: Router([KEY], base_url=url, state=None),
        lambda url: Router({"searxng": [url]}, state=None),
        lambda url: Router({"tavily": [KEY]}, base_urls={"tavily": url}, state=None),
    ],
    ids=["base_url", "searxng", "base_urls"],
)
def test_a_refused_address_is_quoted_without_its_password(url: str, build: object) -> None:
    with pytest.raises(ConfigError) as caught:
        build(url)  # type: ignore[operator]
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("url", URLS)
def test_the_cli_never_prints_a_url_password(
    url: str, isolated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    assert main(["status", "--state", url]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "***@" in err
    monkeypatch.setenv("TAVILY_BASE_URL", url)
    assert main(["status", "--json"]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert json.loads(out)["error"] == "config"
    monkeypatch.delenv("TAVILY_BASE_URL")
    monkeypatch.setenv("SEARXNG_URL", url)
    assert main(["diagnose"]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err


def test_a_keys_file_url_with_a_password_is_refused_without_it(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = isolated / "config" / "keys.json"
    path.parent.mkdir()
    entry = {"provider": "searxng", "url": f"gopher://bob:{SECRET}@search.example"}
    path.write_text(json.dumps({"format_version": 2, "keys": [entry]}))
    path.chmod(0o600)
    assert main(["status"]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "keys[0].url" in err


def test_userinfo_redaction_leaves_other_at_signs_alone() -> None:
    assert redact_userinfo("see https://host/path@v2 and a@b.c") == (
        "see https://host/path@v2 and a@b.c"
    )
    assert redact_userinfo(f"x rediss://u:{SECRET}@h:1/0 y") == "x rediss://***@h:1/0 y"
    assert SECRET not in redact(f"upstream said: unix://:{SECRET}@/run/r.sock", ())


# -- the environment: exit 2, and a Redis database that is not a number ------------


@pytest.mark.parametrize("command", [["status"], ["diagnose"], ["search", "q"], ["reset-month"]])
def test_an_unreachable_redis_is_an_environment_error(
    command: list[str],
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    url = f"redis://:{SECRET}@127.0.0.1:1/0"  # nothing listens on port 1
    assert main([*command, "--state", url]) == 2
    out, err = capsys.readouterr()
    assert "cannot be reached" in err and SECRET not in out + err
    assert main([*command, "--json", "--state", url]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "store"


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/zero",
        "redis://127.0.0.1:6379/0?db=one",
        "rediss://127.0.0.1:6379/1x",
        "unix:///run/redis.sock?db=first",
        "redis://127.0.0.1:6379/٣",  # a digit, but not an ASCII one
    ],
)
def test_a_redis_database_that_is_not_a_number_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="is not a number") as caught:
        Router([KEY], state=url)
    assert "redis://127.0.0.1:6379/0" in caught.value.fix
