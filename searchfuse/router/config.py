"""Where the router's keys come from: `config/keys.json` (v2 or legacy) or the environment.

Format v2:

```json
{"format_version": 2, "cooldown_minutes": 0.5,
 "keys": [{"key": "tvly-...", "account": "main@example.com", "notes": "main"}]}
```

Legacy files (`{"cooldown_minutes": 10, "keys": ["tvly-...", ...]}`, a bare
list of keys, or key objects with `source` instead of `account`) are
migrated to v2 on load: backup first, verify, then replace atomically.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import math
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchfuse import _clock
from searchfuse._files import atomic_write, backup, clean_stale_temps
from searchfuse._secrets import fingerprint, mask, redact
from searchfuse.errors import ConfigError
from searchfuse.router.policy import DEFAULT_COOLDOWN_MINUTES
from searchfuse.router.tavily import DEV_KEY_PREFIX, DEV_RPM, PROD_RPM

__all__ = [
    "FORMAT_VERSION",
    "Config",
    "KeyEntry",
    "config_from_env",
    "key_rpm",
    "keys_from",
    "load_config",
    "parse_config",
    "render_config",
]

log = logging.getLogger("searchfuse.config")

FORMAT_VERSION = 2

# Keys copied from a template and never replaced (incident 5 left a file full
# of them): refusing them early beats 401s from every key.
_PLACEHOLDER = re.compile(
    r"^tvly-(?:(?:dev|prod)-)?(?:your|x{3,}|placeholder|example|replace|changeme|insert|dummy)"
    r"|[<>…]|\.\.\.|your[-_]?(?:api[-_]?)?key",
    re.IGNORECASE,
)


_QUOTES = "\"'`\u2018\u2019\u201c\u201d"
#: What a key may contain: printable ASCII without spaces, quotes or separators.
_KEY_CHARS = re.compile(r"[!#-&(-+\--:<-~]+")
#: Nesting deeper than this is not a keys file (and would exhaust the parser's stack).
MAX_DEPTH = 32
#: A keys file larger than this is not a keys file.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
_KNOWN_TOP = {"format_version", "cooldown_minutes", "keys"}
_KNOWN_ITEM = {"key", "account", "source", "notes", "disabled", "rpm"}
#: Keys files already warned about (world-readable): once per process.
_warned_modes: set[str] = set()


def _shown(value: Any) -> str:
    """A value from the user's file, quoted in an error: short, and with anything key-like masked
    (a key pasted into the wrong field must not end up in logs)."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):
        text = type(value).__name__
    text = redact(text, ())
    return text if len(text) <= 60 else text[:59] + "…"


def _describe(ch: str) -> str:
    if ch == "\x00":
        return "NUL (\\x00)"
    if ch.isprintable():
        return f"{ch!r} (U+{ord(ch):04X})"
    return f"U+{ord(ch):04X}"


