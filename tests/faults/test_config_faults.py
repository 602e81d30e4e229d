"""Bad configuration is refused at load with a ConfigError that names the place and the fix."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchfuse import ConfigError, Router
from searchfuse.cli import main
from searchfuse.router.config import config_from_env, load_config

KEY1 = "tvly-dev-test0001"
KEY2 = "tvly-dev-test0002"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f'"{KEY1},{KEY2}"', "quotes"),
        (f"'{KEY1},{KEY2}'", "quotes"),
        (f'{KEY1},"{KEY2}"', "quote"),
        (f"{KEY1};{KEY2}", "';'"),
        (f"{KEY1}; {KEY2}", "';'"),
        ("tvly-dev-tést0001", "character"),
        ("tvly-dev-test\x000001", "NUL"),
        ("tvly-dev-test\u200b0001", "U+200B"),
        ("   ", "white space"),
        ("\t\n", "white space"),
    ],
)
def test_common_env_list_mistakes_are_refused_with_how_to_write_it(
    value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_env({"TAVILY_API_KEYS": value})
    err = info.value
    assert err.field == "TAVILY_API_KEYS"
    assert problem in err.problem
    assert "comma-separated" in err.fix and "TAVILY_API_KEYS=tvly-...,tvly-..." in err.fix
    for key in (KEY1, KEY2):
        assert key not in str(err)


def test_router_from_env_refuses_them_too() -> None:
    with pytest.raises(ConfigError, match="TAVILY_API_KEYS"):
        Router.from_env({"TAVILY_API_KEYS": f"{KEY1};{KEY2}"})


def test_a_correct_list_still_loads() -> None:
    config = config_from_env({"TAVILY_API_KEYS": f" {KEY1} ,{KEY2},\n"})
    assert [e.key for e in config.keys] == [KEY1, KEY2]


@pytest.mark.parametrize("bad", ["abc", "-1", "nan", "inf", "1e400"])
def test_bad_cooldown_variable_is_named_not_the_keys(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_env({"TAVILY_API_KEYS": KEY1, "SEARCHFUSE_COOLDOWN_MINUTES": bad})
    assert info.value.field == "SEARCHFUSE_COOLDOWN_MINUTES"
    assert "TAVILY_API_KEYS" not in str(info.value)


@pytest.mark.parametrize(
    "key", ["tvly-dev-te\x00st0001", "tvly-dev-tést0001", '"tvly-dev-test0001"', "tvly-a;tvly-b"]
)
def test_keys_file_with_unusable_characters_is_refused(tmp_path: Path, key: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": key}]}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "keys[0].key"
    assert str(path) in str(info.value)


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deeply_nested_keys_file_is_a_config_error(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "keys.json"
    path.write_text("[" * depth + "]" * depth)
    with pytest.raises(ConfigError, match="nested"):
        load_config(path)


def test_world_readable_keys_file_warns_once_naming_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY1}]}))
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        load_config(path)
        load_config(path)
        Router.from_config(path, state=None)
    warnings = [r.getMessage() for r in caplog.records if "other users" in r.getMessage()]
    assert len(warnings) == 1
    assert f"chmod 600 {path}" in warnings[0]


def test_private_keys_file_does_not_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY1}]}))
    os.chmod(path, 0o600)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        load_config(path)
    assert not [r for r in caplog.records if "other users" in r.getMessage()]


def test_legacy_migration_keeps_unknown_fields_and_names_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    legacy = {
        "cooldown_minutes": 10,
        "team": "search",
        "keys": [{"key": KEY1, "source": "a@example.com", "rpm_hint": 60}, KEY2],
    }
    path.write_text(json.dumps(legacy))
    os.chmod(path, 0o600)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        config = load_config(path)
    migrated = json.loads(path.read_text())
    assert migrated["format_version"] == 2
    assert migrated["team"] == "search"
    assert migrated["keys"][0]["rpm_hint"] == 60
    assert migrated["keys"][0]["account"] == "a@example.com"
    assert [e.key for e in config.keys] == [KEY1, KEY2]
    kept = [r.getMessage() for r in caplog.records if "kept as they were" in r.getMessage()]
    assert kept and "team" in kept[0] and "keys[].rpm_hint" in kept[0]
    # The backup is the original, byte for byte.
    (backup,) = path.parent.glob("keys.json.bak.*")
    assert json.loads(backup.read_text()) == legacy


def _stale_temp(folder: Path, name: str, age: float) -> Path:
    temp = folder / name
    temp.write_text('{"keys": ["tvly-dev-test0001"]}')
    os.chmod(temp, 0o600)
    old = time.time() - age
    os.utime(temp, (old, old))
    return temp


def test_stale_temp_files_of_a_killed_write_are_cleaned_on_next_load(tmp_path: Path) -> None:
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY1}]}))
    os.chmod(path, 0o600)
    stale = _stale_temp(path.parent, ".keys.json.ab12cd_9.tmp", 3600)
    # Left a second ago by a process that is gone: nobody holds its lock.
    orphan = _stale_temp(path.parent, ".keys.json.or12ph34.tmp", 1)
    busy = _stale_temp(path.parent, ".keys.json.zz99yy88.tmp", 1)  # a write in progress
    foreign = _stale_temp(path.parent, ".keys.json.notours.bak", 3600)
    loose = _stale_temp(path.parent, ".keys.json.qq11ww22.tmp", 3600)
    os.chmod(loose, 0o644)  # not written by atomic_write (it creates 0600)
    with open(busy, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as atomic_write holds its temp file
        load_config(path)
    assert not stale.exists() and not orphan.exists()
    assert busy.exists() and foreign.exists() and loose.exists()


_KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from searchfuse import _files

def stuck(src, dst):
    print("writing", flush=True)
    time.sleep(60)

os.replace = stuck
_files.atomic_write(Path(sys.argv[1]), b'{"format_version": 2, "keys": [{"key": "%s"}]}')
"""


