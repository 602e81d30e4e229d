"""The command line: what it prints, its exit codes, and that it never prints a key."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from searchfuse.cli import main

from .scripted import KEYS, Upstream

REPO = Path(__file__).resolve().parent.parent
K1, K2 = KEYS[:2]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("TAVILY_", "SEARCHFUSE_")):
            monkeypatch.delenv(name)
    return tmp_path


@pytest.fixture
def env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", f"{K1},{K2}")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    for key in KEYS:
        assert key not in out and key not in err
    return code, out, err


def test_status_table_and_json(env_keys: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "tvly-dev-…0001" in out and "tvly-dev-…0002" in out
    assert out.splitlines()[0].split()[:4] == ["KEY", "ACCOUNT", "NOTES", "STATE"]
    code, out, _ = run(capsys, "status", "--json")
    data = json.loads(out)
    assert [d["key"] for d in data] == ["tvly-dev-…0001", "tvly-dev-…0002"]
    assert {"remaining", "cooldown_left", "last_error", "last_sync_age"} <= set(data[0])


def test_search_prints_results_and_who_served(
    env_keys: None, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.search(K1, 200)
    code, out, _ = run(capsys, "search", "what is a fuse", "--count", "3")
    assert code == 0
    assert "1. T" in out and "https://example.com" in out
    assert "served by tavily with key tvly-dev-…0001" in out
    assert upstream.bodies()[0]["max_results"] == 3


def test_search_json(
    env_keys: None, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.search(K1, 200)
    code, out, _ = run(capsys, "search", "q", "--json")
    assert code == 0
    assert json.loads(out)["results"][0]["url"] == "https://example.com"


def test_search_refused_exits_1_with_the_message(
    env_keys: None, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.search(K1, 429, headers={"Retry-After": "42"})
    code, _, err = run(capsys, "search", "q")
    assert code == 1
    assert "429" in err and "42 seconds" in err
    # The state was persisted: the next invocation is refused locally.
    code, _, err = run(capsys, "search", "q", "--json")
    assert code == 1
    assert len(upstream.searches()) == 1


def test_config_error_exits_2_naming_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--config", "missing/keys.json", "status")
    assert code == 2
    assert "missing/keys.json" in err and "Fix:" in err
    code, _, err = run(capsys, "status")
    assert code == 2
    assert "TAVILY_API_KEYS" in err


def test_options_work_after_the_command(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = isolated / "k.json"
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1}]}))
    code, out, _ = run(capsys, "status", "--config", str(path), "--state", "s.json")
    assert code == 0 and "tvly-dev-…0001" in out


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search"]) == 2
    assert main(["no-such-command"]) == 2
    capsys.readouterr()


def test_init_creates_private_config_state_and_gitignore(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated / ".gitignore").write_text("*.pyc\n")
    code, out, _ = run(capsys, "init")
    assert code == 0
    keys = isolated / "config" / "keys.json"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert json.loads(keys.read_text())["format_version"] == 2
    assert (isolated / "state").is_dir()
    ignore = (isolated / ".gitignore").read_text().splitlines()
    assert ignore[0] == "*.pyc"
    for line in ("config/keys.json", "config/keys.json.bak.*", "state/"):
        assert line in ignore
    # Run again: nothing is overwritten or duplicated.
    keys.write_text(json.dumps({"format_version": 2, "keys": [{"key": K1}]}))
    code, out, _ = run(capsys, "init")
    assert "kept" in out
    assert K1 in keys.read_text()
    assert (isolated / ".gitignore").read_text().count("state/") == 1
    # The template still has placeholders: using it unchanged is a clear error.
    keys.write_bytes((isolated / "config" / "keys.example.json").read_bytes())
    code, _, err = run(capsys, "status")
    assert code == 2 and "placeholder" in err


def test_init_into_a_folder(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "init", "proj")
    assert code == 0
    assert (isolated / "proj" / "config" / "keys.json").exists()


def test_shipped_template_matches_repository_example() -> None:
    shipped = REPO / "searchfuse" / "templates" / "keys.example.json"
    assert shipped.read_bytes() == (REPO / "config" / "keys.example.json").read_bytes()


def test_reset_month_and_test_keys(
    env_keys: None, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.search(K1, 503)
    upstream.search(K2, 200)
    assert run(capsys, "search", "q")[0] == 0
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)[0]["state"] == "cooling"
    code, out, _ = run(capsys, "reset-month")
    assert code == 0 and "cleared" in out
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)[0]["state"] == "available"
    code, out, _ = run(capsys, "test-keys")
    assert code == 0
    assert out.count("  ok\n") == 2
    requests = upstream.requests()
    assert [path for path, _ in requests[-2:]] == ["/usage", "/usage"]


def test_diagnose_json(env_keys: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "diagnose", "--json")
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    assert data["verdict"] == "healthy"
    assert [s["name"] for s in data["steps"]] == ["state", "cooldown", "quota", "probe", "verdict"]
    code, out, _ = run(capsys, "diagnose")
    assert "5. verdict: healthy" in out


def test_legacy_script_front(
    env_keys: None, upstream: Upstream, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import tavily_multi_key
    finally:
        sys.path.pop(0)
    assert tavily_multi_key.translate(["search", "--query", "q", "--count", "2"]) == [
        "search",
        "q",
        "--count",
        "2",
    ]
    upstream.search(K1, 200)
    assert tavily_multi_key.main(["search", "--query", "q", "--count", "2"]) == 0
    assert tavily_multi_key.main(["status"]) == 0
    assert tavily_multi_key.main(["reset-month"]) == 0
    out = capsys.readouterr().out
    assert "served by tavily" in out and K1 not in out


def test_python_dash_m(env_keys: None) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "searchfuse", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["key"] == "tvly-dev-…0001"
