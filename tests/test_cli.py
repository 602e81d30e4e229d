"""The command line: what it prints, its exit codes, and that it never prints a key."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import searchfuse
from searchfuse import CooldownActive, NoKeyAvailable, RateLimited
from searchfuse.cli import build_parser, explain_refusal, format_status, main
from searchfuse.router.status import KeyStatus
from searchfuse.testing import FakeClock, FakeTavily

from .scripted import KEYS, Upstream, isolate_cli

REPO = Path(__file__).resolve().parent.parent
K1, K2 = KEYS[:2]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
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


def test_env_keys_keep_state_in_the_user_state_directory(
    env_keys: None, upstream: Upstream, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream.search(K1, 200)
    code, _, _ = run(capsys, "search", "q")
    assert code == 0
    assert (isolated / "xdg-state" / "searchfuse" / "searchfuse.db").is_file()
    assert sorted(p.name for p in isolated.iterdir()) == ["xdg-state"]


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
    # Written for a person: what happened and when to try again; not the model's rules.
    assert "Tavily answered 429" in err and "Try again in 42 s (after " in err
    assert "do not switch" not in err.lower()
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


# -- conventions: --version, usage errors, exit codes, --json ---------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"searchfuse {searchfuse.__version__}"


def _a_file(isolated: Path) -> str:
    (isolated / "afile").write_text("not a folder\n")
    return "afile"


#: Every argument of every command, given a value it cannot use.
BAD_COMMAND_LINES: list[tuple[str, ...]] = [
    (),
    ("no-such-command",),
    ("--no-such-option", "status"),
    ("search",),
    ("search", ""),
    ("search", "   "),
    ("search", "x" * 401),
    ("search", "--query", ""),
    ("search", "q", "--query", "q2"),
    ("search", "q", "--count", "-1"),
    ("search", "q", "--count", "21"),
    ("search", "q", "--count", "abc"),
    ("search", "q", "--count"),
    ("search", "q", "--depth", "deep"),
    ("search", "q", "--topic", "sports"),
    ("search", "q", "extra"),
    ("--config", "", "status"),
    ("status", "--state", ""),
    ("status", "--config"),
    ("status", "extra"),
    ("test-keys", "--count", "1"),
    ("reset-month", "now"),
    ("diagnose", "--probe=yes"),
    ("demo", "--fast"),
    ("init", "afile"),
    ("init", "afile/sub"),
    ("init", ""),
    ("init", "a", "b"),
    ("mcp", "--http", "abc"),
    ("mcp", "--http", "0"),
    ("mcp", "--http", "65536"),
    ("mcp", "--host"),
    ("mcp", "extra"),
]


@pytest.mark.parametrize("argv", BAD_COMMAND_LINES, ids=lambda a: " ".join(a) or "(nothing)")
def test_usage_errors_exit_2_with_one_line(
    argv: tuple[str, ...],
    env_keys: None,
    upstream: Upstream,
    isolated: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _a_file(isolated)
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "error" in err and "Traceback" not in err
    assert upstream.requests() == []  # nothing was sent
    # With --json the same error is a JSON object on stdout.
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 2
    assert json.loads(out)["error"] == "usage"


def test_init_refuses_a_keys_path_that_is_a_folder(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated / "config" / "keys.json").mkdir(parents=True)
    code, out, err = run(capsys, "init")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"searchfuse init: error: {Path('config/keys.json')} exists and is not a file"
    ]
    assert (isolated / "config" / "keys.json").is_dir()  # nothing was touched
    assert not (isolated / ".gitignore").exists()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SEARCHFUSE_COOLDOWN_MINUTES", "abc"), ("TAVILY_API_KEYS", " , ")],
)
def test_bad_environment_exits_2_with_one_line(
    variable: str,
    value: str,
    env_keys: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    code, out, err = run(capsys, "status")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and variable in err


def test_a_config_path_that_is_a_folder_exits_2(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated / "conf").mkdir()
    code, out, err = run(capsys, "status", "--config", "conf", "--json")
    assert code == 2
    assert json.loads(out)["error"] == "config"
    assert len(err.strip().splitlines()) == 1 and "conf" in err


def test_usage_error_in_a_real_process_has_no_traceback(env_keys: None) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "searchfuse", "search", "q", "--count", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "searchfuse search: error: argument --count/-n: -1 is not in 0-20 "
        "(see searchfuse search --help)"
    ]


def test_test_keys_exits_1_when_any_key_fails(
    env_keys: None, tavily_mock: FakeTavily, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "test-keys")
    assert code == 0 and out.count("  ok\n") == 2
    tavily_mock.revoke(K2)
    code, out, _ = run(capsys, "test-keys")
    assert code == 1
    assert "tvly-dev-…0001  ok" in out and "tvly-dev-…0002  FAIL" in out
    code, out, _ = run(capsys, "test-keys", "--json")
    assert code == 1
    assert [r["ok"] for r in json.loads(out)] == [True, False]
    assert len(tavily_mock.searches) == 0  # probing never searches


def test_every_command_that_prints_data_has_json(
    env_keys: None, tavily_mock: FakeTavily, isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    # Servers print no data: they serve it.
    commands = {
        name: p for name, p in sub.choices.items() if name not in ("mcp", "gateway", "dashboard")
    }
    for name, p in commands.items():
        assert "--json" in p._option_string_actions, f"{name} has no --json"
    argvs = {
        "status": ["status"],
        "test-keys": ["test-keys"],
        "search": ["search", "--query", "q", "--count", "2"],
        "reset-month": ["reset-month"],
        "diagnose": ["diagnose"],
        "init": ["init", "proj"],
        "demo": ["demo"],
    }
    assert set(argvs) == set(commands)
    for name, argv in argvs.items():
        code, out, _ = run(capsys, *argv, "--json")
        assert code == 0, name
        json.loads(out)  # valid JSON, nothing else on stdout
    code, out, _ = run(capsys, "reset-month", "--json")
    assert json.loads(out) == {"cleared": 2, "keys": ["tvly-dev-…0001", "tvly-dev-…0002"]}
    code, out, _ = run(capsys, "init", "proj", "--json")
    assert json.loads(out)["kept"] == [str(Path("proj/config/keys.json"))]


def test_json_stays_json_when_the_search_fails(
    env_keys: None, tavily_mock: FakeTavily, capsys: pytest.CaptureFixture[str]
) -> None:
    tavily_mock.fail_next(400, path="/search")
    code, out, err = run(capsys, "search", "q", "--json")
    assert code == 1
    assert json.loads(out)["error"] == "failed" and "400" in err
    tavily_mock.fail_next(429, retry_after=30, path="/search")
    code, out, err = run(capsys, "search", "q", "--json")
    assert code == 1
    refusal = json.loads(out)
    # The JSON keeps the model-facing message; the person reads stderr.
    assert refusal["error"] == "rate_limited" and refusal["retry_after"] == 30
    assert "do not switch" in refusal["message"].lower()
    assert "Try again in 30 s" in err


# -- text for people -------------------------------------------------------------------


def test_refusals_are_explained_for_people() -> None:
    now = 1_768_478_400.0  # 12:00:00 UTC
    clock_time = time.strftime("%H:%M:%S", time.localtime(now + 42))
    text = explain_refusal(RateLimited(42, key="tvly-dev-…0001"), now=now)
    assert text.startswith("Tavily answered 429 (too many requests) for key tvly-dev-…0001.")
    assert f"Try again in 42 s (after {clock_time})." in text
    text = explain_refusal(CooldownActive(600, cause="rate limit"), now=now)
    assert "Nothing was sent" in text and "Try again in 10 min" in text
    text = explain_refusal(NoKeyAvailable({"tvly-dev-…0001": "auth (401)"}, retry_after=None))
    assert "tvly-dev-…0001: auth (401)" in text and "diagnose --probe" in text
    for refusal in (RateLimited(42), CooldownActive(5), NoKeyAvailable()):
        people = explain_refusal(refusal, now=now)
        assert people != refusal.message
        assert "do not switch" not in people.lower() and "ask whether" not in people


# -- the status table ------------------------------------------------------------------


def _record(**fields: Any) -> KeyStatus:
    base: dict[str, Any] = {
        "key": "tvly-dev-…0001",
        "fingerprint": "fp",
        "account": "main@example.com",
        "notes": "",
        "state": "available",
        "blocked_reason": None,
        "key_usage": 10.0,
        "key_limit": 1000.0,
        "search_usage": 10.0,
        "plan_usage": 10.0,
        "plan_limit": 1000.0,
        "local_credits": 0.0,
        "remaining": 990.0,
        "cooldown_left": 0.0,
        "cooldown_reason": None,
        "cooldown_until": None,
        "last_error": None,
        "last_sync_age": 60.0,
        "searches": 0,
    }
    return KeyStatus(**{**base, **fields})


@pytest.mark.parametrize("width", [50, 80, 100, 130, 250])
def test_status_table_wraps_words_and_never_cuts_them(width: int) -> None:
    notes = "shared research account of the data team, rotated every quarter"
    error = "upstream (503: Service temporarily unavailable, try again later)"
    records = [
        _record(
            notes=notes,
            last_error=error,
            state="cooling",
            cooldown_left=30.0,
            cooldown_reason="upstream",
        ),
        _record(key="tvly-dev-…0002", notes="spare"),
    ]
    table = format_status(records, width=width)
    lines = table.splitlines()
    words = table.split()
    for word in (notes + " " + error).split():
        assert word in words, f"{word!r} was cut at width {width}"
    assert max(len(line) for line in lines) <= width
    if width >= 130:  # a table: one header line, then the keys
        assert lines[0].split()[:4] == ["KEY", "ACCOUNT", "NOTES", "STATE"]
    else:  # one block per key, every field named
        assert lines[0] == "tvly-dev-…0001" and "  last error: upstream (503: Service" in table
    if width == 250:  # room enough: nothing wraps
        assert len(lines) == 3


def test_a_plain_status_table_fits_100_columns() -> None:
    records = [_record(notes="main"), _record(key="tvly-dev-…0002", notes="spare")]
    lines = format_status(records, width=100).splitlines()
    assert len(lines) == 3 and max(len(line) for line in lines) <= 100


def test_status_table_follows_the_terminal_width(
    env_keys: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 100


def test_ages_read_the_same_in_the_table_and_the_diagnosis(
    env_keys: None,
    tavily_mock: FakeTavily,
    fake_clock: FakeClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "test-keys")[0] == 0  # syncs both keys' usage now
    fake_clock.advance(29 * 60 + 12)
    _, table, _ = run(capsys, "status")
    _, diagnosis, _ = run(capsys, "diagnose")
    assert table.splitlines()[1].endswith("30 min ago")
    assert "synced 30 min ago" in diagnosis


# -- the skill's script interface, from an installed wheel ------------------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """searchfuse built as a wheel and installed (without dependencies) into a folder."""
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling")
    root = tmp_path_factory.mktemp("installed")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(REPO)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    wheel = next((root / "dist").glob("searchfuse-*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(root / "site"), str(wheel)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    return root / "site"


LEGACY = [
    ["status", "--json"],
    ["test-keys", "--json"],
    ["search", "--query", "capital of France", "--count", "2", "--json"],
    ["reset-month", "--json"],
]


def test_legacy_commands_work_from_the_installed_package(
    installed: Path, tavily_server: str, isolated: Path
) -> None:
    # A skill folder holding only the script, next to an installed searchfuse.
    skill = isolated / "skill" / "scripts"
    skill.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "tavily_multi_key.py", skill)
    env = {
        **os.environ,
        "PYTHONPATH": str(installed),
        "TAVILY_API_KEYS": f"{K1},{K2}",
        "TAVILY_BASE_URL": tavily_server,
    }
    console = installed / "bin" / "searchfuse"
    assert console.exists()
    fronts = [
        [str(console)],
        [sys.executable, str(skill / "tavily_multi_key.py")],
    ]

    def run_front(front: list[str], home: Path) -> list[Any]:
        """The legacy commands in order, with their own state directory."""
        (home / "state").mkdir(parents=True)
        outputs = []
        for argv in LEGACY:
            proc = subprocess.run(
                [*front, *argv],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                # Each front its own state: the plugin's SEARCHFUSE_STATE would be shared.
                env={
                    **env,
                    "XDG_STATE_HOME": str(home / "xdg-state"),
                    "SEARCHFUSE_STATE": str(home / "state" / "searchfuse.db"),
                },
                cwd=home,
            )
            assert proc.returncode == 0, (front, argv, proc.stdout, proc.stderr)
            assert K1 not in proc.stdout + proc.stderr
            outputs.append(json.loads(proc.stdout))
        return outputs

    # The two fronts at once (each its own state): half the wall time of the processes.
    with concurrent.futures.ThreadPoolExecutor(len(fronts)) as pool:
        runs = [pool.submit(run_front, f, isolated / f"front{i}") for i, f in enumerate(fronts)]
        results = [run.result() for run in runs]
    for status, probes, result, reset in results:
        assert [s["key"] for s in status] == ["tvly-dev-…0001", "tvly-dev-…0002"]
        assert all(p["ok"] for p in probes)
        assert len(result["results"]) == 2
        assert reset == {"cleared": 2, "keys": ["tvly-dev-…0001", "tvly-dev-…0002"]}
    # The code that ran was the installed copy, not this checkout.
    proc = subprocess.run(
        [sys.executable, "-c", "import searchfuse.cli; print(searchfuse.cli.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
        cwd=isolated,
    )
    assert Path(proc.stdout.strip()).is_relative_to(installed)
