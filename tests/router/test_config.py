"""Config: v2, legacy migration with backup, environment keys, clear errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from searchfuse import ConfigError, Router
from searchfuse.router.config import config_from_env, load_config, parse_config
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream

K1, K2, K3, K4 = KEYS


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write(path: Path, data: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(data, indent=4).encode()
    path.write_bytes(raw)
    os.chmod(path, 0o644)
    return raw


def test_v2_config_loads_keys_accounts_and_float_cooldown(tmp_path: Path) -> None:
    path = tmp_path / "config" / "keys.json"
    write(
        path,
        {
            "format_version": 2,
            "cooldown_minutes": 0.5,
            "keys": [
                {"key": K1, "account": "a@example.com", "notes": "main"},
                {"key": K2, "account": "a@example.com"},
            ],
        },
    )
    config = load_config(path)
    assert [k.key for k in config.keys] == [K1, K2]
    assert config.keys[0].account == "a@example.com"
    assert config.keys[0].notes == "main"
    assert config.cooldown_minutes == 0.5
    assert not config.legacy
    assert K1 not in repr(config) and K1 not in repr(config.keys[0])


def test_cooldown_minutes_half_gives_thirty_seconds(tmp_path: Path) -> None:
    path = tmp_path / "config" / "keys.json"
    write(path, {"format_version": 2, "cooldown_minutes": 0.5, "keys": [{"key": K1}]})
    router = Router.from_config(path)
    assert router.cooldown_seconds == 30.0


def test_from_config_puts_state_beside_config_folder(tmp_path: Path) -> None:
    path = tmp_path / "config" / "keys.json"
    write(path, {"format_version": 2, "keys": [{"key": K1}]})
    router = Router.from_config(path)
    assert router.store.path == tmp_path / "state" / "searchfuse.db"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "legacy",
    [
        {"cooldown_minutes": 10, "keys": [K1, K2, K3]},
        [K1, K2, K3],
        {"keys": [{"key": K1, "source": "main"}, {"key": K2, "source": "main"}, K3]},
    ],
    ids=["object-with-strings", "bare-list", "source-objects"],
)
def test_legacy_config_migrates_with_byte_identical_backup(tmp_path: Path, legacy: object) -> None:
    path = tmp_path / "config" / "keys.json"
    original = write(path, legacy)
    clock = FakeClock()
    config = load_config(path, clock=clock)
    # Same keys, same order.
    assert [k.key for k in config.keys] == [K1, K2, K3]
    # A byte-identical backup, private.
    backups = sorted(path.parent.glob("keys.json.bak.*"))
    assert len(backups) == 1
    assert backups[0].read_bytes() == original
    assert mode(backups[0]) == 0o600
    assert backups[0].name == "keys.json.bak.20260115T120000Z"
    # The file is now v2, private, and parses to the same keys.
    data = json.loads(path.read_text())
    assert data["format_version"] == 2
    assert [k["key"] for k in data["keys"]] == [K1, K2, K3]
    assert mode(path) == 0o600
    if isinstance(legacy, dict) and "source" in str(legacy):
        assert data["keys"][0]["account"] == "main"
    # Loading again changes nothing and makes no second backup.
    load_config(path, clock=clock)
    assert len(list(path.parent.glob("keys.json.bak.*"))) == 1


def test_legacy_cooldown_is_kept_as_float(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    write(path, {"cooldown_minutes": 10, "keys": [K1]})
    assert load_config(path).cooldown_minutes == 10.0
    assert json.loads(path.read_text())["cooldown_minutes"] == 10.0


def test_failed_replace_leaves_original_and_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.json"
    original = write(path, [K1, K2])

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("searchfuse.router._keysfile.atomic_write", broken)
    config = load_config(path)
    assert [k.key for k in config.keys] == [K1, K2]
    assert path.read_bytes() == original
    (backup,) = tmp_path.glob("keys.json.bak.*")
    assert backup.read_bytes() == original


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"format_version": 2, "keys": []}, "keys", "empty"),
        ({"format_version": 2}, "keys", "missing"),
        ({"format_version": 2, "keys": "tvly-dev-test0001"}, "keys", "expected a list"),
        ({"format_version": 2, "keys": [{"key": K1}, {"key": K1}]}, "keys[1]", "duplicate"),
        ({"format_version": 2, "keys": [{"key": "tvly-your-key-1"}]}, "keys[0].key", "placeholder"),
        ({"format_version": 2, "keys": [{"key": "tvly-xxx1"}]}, "keys[0].key", "placeholder"),
        ({"format_version": 2, "keys": [{"key": 42}]}, "keys[0].key", "expected a key string"),
        ({"format_version": 2, "keys": [{"account": "a"}]}, "keys[0].key", "missing"),
        (
            {"format_version": 2, "keys": [K1], "cooldown_minutes": "1"},
            "cooldown_minutes",
            "number",
        ),
        (
            {"format_version": 2, "keys": [K1], "cooldown_minutes": True},
            "cooldown_minutes",
            "number",
        ),
        ({"format_version": 2, "keys": [K1], "cooldown_minutes": -1}, "cooldown_minutes", "usable"),
        ({"format_version": 7, "keys": [K1]}, "format_version", "unknown"),
        ("just a string", None, "expected a JSON object"),
    ],
)
def test_bad_config_names_file_field_and_fix(
    tmp_path: Path, data: object, field: str | None, words: str
) -> None:
    path = tmp_path / "keys.json"
    original = write(path, data)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.source == str(path)
    assert err.field == field
    assert words in err.problem
    assert err.fix
    message = str(err)
    assert str(path) in message and "Fix:" in message
    assert K1 not in message
    assert path.read_bytes() == original  # bad input loses nothing


def test_missing_and_invalid_json_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"file not found.*searchfuse init"):
        load_config(tmp_path / "nope.json")
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [')
    with pytest.raises(ConfigError, match="invalid JSON at line 1"):
        load_config(path)
    assert path.read_text() == '{"keys": ['


def test_env_keys_comma_and_newline_separated() -> None:
    config = config_from_env({"TAVILY_API_KEYS": f"{K1}, {K2}\n{K3}\n"})
    assert [k.key for k in config.keys] == [K1, K2, K3]


def test_env_numbered_keys() -> None:
    env = {"TAVILY_API_KEY": K1, "TAVILY_API_KEY_3": K3, "TAVILY_API_KEY_2": K2, "OTHER": "x"}
    assert [k.key for k in config_from_env(env).keys] == [K1, K2, K3]
    assert [
        k.key for k in config_from_env({"TAVILY_API_KEY_10": K4, "TAVILY_API_KEY_2": K2}).keys
    ] == [
        K2,
        K4,
    ]


def test_env_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_env({})
    assert info.value.field == "TAVILY_API_KEYS"
    with pytest.raises(ConfigError) as info:
        config_from_env({"TAVILY_API_KEY": K1, "TAVILY_API_KEY_2": "tvly-your-key-2"})
    assert info.value.field == "TAVILY_API_KEY_2"
    assert "placeholder" in str(info.value)


def test_router_from_env_uses_searchfuse_state(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    router = Router.from_env({"TAVILY_API_KEYS": K1, "SEARCHFUSE_STATE": str(state)})
    assert router.store.path == state  # type: ignore[attr-defined]


def test_parse_config_accepts_router_keys() -> None:
    config = parse_config({"format_version": 2, "keys": [{"key": K1, "account": None}]})
    assert config.keys[0].account is None


def test_failed_backup_leaves_original_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.json"
    original = write(path, [K1, K2])

    def broken(*args: object, **kwargs: object) -> Path:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr("searchfuse.router._keysfile.backup", broken)
    config = load_config(path)
    assert [k.key for k in config.keys] == [K1, K2]
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


def test_disabled_key_in_config_is_skipped(tmp_path: Path, upstream: Upstream) -> None:
    path = tmp_path / "config" / "keys.json"
    write(
        path,
        {"format_version": 2, "keys": [{"key": K1, "disabled": True}, {"key": K2}]},
    )
    router = Router.from_config(path)
    assert router.keys[0].disabled and "disabled" in repr(router.keys[0])
    upstream.search(K2, 200)
    assert router.search("q")["searchfuse"]["key"] == "tvly-dev-…0002"
    assert [s.state for s in router.status()] == ["disabled", "available"]
    write(path, {"format_version": 2, "keys": [{"key": K1, "disabled": "yes"}]})
    with pytest.raises(ConfigError, match=r"keys\[0\]\.disabled"):
        load_config(path)
