"""Keys from the environment: `TAVILY_API_KEYS`, `TAVILY_API_KEY`, `TAVILY_API_KEY_2`..."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from searchfuse._secrets import mask
from searchfuse.errors import ConfigError
from searchfuse.providers._registry import PROVIDERS, ProviderSpec
from searchfuse.router._keys import FORMAT_VERSION, Config, _cooldown, _shown, parse_config
from searchfuse.router._keytext import QUOTES as _QUOTES
from searchfuse.router._providers import misplaced

#: What a list of keys in the environment looks like; said by every error about it.
_LIST_FIX = (
    "write the keys comma-separated, without quotes or spaces: TAVILY_API_KEYS=tvly-...,tvly-..."
)


def _list_fix(variable: str) -> str:
    if variable == "TAVILY_API_KEYS":
        return _LIST_FIX
    if any(spec.url_keyed and spec.list_env == variable for spec in PROVIDERS.values()):
        return (
            "write each instance's http(s) address, comma-separated, without quotes or "
            f"spaces: {variable}=http://127.0.0.1:8888"
        )
    return f"write them comma-separated, without quotes or spaces: {variable}=...,..."


def _misplaced(keys: list[tuple[str, str, str]]) -> None:
    """Refuse a key set in another provider's variable, saying which variable it goes in."""
    for variable, name, key in keys:
        other = misplaced(key, name)
        if other is not None:
            same = [k for k in keys if k[0] == variable]
            theirs, ours = PROVIDERS[other], PROVIDERS[name]
            raise ConfigError(
                "environment",
                variable,
                f"key {same.index((variable, name, key)) + 1} of {len(same)}: {mask(key)} "
                f"looks like {theirs.title}'s key, not {ours.title}'s",
                f"move it to {theirs.list_env}",
            )


def _split_keys(text: str, variable: str = "TAVILY_API_KEYS") -> list[str]:
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in _QUOTES:
        raise ConfigError(
            "environment",
            variable,
            "the value is wrapped in quotes (they became part of the keys)",
            _list_fix(variable),
        )
    if ";" in stripped:
        raise ConfigError(
            "environment", variable, "the keys are separated by ';'", _list_fix(variable)
        )
    return [part.strip() for part in re.split(r"[,\n]", text) if part.strip()]


def _provider_keys(env: Mapping[str, str], spec: ProviderSpec) -> list[tuple[str, str]]:
    """`(variable, key)` for each of one provider's keys in the environment."""
    many, one = spec.list_env, spec.single_env
    if many in env and env[many] and not env[many].strip():
        raise ConfigError(
            "environment", many, "the variable is set but holds only white space", _list_fix(many)
        )
    if env.get(many, "").strip():
        keys = [(many, k) for k in _split_keys(env[many], many)]
        if not keys:
            raise ConfigError(
                "environment",
                many,
                f"the variable is set to {_shown(env[many])}, which holds no key",
                _list_fix(many),
            )
        return keys
    keys = []
    if one != many and env.get(one, "").strip():
        keys.append((one, env[one].strip()))
    numbered = sorted(
        (int(m.group(1)), name)
        for name in env
        if (m := re.fullmatch(re.escape(one) + r"_(\d+)", name)) and env[name].strip()
    )
    keys.extend((name, env[name].strip()) for _, name in numbered)
    return keys


def _order(env: Mapping[str, str], found: Mapping[str, object]) -> list[str]:
    """`SEARCHFUSE_PROVIDERS` checked against the providers whose keys are set."""
    text = env.get("SEARCHFUSE_PROVIDERS", "").strip()
    if not text:
        return list(found)
    order: list[str] = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        fix = f"list providers whose keys are set, comma-separated: {', '.join(found) or 'tavily'}"
        if part not in PROVIDERS:
            raise ConfigError(
                "environment", "SEARCHFUSE_PROVIDERS", f"{part!r} is not a provider", fix
            )
        if part not in found:
            variable = PROVIDERS[part].list_env
            raise ConfigError(
                "environment",
                "SEARCHFUSE_PROVIDERS",
                f"{part!r} is in the chain but {variable} holds no key",
                f"set {variable}, or remove {part} from SEARCHFUSE_PROVIDERS",
            )
        if part not in order:
            order.append(part)
    return order


def keys_in_env(environ: Mapping[str, str]) -> bool:
    """Whether `environ` names a key of any provider (a malformed variable raises
    ConfigError, as `config_from_env` would)."""
    return any(_provider_keys(environ, spec) for spec in PROVIDERS.values())


def config_from_env(environ: Mapping[str, str] | None = None) -> Config:
    """Keys from `TAVILY_API_KEYS` (comma- or newline-separated) or `TAVILY_API_KEY`,
    `TAVILY_API_KEY_2`, `TAVILY_API_KEY_3`, ...; likewise `EXA_API_KEYS`,
    `BRAVE_API_KEYS`, `SERPER_API_KEYS` (or their `*_API_KEY`) and `SEARXNG_URL`
    (instance addresses). `SEARCHFUSE_PROVIDERS="tavily,exa"` orders the chain
    (default: tavily, exa, brave, serper, searxng, those configured only).

    `SEARCHFUSE_COOLDOWN_MINUTES` sets the fallback cooldown. Raises
    [`ConfigError`][searchfuse.errors.ConfigError] when no key is set.
    """
    env = os.environ if environ is None else environ
    found = {name: k for name, spec in PROVIDERS.items() if (k := _provider_keys(env, spec))}
    if not found:
        raise ConfigError(
            "environment",
            "TAVILY_API_KEYS",
            "no Tavily key is set (neither TAVILY_API_KEYS nor TAVILY_API_KEY), and no other "
            "provider's (EXA_API_KEYS, BRAVE_API_KEYS, SERPER_API_KEYS, SEARXNG_URL)",
            'export TAVILY_API_KEYS="tvly-...,tvly-..." or create config/keys.json',
        )
    keys = [(variable, name, key) for name in found for variable, key in found[name]]
    _misplaced(keys)
    order = _order(env, found)
    keys = [(variable, name, key) for name in order for variable, key in found[name]]
    items: list[dict[str, Any]] = [
        {"url" if PROVIDERS[name].url_keyed else "key": key, "provider": name}
        for _, name, key in keys
    ]
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
    data = {
        "format_version": FORMAT_VERSION,
        "keys": items,
        "cooldown_minutes": cooldown,
        "providers": order,
    }
    try:
        return parse_config(data, "environment")
    except ConfigError as exc:
        # Name the variable, not a JSON path the user never wrote.
        index = int(m.group(1)) if exc.field and (m := re.search(r"\[(\d+)\]", exc.field)) else 0
        variable = keys[index][0] if index < len(keys) else "TAVILY_API_KEYS"
        problem = exc.problem
        listed = variable in {spec.list_env for spec in PROVIDERS.values()}
        if listed and exc.field and exc.field.startswith("keys[") and index < len(keys):
            same = [k for k in keys if k[0] == variable]
            problem = f"key {same.index(keys[index]) + 1} of {len(same)}: {problem}"
        url = PROVIDERS[keys[index][1]].url_keyed if index < len(keys) else False
        fix = _list_fix(variable) if listed or url else exc.fix
        raise ConfigError("environment", variable, problem, fix) from None
