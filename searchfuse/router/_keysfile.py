"""The keys file on disk: read it safely (size, depth, kind of file), decode it, warn
about its mode, and migrate a legacy file to v2 (backup first, verify, replace atomically)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from searchfuse import _clock
from searchfuse._files import atomic_write, backup, clean_stale_temps
from searchfuse.errors import ConfigError
from searchfuse.providers._registry import PROVIDERS
from searchfuse.router._keys import FORMAT_VERSION, Config, _pairs, parse_config
from searchfuse.router._providers import DEFAULT as DEFAULT_PROVIDER

log = logging.getLogger("searchfuse.config")

#: Nesting deeper than this is not a keys file (and would exhaust the parser's stack).
MAX_DEPTH = 32
#: A keys file larger than this is not a keys file.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Keys files already warned about (world-readable): once per process.
_warned_modes: set[str] = set()


def default_state(config_path: Path | None) -> str | Path | None:
    """Where a router built from the keys file at `config_path` keeps its state by
    default: `state/searchfuse.db` in the folder above `config/` (under
    searchfuse's pytest plugin, the test's own folder)."""
    from searchfuse.router.state import _paths

    if _paths.testing_state:
        return _paths.testing_state
    return config_path.parent.parent / "state" / "searchfuse.db" if config_path else None


def render_config(config: Config) -> str:
    """The v2 JSON text for `config` (what a migrated file contains)."""
    keys: list[dict[str, Any]] = []
    for entry in config.keys:
        item: dict[str, Any] = {"key": entry.key, "account": entry.account}
        if entry.provider != DEFAULT_PROVIDER:
            item = {"provider": entry.provider, **item}
            if PROVIDERS[entry.provider].url_keyed:
                item["url"] = item.pop("key")
        if entry.notes:
            item["notes"] = entry.notes
        if entry.disabled:
            item["disabled"] = True
        if entry.rpm is not None:
            item["rpm"] = entry.rpm
        if entry.rate is not None:
            item["rate"] = entry.rate
        if entry.price is not None:
            item["price"] = entry.price
        # Fields we do not know belong to someone: a migration keeps them.
        item.update((k, v) for k, v in entry.extra.items() if k not in item)
        keys.append(item)
    data: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "cooldown_minutes": config.cooldown_minutes,
        "keys": keys,
    }
    if config.order:
        data["providers"] = list(config.order)
    data.update((k, v) for k, v in config.extra.items() if k not in data)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _migrate(path: Path, original: bytes, config: Config, epoch: float) -> Config:
    """Rewrite a legacy file as v2: backup, verify, replace. Returns the migrated config."""
    text = render_config(config)
    again = parse_config(json.loads(text), str(path), path)
    if [(k.key, k.provider, k.account, dict(k.extra)) for k in again.keys] != [
        (k.key, k.provider, k.account, dict(k.extra)) for k in config.keys
    ] or dict(again.extra) != dict(config.extra):
        raise ConfigError(
            str(path), "keys", "migration would change the keys", "report this as a bug"
        )
    # A link is the user's: the file it points to is migrated in place (backup
    # beside it, atomic replace of it), and the link stays a link.
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    saved = backup(target, epoch)
    # The file must still be what we parsed: another process may have migrated it.
    if target.read_bytes() != original:
        return config
    atomic_write(target, text.encode("utf-8"))
    log.warning(
        "migrated %s to format v%d; the original is kept as %s",
        path if target == path else f"{path} (a link to {target})",
        FORMAT_VERSION,
        saved if target != path else saved.name,
    )
    unknown = sorted(config.extra) + sorted(
        {f"keys[].{name}" for entry in config.keys for name in entry.extra}
    )
    if unknown:
        log.warning(
            "%s: fields searchfuse does not use were kept as they were: %s",
            path,
            ", ".join(unknown),
        )
    return again


def load_config(
    path: str | os.PathLike[str], *, migrate: bool = True, clock: _clock.Clock | None = None
) -> Config:
    """Read `keys.json`; migrate a legacy file to v2 (backup first) unless `migrate=False`.

    A migration that fails at any step leaves the original file untouched; the
    router still starts with the keys it read, and a warning says why.
    """
    path = Path(path)
    source = str(path)
    epoch = (clock or _clock.now)()
    raw = _read_explained(path, source)
    data = _decode(raw, source)
    with contextlib.suppress(OSError):
        clean_stale_temps(path, epoch)
    config = parse_config(data, source, path)
    if config.legacy and migrate:
        try:
            config = _migrate(path, raw, config, epoch)
        except OSError as exc:
            log.warning(
                "could not migrate %s to format v%d (%s); it is left as it was",
                path,
                FORMAT_VERSION,
                exc.strerror or exc,
            )
    # After a migration, which rewrites the file 0600: the warning is about
    # the file as it is now.
    _warn_if_readable(path)
    return config


def _read_explained(path: Path, source: str) -> bytes:
    """The keys file's bytes, or a ConfigError saying why they cannot be read and what to do."""
    try:
        return _read_keys_file(path, source)
    except FileNotFoundError:
        if path.is_symlink():
            raise ConfigError(
                source,
                None,
                f"it is a symbolic link to {os.readlink(path)}, which does not exist",
                "point the link at your keys file, or remove the link and run `searchfuse init`",
            ) from None
        raise ConfigError(
            source,
            None,
            "file not found",
            "run `searchfuse init` to create it from the template, or set TAVILY_API_KEYS",
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            source,
            None,
            "it is a folder, not a keys file",
            f"name the file itself, e.g. --config {path / 'keys.json'}",
        ) from None
    except PermissionError as exc:
        raise ConfigError(
            source, None, f"cannot read it ({exc.strerror})", "check the file's permissions"
        ) from None
    except OSError as exc:
        raise ConfigError(
            source,
            None,
            f"cannot read it ({exc.strerror or exc})",
            "point --config at a regular keys file (config/keys.json)",
        ) from None


