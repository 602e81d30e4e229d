"""Values that are not what a setting takes: a clear error at construction,
nothing created or touched on disk, no request sent."""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router
from searchfuse.errors import ConfigError
from searchfuse.router.config import load_config
from searchfuse.router.state import JsonFileStore, SqliteStore, open_store
from searchfuse.testing import FakeClock, FakeTavily

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` and its content (None for anything not a file)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return out


# -- family: state paths that are not state ------------------------------------------------

URL_TYPOS = [
    "reddis://cache.internal:6379/0",
    "valkey://cache.internal:6379/0",
    "redis+sentinel://cache.internal:26379/0",
    "http://cache.internal/state",
    "sqlite:///x.db",
    "foo://bar",
    ":memory:",
    "   ",
    "",
    " state.db",
]


@pytest.mark.parametrize("state", URL_TYPOS)
def test_a_state_value_that_is_no_path_nor_redis_url_is_a_config_error_and_creates_nothing(
    state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fake = FakeTavily(KEYS)
    with pytest.raises(ConfigError) as err:
        Router(KEYS, state=state, transport=fake.transport())
    assert err.value.source == "state"
    assert "Fix:" in str(err.value)
    assert _tree(tmp_path) == {}
    assert fake.requests == []


def test_redis_schemes_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    class Recorder:
        def __init__(self, url: str, **options: object) -> None:
            seen.append(url)

    import searchfuse.router.state._redis as redis_module

    monkeypatch.setattr(redis_module, "RedisStore", Recorder)
    open_store("REDIS://cache.internal:6379/0")
    open_store("Rediss://cache.internal:6380/1")
    assert seen == ["redis://cache.internal:6379/0", "rediss://cache.internal:6380/1"]


@pytest.mark.parametrize(
    ("kind", "suffix"),
    [("fifo", ".db"), ("fifo", ".json"), ("dir", ".db"), ("dir", ".json"), ("devnull", "")],
)
def test_a_state_path_that_is_not_a_regular_file_is_a_config_error_at_once(
    kind: str, suffix: str, tmp_path: Path
) -> None:
    if kind == "fifo":
        path = tmp_path / f"s{suffix}"
        os.mkfifo(path)
    elif kind == "dir":
        path = tmp_path / f"s{suffix}"
        path.mkdir()
    else:
        path = Path(os.devnull)  # a device: taken as an SQLite path (no .json suffix)
    before = _tree(tmp_path)
    journal_before = Path(os.devnull + "-journal").exists()
    # A FIFO once blocked here forever: the store must not open it.
    with pytest.raises(ConfigError) as err:
        Router(KEYS, state=path)
    assert str(path) in str(err.value)
    assert _tree(tmp_path) == before
    assert Path(os.devnull + "-journal").exists() == journal_before


@pytest.mark.parametrize("name", ["x.db", "x.json"])
def test_a_missing_state_folder_is_an_error_not_created(name: str, tmp_path: Path) -> None:
    path = tmp_path / "missing" / "dir" / name
    with pytest.raises(ConfigError) as err:
        Router(KEYS, state=path)
    assert "does not exist" in str(err.value)
    assert _tree(tmp_path) == {}


@pytest.mark.parametrize("store", [SqliteStore, JsonFileStore])
def test_a_projects_state_folder_is_made(store: Any, tmp_path: Path) -> None:
    suffix = ".json" if store is JsonFileStore else ".db"
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    router = Router(
        KEYS,
        state=store(tmp_path / "state" / f"s{suffix}"),
        transport=fake.transport(),
        clock=clock,
    )
    router.search("q")
    assert (tmp_path / "state").is_dir()
    assert len(fake.searches) == 1


def test_from_config_makes_its_state_folder_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    cfg = tmp_path / "config" / "keys.json"
    cfg.write_text(json.dumps({"format_version": 2, "keys": [{"key": k} for k in KEYS]}))
    cfg.chmod(0o600)
    Router.from_config(cfg)
    assert (tmp_path / "state" / "searchfuse.db").is_file()


@pytest.mark.parametrize("kind", ["fifo", "dir", "dev"])
def test_a_keys_file_that_is_not_a_regular_file_is_a_config_error(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "keys.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    with pytest.raises(ConfigError) as err:
        Router.from_config(path, state=None)
    assert err.value.source == str(path)
    assert not (tmp_path / "state").exists()


# -- family: malformed Redis URLs ------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:hunter2pw@127.0.0.1:99999/0",
        "redis://127.0.0.1:abc/0",
        "redis://[::1",
        "redis://:hunter2pw@[::1/0",
        "rediss://:hunter2pw@host:-1/0",
    ],
)
def test_a_malformed_redis_url_is_a_config_error_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        Router(KEYS, state=url)
    assert err.value.source == "state"
    assert "hunter2pw" not in str(err.value)
    assert "Redis URL" in str(err.value)


# -- family: SQLite state edited by hand or by another program -------------------------------


def _used_db(path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    Router(KEYS, state=path, transport=fake.transport(), clock=clock).search("q")


def _edit(path: Path, sql: str) -> None:
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("sql", "refused"),
    [
        # A call that needs the missing table is refused; the others go on.
        ("DROP TABLE rings", {"search"}),
        ("DROP TABLE ring_slots", {"search"}),
        ("DROP TABLE cache", {"cache get", "cache set"}),
        ("DROP TABLE keys", {"search", "status", "cache get", "cache set"}),
    ],
)
def test_a_searchfuse_database_missing_a_table_is_a_config_error_on_every_path(
    sql: str, refused: set[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    _used_db(path)
    _edit(path, sql)
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    calls: dict[str, Callable[[Router], object]] = {
        "search": lambda r: r.search("q2"),
        "status": lambda r: r.status(),
        "cache get": lambda r: r.shared_cache().get("x"),
        "cache set": lambda r: r.shared_cache().__setitem__("x", 1),
    }
    failed = set()
    for name, call in calls.items():
        try:
            call(Router(KEYS, state=path, transport=fake.transport(), clock=clock))
        except ConfigError as exc:  # never a raw sqlite3 error
            assert "not a searchfuse state file" in str(exc)
            failed.add(name)
    assert failed == refused
    # A search refused for its store sent nothing.
    assert len(fake.searches) == (0 if "search" in refused else 1)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE searchfuse_meta SET seq = 9223372036854775807",
        "UPDATE searchfuse_meta SET epoch = 9223372036854775807",
        "UPDATE searchfuse_meta SET seq = -5",
        "UPDATE rings SET seq = 9223372036854775807",
    ],
)
def test_counters_out_of_range_are_reset_with_a_warning_and_searches_go_on(
    sql: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    _used_db(path)
    _edit(path, sql)
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    router = Router(KEYS, state=path, transport=fake.transport(), clock=clock)
    other = Router(KEYS, state=path, transport=fake.transport(), clock=clock)
    other.status()
    for i in range(3):
        router.search(f"q{i}")
    assert len(fake.searches) == 3
    # Another handle sees every search counted.
    assert sum(s.searches for s in other.status()) == 4
    if "searchfuse_meta" in sql:
        assert "renumbered" in caplog.text


# -- family: constructor and option values ---------------------------------------------------

BAD_OPTIONS: list[tuple[str, Any]] = [
    ("timeout", 0),
    ("timeout", -1),
    ("timeout", math.nan),
    ("timeout", math.inf),
    ("timeout", "10"),
    ("timeout", True),
    ("cooldown_minutes", 10**400),
    ("cooldown_minutes", 1e308),
    ("cooldown_minutes", "1"),
    ("sync_interval", math.nan),
    ("sync_interval", -5),
    ("sync_interval", "10"),
    ("sync_interval", math.inf),
    ("max_wait", "10"),
    ("max_wait", 10**400),
    ("deadline", "10"),
    ("deadline", 0),
    ("clock", 5),
]


@pytest.mark.parametrize(("name", "value"), BAD_OPTIONS)
def test_a_bad_option_fails_at_construction_naming_it_and_cools_no_key(
    name: str, value: Any
) -> None:
    fake = FakeTavily(KEYS)
    with pytest.raises((ValueError, TypeError)) as err:
        Router(KEYS, transport=fake.transport(), **{name: value})
    assert name in str(err.value)
    assert len(str(err.value)) < 300
    assert fake.requests == []


@pytest.mark.parametrize("now", [math.inf, -math.inf, math.nan, 1e20, "now"])
def test_a_clock_reporting_no_usable_time_is_a_clear_error_and_sends_nothing(now: Any) -> None:
    fake = FakeTavily(KEYS)
    with pytest.raises(ValueError, match="clock returned"):
        Router(KEYS, transport=fake.transport(), clock=lambda: now).search("q")
    assert fake.requests == []


@pytest.mark.parametrize("kind", ["memory", "sqlite", "json"])
@pytest.mark.parametrize(
    "options",
    [
        {"ttl": math.inf},
        {"ttl": math.nan},
        {"ttl": 0},
        {"ttl": -1},
        {"maxsize": 10**30},
        {"maxsize": 0},
        {"maxsize": 1.5},
    ],
)
def test_shared_cache_options_are_checked_when_it_is_made(
    kind: str, options: dict[str, Any], tmp_path: Path
) -> None:
    state = {"memory": None, "sqlite": tmp_path / "s.db", "json": tmp_path / "s.json"}[kind]
    router = Router(KEYS, state=state, clock=FakeClock())
    with pytest.raises(ValueError, match=next(iter(options))):
        router.shared_cache(**options)


def test_shared_cache_options_on_redis(redis_url: str) -> None:
    router = Router(KEYS, state=redis_url, clock=FakeClock())
    for options in ({"ttl": math.inf}, {"ttl": math.nan}, {"maxsize": 10**30}):
        with pytest.raises(ValueError):
            router.shared_cache(**options)  # type: ignore[arg-type]


def test_from_env_takes_a_mapping() -> None:
    with pytest.raises(TypeError, match="environ must be a mapping"):
        Router.from_env(["TAVILY_API_KEYS"])  # type: ignore[arg-type]


# -- family: numbers in keys.json -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            '{"format_version": 2, "cooldown_minutes": 9%s, "keys": [{"key": K}]}',
            "cooldown_minutes",
        ),
        ('{"format_version": 2, "keys": [{"key": "tvly-dev-test0001", "rpm": 1%s}]}', "rpm"),
        ('{"format_version": 2, "keys": [{"key": "tvly-dev-test0001"}], "extra": [1%s]}', None),
        (
            '{"format_version": 2, "cooldown_minutes": 1%s, "keys": [{"key": K}]}',
            "cooldown_minutes",
        ),
    ],
)
def test_a_huge_number_in_keys_json_is_a_config_error_naming_file_and_field(
    text: str, field: str | None, tmp_path: Path
) -> None:
    digits = "9" * 5000 if "9%s" in text else "0" * 400
    path = tmp_path / "keys.json"
    path.write_text(
        (text % digits)
        .replace('"K"', '"tvly-dev-test0001"')
        .replace(": K}", ': "tvly-dev-test0001"}')
    )
    path.chmod(0o600)
    before = path.read_bytes()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.source == str(path)
    assert err.value.field == field
    assert len(str(err.value)) < 400
    assert path.read_bytes() == before


# -- family: from_env reads every setting from the mapping it is given ------------------------


def test_from_env_reads_every_setting_from_its_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SEARCHFUSE_RPM", "7")
    fake = FakeTavily(KEYS)
    with fake.serve() as url:
        router = Router.from_env(
            {"TAVILY_API_KEYS": ",".join(KEYS), "TAVILY_BASE_URL": url, "SEARCHFUSE_RPM": "3"}
        )
        router.search("q")
    assert router.http.base_url == url
    assert set(router._rpm.values()) == {3}
    assert len(fake.searches) == 1
    with pytest.raises(ConfigError, match="SEARCHFUSE_RPM"):
        Router.from_env({"TAVILY_API_KEYS": KEYS[0], "SEARCHFUSE_RPM": "abc"})
    monkeypatch.delenv("TAVILY_BASE_URL")
    router = Router.from_env({"TAVILY_API_KEYS": KEYS[0]})
    assert router.http.base_url == "https://api.tavily.com"
