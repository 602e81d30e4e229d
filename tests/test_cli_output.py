"""What the command line shows of text it did not write: keys file fields, stored
state, server answers. Keys never show raw; control characters never reach the
terminal as they are; JSON output stays valid JSON."""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router
from searchfuse.cli import format_status, main
from searchfuse.router.state import MemoryStore
from searchfuse.testing import FakeClock, FakeTavily

from .scripted import Upstream, isolate_cli, search_body

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"
# A made-up key that does not look like a Tavily key: only the configured keys
# (not the generic tvly- pattern) can mask it.
PLAIN = "madeupkeytest0003"
RAW = (K1, K2, PLAIN)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    isolate_cli(tmp_path, monkeypatch)
    yield tmp_path
    # The legacy files the tests wrote hold raw keys on purpose; what searchfuse
    # wrote beside them is checked for leaks after this.
    for legacy in tmp_path.rglob("quota.json"):
        legacy.unlink()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    for key in RAW:
        assert key not in out, f"{key} raw on stdout"
        assert key not in err, f"{key} raw on stderr"
    return code, out, err


def write_keys(root: Path, keys: list[dict[str, Any]]) -> Path:
    path = root / "config" / "keys.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format_version": 2, "keys": keys}))
    path.chmod(0o600)
    return path


def legacy_state(root: Path, key: str, error: str, reason: str = "auth") -> None:
    """A `state/quota.json` as an older version wrote it, with a raw key in its error."""
    state = root / "state"
    state.mkdir(exist_ok=True)
    fp = FakeTavily.fingerprint(key)
    record = {"cooldown_until": 4e9, "cooldown_reason": reason, "last_error": error}
    (state / "quota.json").write_text(json.dumps({"month": "2026-01", "keys": {fp: record}}))


# -- 1. keys pasted into text fields -----------------------------------------------------