def test_a_write_killed_mid_way_leaves_no_key_behind_after_the_next_load(tmp_path: Path) -> None:
    """kill -9 between a temp file's last byte and its rename (what a migration or a
    rewrite of keys.json does): the next load removes the temp file at once, and a
    temp file whose writer still runs is left alone."""
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": KEY1}]}))
    os.chmod(path, 0o600)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER % KEY2, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        (temp,) = path.parent.glob(".keys.json.*.tmp")
        assert KEY2 in temp.read_text()
        load_config(path)
        assert temp.exists()  # its writer is alive: a write in progress
    finally:
        writer.kill()
        writer.wait(timeout=10)
    load_config(path)
    assert not list(path.parent.glob(".keys.json.*.tmp"))
    assert KEY2 not in "".join(p.read_text() for p in path.parent.iterdir())


def test_a_migrated_file_is_private_and_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"keys": [KEY1, KEY2]}))  # legacy, as the skill wrote it
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        load_config(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (backup,) = path.parent.glob("keys.json.bak.*")
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    messages = [r.getMessage() for r in caplog.records]
    assert any("migrated" in m for m in messages)
    assert not [m for m in messages if "other users" in m]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_init_ignores_temp_backup_and_moved_aside_files(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path)]) == 0
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    names = [
        "config/keys.json",
        "config/keys.json.bak.20261130T000000Z",
        "config/.keys.json.ab12cd34.tmp",
        "config/keys.json.corrupt.20261130T000000Z",
        "state/searchfuse.db",
        "state/.quota.json.ab12cd34.tmp",
    ]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    out = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", *names], capture_output=True, text=True
    )
    assert sorted(out.stdout.split()) == sorted(names)
    for committable in ("config/keys.example.json", "config/keys.publish.json"):
        tracked = subprocess.run(
            ["git", "-C", str(tmp_path), "check-ignore", committable],
            capture_output=True,
            text=True,
        )
        assert tracked.returncode == 1, committable  # the templates stay committable