@dataclass(frozen=True)
class KeyEntry:
    """One API key with the account it belongs to. `repr` never shows the key."""

    key: str = field(repr=False)
    account: str | None = None
    notes: str = ""
    #: Set in the config to keep a key out of rotation without deleting it.
    disabled: bool = False
    #: Fields searchfuse does not know (kept when a legacy file is migrated).
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: Requests per minute this key may send (`None`: `SEARCHFUSE_RPM`, else
    #: Tavily's published limit for the kind of key, see `key_rpm`).
    rpm: int | None = None

    # Computed once: selection reads them for every key on every search.
    @functools.cached_property
    def fingerprint(self) -> str:
        """A short hash identifying the key in state files and logs."""
        return fingerprint(self.key)

    @functools.cached_property
    def masked(self) -> str:
        """The key as people see it: `tvly-dev-…a1b2`."""
        return mask(self.key)

    @functools.cached_property
    def account_id(self) -> str:
        """The account whose plan this key draws on (the key itself when unknown)."""
        return self.account or f"key:{self.fingerprint}"

    def __repr__(self) -> str:
        flag = ", disabled" if self.disabled else ""
        return f"KeyEntry({self.masked}, account={self.account!r}, notes={self.notes!r}{flag})"


@dataclass(frozen=True)
class Config:
    """The router's configuration: its keys, the fallback cooldown, and where it came from."""

    keys: tuple[KeyEntry, ...]
    cooldown_minutes: float = DEFAULT_COOLDOWN_MINUTES
    source: str = "<memory>"
    path: Path | None = None
    legacy: bool = False
    #: Top-level fields searchfuse does not know (kept when a legacy file is migrated).
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (
            f"Config(keys=[{', '.join(k.masked for k in self.keys)}], "
            f"cooldown_minutes={self.cooldown_minutes}, source={self.source!r})"
        )


def _check_key(value: Any, source: str, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(
            source, where, f"expected a key string, got {type(value).__name__}", 'write "tvly-..."'
        )
    key = value.strip()
    if not key:
        raise ConfigError(source, where, "the key is empty", "paste the key from app.tavily.com")
    if any(ch.isspace() for ch in key):
        raise ConfigError(
            source, where, "the key contains white space", "paste the key without spaces"
        )
    if any(ch in _QUOTES for ch in key):
        raise ConfigError(
            source, where, "the key contains quote characters", "write the key without quotes"
        )
    if ";" in key:
        raise ConfigError(
            source, where, "the key contains ';'", "separate keys with commas, not semicolons"
        )
    if _PLACEHOLDER.search(key) or key.lower() in {"tvly-", "tvly"}:
        raise ConfigError(
            source,
            where,
            f"{mask(key)} is a placeholder from a template, not a real key",
            "replace it with a key from your Tavily dashboard, or remove the entry",
        )
    if not _KEY_CHARS.fullmatch(key):
        # NUL, control and non-ASCII characters cannot travel in an HTTP header:
        # they would fail at the first request, far from the cause.
        bad = next(ch for ch in key if not _KEY_CHARS.fullmatch(ch))
        raise ConfigError(
            source,
            where,
            f"the key contains the character {_describe(bad)}, which no Tavily key has",
            "paste the key again from app.tavily.com (letters, digits, '-' and '_' only)",
        )
    return key


def _check_text(value: Any, source: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(
            source,
            where,
            f"expected text, got {type(value).__name__}",
            "write a string or remove it",
        )
    return value


def _cooldown(value: Any, source: str) -> float:
    if value is None:
        return DEFAULT_COOLDOWN_MINUTES
    # bool is an int in Python; "true" minutes is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            source,
            "cooldown_minutes",
            f"expected a number of minutes, got {_shown(value)}",
            "write a number such as 0.5 or 1",
        )
    try:
        minutes = float(value)
    except OverflowError:
        minutes = math.inf
    if not math.isfinite(minutes * 60.0) or minutes < 0:
        raise ConfigError(
            source,
            "cooldown_minutes",
            f"{value} is not a usable number of minutes",
            "write a finite number >= 0, such as 0.5",
        )
    return minutes


def _rpm(value: Any, source: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise ConfigError(
            source,
            where,
            f"expected a whole number of requests per minute (1 or more), got {_shown(value)}",
            "write the key's rate limit, e.g. 100 for a development key, or remove the field",
        )
    return value


def key_rpm(entry: KeyEntry, environ: Mapping[str, str] | None = None) -> int:
    """The requests per minute the router allows `entry`: its `rpm` in the keys
    file, else `SEARCHFUSE_RPM`, else Tavily's limit (100 for `tvly-dev-` keys,
    1000 for the others). A malformed `SEARCHFUSE_RPM` is a
    [`ConfigError`][searchfuse.errors.ConfigError]."""
    if entry.rpm is not None:
        return entry.rpm
    env = os.environ if environ is None else environ
    text = env.get("SEARCHFUSE_RPM", "").strip()
    if text:
        try:
            value: Any = int(text)
        except ValueError:
            value = text
        try:
            rpm = _rpm(value, "environment", "SEARCHFUSE_RPM")
        except ConfigError as exc:
            raise ConfigError(
                "environment",
                "SEARCHFUSE_RPM",
                exc.problem,
                "unset SEARCHFUSE_RPM, or set it to a whole number such as 100",
            ) from None
        assert rpm is not None
        return rpm
    return DEV_RPM if entry.key.startswith(DEV_KEY_PREFIX) else PROD_RPM


def parse_config(data: Any, source: str = "<memory>", path: Path | None = None) -> Config:
    """Validate decoded JSON and return a [`Config`][searchfuse.router.Config] (`legacy` tells if
    it needs migrating).

    Raises [`ConfigError`][searchfuse.errors.ConfigError] naming `source`, the field and the fix.
    """
    legacy = False
    if isinstance(data, list):
        data = {"keys": data}
        legacy = True
    if not isinstance(data, dict):
        raise ConfigError(
            source,
            None,
            f"expected a JSON object, got {type(data).__name__}",
            'start from config/keys.example.json: {"format_version": 2, "keys": [...]}',
        )
    version = data.get("format_version")
    if version is None:
        legacy = True
    elif version != FORMAT_VERSION:
        raise ConfigError(
            source,
            "format_version",
            f"unknown format version {_shown(version)}",
            f"use {FORMAT_VERSION}, or remove the field to have the file migrated",
        )
    if "keys" not in data:
        raise ConfigError(
            source, "keys", "missing", 'add "keys": [{"key": "tvly-...", "account": "..."}]'
        )
    raw_keys = data["keys"]
    if not isinstance(raw_keys, list):
        raise ConfigError(
            source,
            "keys",
            f"expected a list, got {type(raw_keys).__name__}",
            'write "keys": [{"key": "tvly-..."}]',
        )
    if not raw_keys:
        raise ConfigError(
            source, "keys", "the list is empty", "add at least one key from your Tavily dashboard"
        )
    _refuse_repeated(data, source, None)
    entries: list[KeyEntry] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw_keys):
        where = f"keys[{i}]"
        _refuse_repeated(item, source, where)
        if isinstance(item, str):
            legacy = True
            entry = KeyEntry(_check_key(item, source, where))
        elif isinstance(item, dict):
            if "key" not in item:
                raise ConfigError(source, f"{where}.key", "missing", 'add "key": "tvly-..."')
            key = _check_key(item["key"], source, f"{where}.key")
            if "source" in item and "account" not in item:
                legacy = True
            named = "account" if "account" in item else "source"
            account = _check_text(item.get(named), source, f"{where}.{named}")
            notes = _check_text(item.get("notes"), source, f"{where}.notes") or ""
            disabled = item.get("disabled", False)
            if not isinstance(disabled, bool):
                raise ConfigError(
                    source,
                    f"{where}.disabled",
                    f"expected true or false, got {_shown(disabled)}",
                    "write true to keep the key out of rotation, or remove the field",
                )
            extra = {k: v for k, v in item.items() if k not in _KNOWN_ITEM}
            rpm = _rpm(item.get("rpm"), source, f"{where}.rpm")
            entry = KeyEntry(key, account or None, notes, disabled, extra, rpm=rpm)
        else:
            raise ConfigError(
                source,
                where,
                f"expected an object or a key string, got {type(item).__name__}",
                'write {"key": "tvly-...", "account": "..."}',
            )
        if entry.key in seen:
            raise ConfigError(
                source,
                where,
                f"duplicate of keys[{seen[entry.key]}] ({entry.masked})",
                "remove one of the two entries",
            )
        seen[entry.key] = i
        entries.append(entry)
    cooldown = _cooldown(data.get("cooldown_minutes"), source)
    extra = {k: v for k, v in data.items() if k not in _KNOWN_TOP}
    return Config(tuple(entries), cooldown, source=source, path=path, legacy=legacy, extra=extra)


class _Object(dict[str, Any]):
    """A JSON object that remembers the names it held more than once."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        names = [name for name, _ in pairs]
        obj.repeated = tuple(sorted({n for n in names if names.count(n) > 1}))
    return obj


def _refuse_repeated(obj: Any, source: str, where: str | None) -> None:
    """A field written twice in one object: JSON parsers keep the last one silently."""
    repeated = getattr(obj, "repeated", ())
    if repeated:
        name = repeated[0]
        raise ConfigError(
            source,
            f"{where}.{name}" if where else name,
            f'"{name}" appears more than once in the same object (only the last would count)',
            f'keep one "{name}" (a second key goes in its own entry)',
        )


def render_config(config: Config) -> str:
    """The v2 JSON text for `config` (what a migrated file contains)."""
    keys: list[dict[str, Any]] = []
    for entry in config.keys:
        item: dict[str, Any] = {"key": entry.key, "account": entry.account}
        if entry.notes:
            item["notes"] = entry.notes
        if entry.disabled:
            item["disabled"] = True
        if entry.rpm is not None:
            item["rpm"] = entry.rpm
        # Fields we do not know belong to someone: a migration keeps them.
        item.update((k, v) for k, v in entry.extra.items() if k not in item)
        keys.append(item)
    data: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "cooldown_minutes": config.cooldown_minutes,
        "keys": keys,
    }
    data.update((k, v) for k, v in config.extra.items() if k not in data)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _migrate(path: Path, original: bytes, config: Config, epoch: float) -> Config:
    """Rewrite a legacy file as v2: backup, verify, replace. Returns the migrated config."""
    text = render_config(config)
    again = parse_config(json.loads(text), str(path), path)
    if [(k.key, k.account, dict(k.extra)) for k in again.keys] != [
        (k.key, k.account, dict(k.extra)) for k in config.keys
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
    try:
        raw = _read_keys_file(path, source)
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
    _warn_if_readable(path)
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
    return config


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


#: What a list of keys in the environment looks like; said by every error about it.
_LIST_FIX = (
    "write the keys comma-separated, without quotes or spaces: TAVILY_API_KEYS=tvly-...,tvly-..."
)


def _split_keys(text: str) -> list[str]:
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in _QUOTES:
        raise ConfigError(
            "environment",
            "TAVILY_API_KEYS",
            "the value is wrapped in quotes (they became part of the keys)",
            _LIST_FIX,
        )
    if ";" in stripped:
        raise ConfigError(
            "environment", "TAVILY_API_KEYS", "the keys are separated by ';'", _LIST_FIX
        )
    return [part.strip() for part in re.split(r"[,\n]", text) if part.strip()]


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Keys from `TAVILY_API_KEYS` (comma- or newline-separated) or `TAVILY_API_KEY`,
    `TAVILY_API_KEY_2`, `TAVILY_API_KEY_3`, ...

    `SEARCHFUSE_COOLDOWN_MINUTES` sets the fallback cooldown. Raises
    [`ConfigError`][searchfuse.errors.ConfigError] when no key is set.
    """
    env = os.environ if environ is None else environ
    keys: list[tuple[str, str]] = []
    if "TAVILY_API_KEYS" in env and env["TAVILY_API_KEYS"] and not env["TAVILY_API_KEYS"].strip():
        raise ConfigError(
            "environment",
            "TAVILY_API_KEYS",
            "the variable is set but holds only white space",
            _LIST_FIX,
        )
    if env.get("TAVILY_API_KEYS", "").strip():
        keys = [("TAVILY_API_KEYS", k) for k in _split_keys(env["TAVILY_API_KEYS"])]
    else:
        if env.get("TAVILY_API_KEY", "").strip():
            keys.append(("TAVILY_API_KEY", env["TAVILY_API_KEY"].strip()))
        numbered = sorted(
            (int(m.group(1)), name)
            for name in env
            if (m := re.fullmatch(r"TAVILY_API_KEY_(\d+)", name)) and env[name].strip()
        )
        keys.extend((name, env[name].strip()) for _, name in numbered)
    if not keys and env.get("TAVILY_API_KEYS", "").strip():
        raise ConfigError(
            "environment",
            "TAVILY_API_KEYS",
            f"the variable is set to {_shown(env['TAVILY_API_KEYS'])}, which holds no key",
            _LIST_FIX,
        )
    if not keys:
        raise ConfigError(
            "environment",
            "TAVILY_API_KEYS",
            "no Tavily key is set (neither TAVILY_API_KEYS nor TAVILY_API_KEY)",
            'export TAVILY_API_KEYS="tvly-...,tvly-..." or create config/keys.json',
        )
    items: list[dict[str, Any]] = [{"key": value} for _, value in keys]
    cooldown: Any = None
    raw_minutes = env.get("SEARCHFUSE_COOLDOWN_MINUTES", "")
    if raw_minutes.strip():
        try:
            cooldown = _cooldown(float(raw_minutes), "environment")
        except (ValueError, ConfigError):
            raise ConfigError(
                "environment",
                "SEARCHFUSE_COOLDOWN_MINUTES",
                f"{_shown(raw_minutes)} is not a usable number of minutes",
                "set it to a finite number >= 0, such as 0.5",
            ) from None
    data = {"format_version": FORMAT_VERSION, "keys": items, "cooldown_minutes": cooldown}
    try:
        return parse_config(data, "environment")
    except ConfigError as exc:
        # Name the variable, not a JSON path the user never wrote.
        index = int(m.group(1)) if exc.field and (m := re.search(r"\[(\d+)\]", exc.field)) else 0
        variable = keys[index][0] if index < len(keys) else "TAVILY_API_KEYS"
        problem = exc.problem
        if variable == "TAVILY_API_KEYS" and exc.field and exc.field.startswith("keys["):
            problem = f"key {index + 1} of {len(keys)}: {problem}"
        fix = _LIST_FIX if variable == "TAVILY_API_KEYS" else exc.fix
        raise ConfigError("environment", variable, problem, fix) from None


def keys_from(value: Sequence[str | KeyEntry] | Config) -> Config:
    """A [`Config`][searchfuse.router.Config] from what a caller handed the `Router`
    constructor."""
    if isinstance(value, Config):
        return value
    if isinstance(value, str):
        raise TypeError("Router() takes a list of keys, not one string: Router([key])")
    items: list[Any] = []
    for item in value:
        if isinstance(item, KeyEntry):
            items.append(
                {
                    "key": item.key,
                    "account": item.account,
                    "notes": item.notes,
                    "disabled": item.disabled,
                    "rpm": item.rpm,
                }
            )
        else:
            items.append(item)
    return parse_config({"format_version": FORMAT_VERSION, "keys": items}, "Router(keys=...)")