def _decode(raw: bytes, source: str) -> Any:
    """The keys file's JSON, or a ConfigError naming the line, the column and the fix."""
    try:
        data = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_pairs, parse_int=_int_parser(raw, source)
        )
    except UnicodeDecodeError:
        raise ConfigError(source, None, "not UTF-8 text", "save the file as UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            source,
            None,
            f"invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})",
            "fix the syntax (compare with config/keys.example.json)",
        ) from None
    except RecursionError:
        raise ConfigError(source, None, "the JSON is nested too deeply", _DEPTH_FIX) from None
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(
            source, None, f"the JSON is nested more than {MAX_DEPTH} levels deep", _DEPTH_FIX
        )
    return data


def _read_keys_file(path: Path, source: str) -> bytes:
    """The keys file's bytes; ConfigError if it is not a regular file (a FIFO,
    a device: opened without waiting, never read) or is too large."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                source, None, "it is not a regular file (a pipe or a device)", _NOT_FILE_FIX
            )
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                source,
                None,
                f"the file is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MB",
                _NOT_FILE_FIX,
            )
        chunks = []
        left = MAX_CONFIG_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


_NOT_FILE_FIX = "point --config (or SEARCHFUSE_CONFIG) at your keys file (config/keys.json)"
#: Longest whole number a keys file may hold (Python's own limit is 4300 digits).
_MAX_DIGITS = 100


def _int_parser(raw: bytes, source: str) -> Callable[[str], int]:
    """`json.loads`'s `parse_int`: a number too long to be meant is a ConfigError
    naming its field (found by its text in the file), never a raw ValueError."""

    def parse(text: str) -> int:
        if len(text.lstrip("-")) <= _MAX_DIGITS:
            return int(text)
        found = re.search(rb'"([^"\\]{1,100})"\s*:\s*' + re.escape(text.encode()), raw)
        field = found.group(1).decode("utf-8", "replace") if found else None
        raise ConfigError(
            source,
            field,
            f"a number with {len(text.lstrip('-'))} digits is not a usable value",
            "write a sensible number (compare with config/keys.example.json)",
        )

    return parse


_DEPTH_FIX = 'a keys file is {"format_version": 2, "keys": [...]}: compare with keys.example.json'


def _depth(value: Any) -> int:
    """How deeply `value` nests (iteratively: a hostile file must not exhaust the stack)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            children = item.values() if isinstance(item, dict) else item
            todo.extend((child, level + 1) for child in children)
    return deepest


def _warn_if_readable(path: Path) -> None:
    """Warn once per file when other users can read the keys (they are secrets)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not mode & 0o077 or str(path) in _warned_modes:
        return
    _warned_modes.add(str(path))
    log.warning(
        "%s holds API keys and can be read by other users (mode %03o); run: chmod 600 %s",
        path,
        stat.S_IMODE(mode),
        path,
    )
