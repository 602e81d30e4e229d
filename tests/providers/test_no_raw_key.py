"""No raw key of any provider on any surface: logs, errors, repr, results, status, the
diagnosis, the event log and the CLI, over a chain of all five providers."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router, SearchFuseError
from searchfuse.testing import (
    BRAVE_TEST_KEYS,
    EXA_TEST_KEYS,
    SERPER_TEST_KEYS,
    TEST_KEYS,
    FakeBrave,
    FakeClock,
    FakeExa,
    FakeSearXNG,
    FakeSerper,
    FakeTavily,
)

#: Every key of every provider (SearXNG's "key" is its address, not a secret).
SECRETS = (*TEST_KEYS[:2], *EXA_TEST_KEYS, *BRAVE_TEST_KEYS, *SERPER_TEST_KEYS)


@pytest.fixture
def five(fake_clock: FakeClock, tmp_path: Path) -> Iterator[dict[str, Any]]:
    fakes = {
        "tavily": FakeTavily(TEST_KEYS[:2], clock=fake_clock),
        "exa": FakeExa(EXA_TEST_KEYS, clock=fake_clock),
        "brave": FakeBrave(BRAVE_TEST_KEYS, clock=fake_clock),
        "serper": FakeSerper(SERPER_TEST_KEYS, clock=fake_clock),
        "searxng": FakeSearXNG(clock=fake_clock),
    }
    with ExitStack() as stack:
        urls = {name: stack.enter_context(fake.serve()) for name, fake in fakes.items()}
        yield {"fakes": fakes, "urls": urls, "state": tmp_path / "state" / "searchfuse.db"}


def keys_file(five: dict[str, Any], tmp_path: Path) -> Path:
    urls = five["urls"]
    entries: list[dict[str, Any]] = [{"key": k, "provider": "tavily"} for k in TEST_KEYS[:2]]
    for name, keys in (("exa", EXA_TEST_KEYS), ("brave", BRAVE_TEST_KEYS)):
        entries += [{"key": k, "provider": name} for k in keys]
    entries += [{"key": k, "provider": "serper"} for k in SERPER_TEST_KEYS]
    entries.append({"provider": "searxng", "url": urls["searxng"]})
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format_version": 2, "keys": entries}))
    path.chmod(0o600)
    return path


def test_no_surface_shows_a_raw_key(
    five: dict[str, Any],
    fake_clock: FakeClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    fakes, urls = five["fakes"], five["urls"]
    path = keys_file(five, tmp_path)
    base_urls = {name: urls[name] for name in ("exa", "brave", "serper")}
    router = Router.from_config(
        path, base_url=urls["tavily"], base_urls=base_urls, clock=fake_clock, state=five["state"]
    )
    seen: list[str] = [repr(router), repr(router.keys)]
    # Every provider fails its own way, one after the other, then the last one serves.
    for key in TEST_KEYS[:2]:
        fakes["tavily"].revoke(key)
    fakes["exa"].fail_next(402, times=None, detail=f"key {EXA_TEST_KEYS[0]} is out of credit")
    for key in BRAVE_TEST_KEYS:
        fakes["brave"].revoke(key)
    for key in SERPER_TEST_KEYS:
        fakes["serper"].set_balance(key, 0)
    for query in ("first", "second"):
        try:
            seen.append(json.dumps(router.search(query)))
        except SearchFuseError as exc:
            seen += [str(exc), repr(exc), repr(exc.__dict__)]
    seen += [repr(s) for s in router.status()]
    diagnosis = router.diagnose(probe=True)
    seen += [str(diagnosis), json.dumps(diagnosis.to_dict(), default=str)]
    seen += [repr(r) for r in router.test_keys(spend=True)]
    seen += [json.dumps(e.to_dict()) for e in router.events(200)]
    router.close()
    env = {"SEARCHFUSE_STATE": str(five["state"]), "PATH": "/usr/bin:/bin"}
    for command in (["status"], ["status", "--json"], ["diagnose"], ["test-keys"]):
        proc = subprocess.run(
            [sys.executable, "-m", "searchfuse", *command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        seen += [proc.stdout, proc.stderr]
        assert proc.stdout, (command, proc.stderr)
    out = capfd.readouterr()
    text = "\n".join([*seen, caplog.text, out.out, out.err])
    assert "exa" in text and "serper" in text and "brave" in text  # all were exercised
    for secret in SECRETS:
        assert secret not in text, secret[:6]
    for fake in fakes.values():
        assert all(secret not in repr(fake.requests) for secret in SECRETS)