def test_status_masks_keys_pasted_into_account_and_notes(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_keys(
        isolated,
        [
            {"key": K1, "account": K2},
            {"key": K2, "notes": f"see {K1}"},
            {"key": PLAIN, "notes": f"old key {PLAIN} and Bearer {PLAIN}xyz"},
        ],
    )
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "tvly-dev-…0002" in out and "see tvly-dev-…0001" in out
    code, out, _ = run(capsys, "status", "--json")
    assert code == 0
    data = json.loads(out)
    assert data[0]["account"] == "tvly-dev-…0002"
    assert data[1]["notes"] == "see tvly-dev-…0001"
    assert data[2]["notes"] == "old key …0003 and Bearer …0003xyz"


def test_imported_legacy_state_never_holds_or_shows_a_raw_key(isolated: Path) -> None:
    root = isolated / "proj"
    write_keys(root, [{"key": K1}, {"key": K2}])
    legacy_state(root, K1, f"401: invalid key {K1}")
    clock = FakeClock()
    fake = FakeTavily([K1, K2], clock=clock)
    router = Router.from_config(
        root / "config" / "keys.json", transport=fake.transport(), clock=clock, sleep=clock.advance
    )
    errors = [s.last_error for s in router.status()]
    assert "401: invalid key tvly-dev-…0001" in errors
    diagnosis = router.diagnose()
    shown = json.dumps(diagnosis.to_dict(), ensure_ascii=False) + str(diagnosis)
    assert "tvly-dev-…0001" in shown
    router.search("q")
    db = root / "state" / "searchfuse.db"
    rows = sqlite3.connect(db).execute("select last_error from keys").fetchall()
    assert ("401: invalid key tvly-dev-…0001",) in rows
    for path in db.parent.iterdir():
        if path.name.startswith("searchfuse.db"):
            assert K1.encode() not in path.read_bytes(), path.name
    for key in RAW:
        assert key not in shown


def test_diagnose_and_test_keys_mask_stored_errors_and_notes(
    isolated: Path, capsys: pytest.CaptureFixture[str], upstream: Upstream
) -> None:
    write_keys(isolated, [{"key": K1, "account": PLAIN}, {"key": PLAIN, "notes": K1}])
    legacy_state(isolated, PLAIN, f"401: invalid key {PLAIN}", reason=f"auth {PLAIN}")
    for argv in (["diagnose"], ["diagnose", "--json"], ["test-keys"], ["test-keys", "--json"]):
        code, out, _ = run(capsys, *argv)
        assert code in (0, 1)
        assert out.strip()
        if "--json" in argv:
            json.loads(out)


def test_search_output_masks_a_configured_key_echoed_by_the_server(
    isolated: Path, capsys: pytest.CaptureFixture[str], upstream: Upstream
) -> None:
    write_keys(isolated, [{"key": PLAIN}])
    body = search_body()
    body["answer"] = f"your key is {PLAIN}"
    body["results"][0]["content"] = f"leaked {PLAIN}"
    upstream.search(PLAIN, 200, json_body=body, reusable=True)
    code, out, _ = run(capsys, "search", "q")
    assert code == 0 and "your key is …0003" in out
    code, out, _ = run(capsys, "search", "q", "--json")
    assert code == 0 and json.loads(out)["answer"] == "your key is …0003"


def test_log_lines_mask_configured_keys(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import searchfuse.cli as cli

    write_keys(isolated, [{"key": PLAIN}])
    root = logging.getLogger()
    saved = root.handlers[:]
    monkeypatch.setattr(root, "handlers", [])
    original = cli.cmd_status

    def status_and_log(args: Any) -> int:
        code = original(args)
        logging.getLogger("searchfuse.test").warning("key %s\x1b[2J", PLAIN)
        return code

    monkeypatch.setattr(cli, "cmd_status", status_and_log)
    try:
        code = main(["status"])
    finally:
        for handler in root.handlers:
            root.removeHandler(handler)
        root.handlers[:] = saved
    assert code == 0
    _, err = capsys.readouterr()
    assert PLAIN not in err and "\x1b" not in err
    assert "key …0003" in err and "\\x1b[2J" in err


# -- 2. control characters -----------------------------------------------------------------


def test_escape_sequences_from_config_and_state_never_reach_the_terminal(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = "a\x1b[31mred\x07\rline\u202e"
    write_keys(isolated, [{"key": K1, "notes": notes, "account": "x\x1b]0;title\x07"}])
    legacy_state(isolated, K1, "401: bad\x1b[2J\x9b", reason="auth")
    for argv in (["status"], ["diagnose"]):
        _, out, err = run(capsys, *argv)
        for ch in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
            assert ch not in out and ch not in err, (argv, ch)
    _, out, _ = run(capsys, "status")
    assert "a\\x1b[31mred\\x07\\rline\\u202e" in out
    _, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)[0]["notes"] == notes
    assert "\x1b" not in out


def test_status_table_escapes_controls_before_fitting_columns() -> None:
    clock = FakeClock()
    router = Router([K1], state=MemoryStore(), clock=clock)
    [record] = router.status()
    from dataclasses import replace

    table = format_status([replace(record, notes="tab\there\nnext")], width=200)
    assert "tab\\there\\nnext" in table
    assert len(table.splitlines()) == 2


# -- 5. init and demo ----------------------------------------------------------------------


def test_init_reports_only_what_it_created(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "init")
    assert code == 0 and "created state/ for router state" in out
    code, out, _ = run(capsys, "init", "--json")
    assert code == 0
    done = json.loads(out)
    assert done["created"] == [] and done["updated"] == []
    assert done["kept"] == ["config/keys.json"]
    code, out, _ = run(capsys, "init")
    assert "created" not in out
    assert (isolated / "state").is_dir()


def test_init_warns_about_a_kept_keys_file_others_can_read(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = write_keys(isolated, [{"key": K1}])
    keys.chmod(0o644)
    code, out, err = run(capsys, "init")
    assert code == 0 and "kept config/keys.json" in out
    assert "can be read by other users (mode 644); run: chmod 600 config/keys.json" in err
    assert keys.stat().st_mode & 0o777 == 0o644  # named, not changed behind the user's back
    code, out, err = run(capsys, "init", "--json")
    assert "mode 644" in json.loads(out)["warnings"][0]


@pytest.mark.parametrize("command", ["init", "demo"])
@pytest.mark.parametrize("options", [["--config", "other/keys.json"], ["--state", "elsewhere.db"]])
def test_init_and_demo_refuse_config_and_state(
    isolated: Path, capsys: pytest.CaptureFixture[str], command: str, options: list[str]
) -> None:
    for argv in ([*options, command], [command, *options]):
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert out == ""
        assert f"searchfuse {command}: error: {options[0]} does not apply to {command}" in err
        assert len(err.splitlines()) == 1
    assert not (isolated / "config").exists() and not (isolated / "state").exists()


@pytest.mark.parametrize("command", ["init", "demo"])
def test_init_and_demo_help_offers_only_what_they_accept(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "--config" not in out and "--state" not in out
    assert "--json" in out and "--verbose" in out
    code, out, _ = run(capsys, "status", "--help")
    assert "--config" in out and "--state" in out


def test_status_says_unknown_before_a_sync_and_names_a_hold() -> None:
    from dataclasses import replace

    clock = FakeClock()
    router = Router([K1, K2], state=MemoryStore(), clock=clock)
    never, synced = router.status()
    synced = replace(synced, last_sync_age=5.0, key_usage=3.0, key_limit=None, plan_limit=None)
    held = replace(never, state="held", cooldown_left=60.0, cooldown_reason=None)
    lines = format_status([never, synced, held], width=200).splitlines()
    assert "?/?" in lines[1] and "unlimited" not in lines[1]  # unknown is not unlimited
    assert "3/unlimited" in lines[2]  # Tavily answered no limit: unlimited
    assert "60 s (held)" in lines[3] and "None" not in lines[3]


# -- 3. links the user made ----------------------------------------------------------------


def test_migrating_a_linked_legacy_keys_file_migrates_its_target_and_keeps_the_link(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = isolated / "secrets" / "tavily.json"
    real.parent.mkdir()
    real.write_text(json.dumps([K1]))
    real.chmod(0o600)
    link = isolated / "config" / "keys.json"
    link.parent.mkdir()
    link.symlink_to(real)
    code, _, _ = run(capsys, "status")
    assert code == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    migrated = json.loads(real.read_text())
    assert migrated["format_version"] == 2 and migrated["keys"][0]["key"] == K1
    assert real.stat().st_mode & 0o777 == 0o600
    (backup,) = real.parent.glob("tavily.json.bak.*")
    assert json.loads(backup.read_text()) == [K1]
    assert sorted(p.name for p in link.parent.iterdir()) == ["keys.json"]
    backup.unlink()


@pytest.mark.parametrize("how", ["default", "--config", "SEARCHFUSE_CONFIG"])
def test_a_dangling_keys_file_link_is_named(
    isolated: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", K1)  # never silently used instead
    link = isolated / "config" / "keys.json"
    link.parent.mkdir()
    link.symlink_to(isolated / "gone.json")
    argv = ["status"]
    if how == "--config":
        argv = ["--config", "config/keys.json", "status"]
    elif how == "SEARCHFUSE_CONFIG":
        monkeypatch.setenv("SEARCHFUSE_CONFIG", "config/keys.json")
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "config/keys.json" in err and "symbolic link to" in err and "gone.json" in err
    assert "does not exist" in err


# -- 4. messages that name the field and the fix -----------------------------------------


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"format_version": 2, "keys": [{"key": K1, "account": 5}]}, "'keys[0].account'"),
        ({"keys": [{"key": K1}, {"key": K2, "source": 5}]}, "'keys[1].source'"),
        ({"format_version": 2, "keys": [{"key": K1, "notes": 5}]}, "'keys[0].notes'"),
        ({"format_version": 2, "keys": [{"key": K1, "rpm": "x"}]}, "'keys[0].rpm'"),
    ],
)
def test_type_errors_name_the_field(
    isolated: Path, capsys: pytest.CaptureFixture[str], keys: dict[str, Any], field: str
) -> None:
    path = isolated / "config" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps(keys))
    path.chmod(0o600)
    code, _, err = run(capsys, "status")
    assert code == 2
    assert f"field {field}" in err
    assert path.read_text() == json.dumps(keys)  # nothing rewritten


def test_a_key_field_written_twice_is_refused(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = isolated / "config" / "keys.json"
    path.parent.mkdir()
    text = f'{{"format_version":2,"keys":[{{"key":"{K1}"}},{{"key":"{K2}","key":"{K1}"}}]}}'
    path.write_text(text)
    path.chmod(0o600)
    code, _, err = run(capsys, "status")
    assert code == 2
    assert "field 'keys[1].key'" in err and "appears more than once" in err
    path.write_text('{"format_version":2,"format_version":2,"keys":[{"key":"' + K1 + '"}]}')
    code, _, err = run(capsys, "status")
    assert code == 2 and "field 'format_version'" in err


def test_a_folder_as_keys_file_says_so(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated / "conf").mkdir()
    code, _, err = run(capsys, "--config", "conf", "status")
    assert code == 2
    assert "it is a folder, not a keys file" in err and "conf/keys.json" in err
    assert "permissions" not in err


@pytest.mark.parametrize(
    ("env", "said", "unsaid"),
    [
        ({"TAVILY_API_KEYS": ","}, "holds no key", "neither"),
        ({"TAVILY_API_KEYS": " , ,"}, "holds no key", "neither"),
        ({"TAVILY_API_KEYS": K1, "SEARCHFUSE_RPM": "abc"}, "unset SEARCHFUSE_RPM", "remove the"),
        ({"TAVILY_API_KEYS": f"{K1},tvly-your-key-1"}, "key 2 of 2: key#", "key 1 of"),
    ],
)
def test_environment_errors_say_what_is_wrong_with_the_variable(
    isolated: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    said: str,
    unsaid: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "status")
    assert code == 2
    assert said in err and unsaid not in err


def test_a_placeholder_in_a_keys_file_is_shown_with_its_field(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_keys(isolated, [{"key": K1}, {"key": "tvly-your-key-2"}])
    code, _, err = run(capsys, "status")
    assert code == 2
    assert "field 'keys[1].key': key#" in err and "is a placeholder from a template" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_working_folder_names_the_state_path(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_keys(isolated, [{"key": K1}])
    isolated.chmod(0o500)
    try:
        code, _, err = run(capsys, "status")
    finally:
        isolated.chmod(0o700)
    assert code == 2
    assert f"cannot keep the router state at {isolated / 'state'}" in err
    assert "--state PATH or SEARCHFUSE_STATE" in err


def test_a_state_folder_that_cannot_be_made_names_the_full_path(
    isolated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import searchfuse.cli as cli

    # What a read-only working folder does to the default state folder (root
    # bypasses the mode bits, so the failure is raised where the store makes it).
    def read_only(*_: Any, **__: Any) -> Router:
        raise OSError(errno.EROFS, "Read-only file system", "state")

    monkeypatch.setattr(cli.Router, "from_config", read_only)
    write_keys(isolated, [{"key": K1}])
    code, out, err = run(capsys, "status", "--json")
    assert code == 2
    message = json.loads(out)["message"]
    assert message == err.strip()
    assert f"cannot keep the router state at {isolated / 'state'} (Read-only file system)" in err
    assert "--state PATH or SEARCHFUSE_STATE" in err


def test_init_writes_a_publishable_copy_of_the_keys_file_without_its_secrets(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [
        {"key": K1, "account": "me@private.example", "notes": "my card"},
        {"key": K2, "account": "me@private.example", "rpm": 50},
        {"key": PLAIN, "provider": "exa", "rate": "10/s", "account": "other@private.example"},
        {"provider": "searxng", "url": "http://bob:Pw0rd@10.0.0.2:8888"},
    ]
    write_keys(isolated, entries)
    code, out, _ = run(capsys, "init")
    assert code == 0 and "created config/keys.publish.json" in out
    text = (isolated / "config" / "keys.publish.json").read_text()
    for secret in (*RAW, "private.example", "my card", "Pw0rd", "bob"):
        assert secret not in text
    published = json.loads(text)["keys"]
    assert [e.get("provider", "tavily") for e in published] == [
        "tavily",
        "tavily",
        "exa",
        "searxng",
    ]
    assert [e.get("account") for e in published] == ["account-1", "account-1", "account-2", None]
    assert published[1]["rpm"] == 50 and published[2]["rate"] == "10/s"
    assert published[0]["key"] == "tvly-your-key-1" and published[2]["key"] == "exa-your-key-1"
    # Kept as it is on the next run, like every file init made.
    (isolated / "config" / "keys.publish.json").write_text("{}")
    run(capsys, "init")
    assert (isolated / "config" / "keys.publish.json").read_text() == "{}"


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize(
    "argv",
    [["status"], ["status", "--budgets"], ["diagnose"], ["status", "--json"], ["search"]],
)
def test_a_terminal_that_cannot_show_unicode_gets_plain_text_not_a_traceback(
    encoding: str, argv: list[str], tmp_path: Path
) -> None:
    """A non-UTF-8 locale (LANG=C on an old system, a latin-1 terminal): the output
    spells masked keys with `~` and every command still succeeds or fails as it would."""
    env = {
        **os.environ,
        "PYTHONIOENCODING": encoding,
        "TAVILY_API_KEYS": "tvly-dev-test0001,tvly-dev-test0002",
        "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "searchfuse", *argv],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    out, err = done.stdout.decode(encoding), done.stderr.decode(encoding)
    assert "Traceback" not in err and "UnicodeEncodeError" not in err, err
    assert done.returncode == (2 if argv == ["search"] else 0), err
    if argv == ["status"]:
        lines = out.splitlines()
        assert lines[1].startswith("tvly-dev-~0001 ")
        assert lines[0].index("ACCOUNT") == lines[1].index("-  ")  # still aligned
    if argv == ["status", "--json"]:
        assert json.loads(out)[0]["key"] == "tvly-dev-\u20260001"
    assert "tvly-dev-test0001" not in out + err


def test_the_watch_view_on_a_terminal_that_cannot_show_unicode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TAVILY_API_KEYS", "tvly-dev-test0001")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stream)

    from searchfuse import _watch

    one_read = functools.partial(_watch.watch, rounds=1, sleep=lambda seconds: None)
    monkeypatch.setattr(_watch, "watch", one_read)
    assert main(["status", "--watch", "--interval", "1"]) == 0
    shown = raw.getvalue().decode("ascii")
    assert "tvly-dev-~0001" in shown and "searchfuse - " in shown
