"""Keys from the environment: `TAVILY_API_KEYS`, `TAVILY_API_KEY`, `TAVILY_API_KEY_2`..."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from searchfuse.errors import ConfigError
from searchfuse.router._keys import _QUOTES, FORMAT_VERSION, Config, _cooldown, _shown, parse_config

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
