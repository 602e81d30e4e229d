"""Configuring a chain: `Router({...})`, keys.json v2's `provider` / `url` / `rate` /
`providers`, the environment; and every mistake refused naming the file, field and fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from searchfuse import ConfigError, Router, Throttled
from searchfuse.providers._base import Rate
from searchfuse.router._rates import key_rate
from searchfuse.router.config import config_from_env as from_env
from searchfuse.router.config import load_config, parse_config, render_config
from searchfuse.testing import FakeClock, FakeTavily

TAVILY_KEY = "tvly-dev-test0001"
EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"
BRAVE_KEY = "BSAtest0000000000000000000000b1"
SERPER_KEY = "0123456789abcdef0123456789abcdef0123ab12"


def _config(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "config" / "keys.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def test_a_mapping_names_providers_in_chain_order() -> None:
    config = parse_config(
        {
            "format_version": 2,
            "keys": [
                {"key": EXA_KEY, "provider": "exa", "rate": "10/s"},
                {"key": TAVILY_KEY},
                {"provider": "searxng", "url": "http://127.0.0.1:8888"},
            ],
            "providers": ["tavily", "exa", "searxng"],
        },
        "keys.json",
    )
    assert config.providers == ("tavily", "exa", "searxng")
    assert [e.provider for e in config.keys] == ["exa", "tavily", "searxng"]
    assert key_rate(config.keys[0]) == Rate(10, 1.0)
    assert config.keys[2].key == "http://127.0.0.1:8888"
    # Without a top-level order, the order in which the keys name providers.
    again = parse_config(json.loads(render_config(config)), "keys.json")
    assert again.keys == config.keys and again.providers == config.providers


def test_the_environment_names_every_provider_and_the_order() -> None:
    env = {
        "TAVILY_API_KEY": TAVILY_KEY,
        "EXA_API_KEYS": EXA_KEY,
        "BRAVE_API_KEY": BRAVE_KEY,
        "SERPER_API_KEY": SERPER_KEY,
        "SEARXNG_URL": "http://127.0.0.1:8888,http://127.0.0.1:8889",
    }
    config = from_env(env)
    assert config.providers == ("tavily", "exa", "brave", "serper", "searxng")
    assert len([e for e in config.keys if e.provider == "searxng"]) == 2
    ordered = from_env({**env, "SEARCHFUSE_PROVIDERS": "exa,tavily"})
    assert ordered.providers == ("exa", "tavily")
    with pytest.raises(ConfigError) as bad:
        from_env({"TAVILY_API_KEY": TAVILY_KEY, "SEARCHFUSE_PROVIDERS": "tavily,exa"})
    assert bad.value.field == "SEARCHFUSE_PROVIDERS" and "EXA_API_KEYS" in bad.value.fix


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        ({"key": TAVILY_KEY, "provider": "bing"}, "keys[0].provider", "not a provider"),
        ({"provider": "searxng"}, "keys[0].url", "instance's address"),
        ({"provider": "searxng", "url": "ftp://x"}, "keys[0].url", "ftp"),
        ({"key": TAVILY_KEY, "rate": "10/fortnight"}, "keys[0].rate", "not a request rate"),
        ({"key": TAVILY_KEY, "rate": 10}, "keys[0].rate", "not a request rate"),
        ({"key": EXA_KEY}, "keys[0].key", "looks like an Exa key"),
        ({"key": TAVILY_KEY, "provider": "exa"}, "keys[0].key", "looks like a Tavily key"),
        ({"key": SERPER_KEY, "provider": "brave"}, "keys[0].key", "looks like a Serper key"),
    ],
)
def test_a_bad_entry_names_the_file_the_field_and_the_fix(
    tmp_path: Path, item: dict[str, Any], field: str, words: str
) -> None:
    path = _config(tmp_path, {"format_version": 2, "keys": [item]})
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    error = raised.value
    assert error.source == str(path) and error.field == field and words in error.problem
    assert error.fix
    for key in (TAVILY_KEY, EXA_KEY, SERPER_KEY):
        assert key not in str(error)


@pytest.mark.parametrize(
    ("providers", "words"),
    [
        (["tavily", "exa"], '"exa" is in the chain but no key names it'),
        (["exa"], "no key names it"),
        ([], "expected a list"),
        (["tavily", "tavily"], "named twice"),
    ],
)
def test_a_bad_order_is_refused(tmp_path: Path, providers: list[str], words: str) -> None:
    data = {"format_version": 2, "keys": [{"key": TAVILY_KEY}], "providers": providers}
    with pytest.raises(ConfigError, match=words):
        load_config(_config(tmp_path, data))


def test_a_key_the_order_leaves_out_is_refused(tmp_path: Path) -> None:
    data = {
        "format_version": 2,
        "keys": [{"key": TAVILY_KEY}, {"key": EXA_KEY, "provider": "exa"}],
        "providers": ["tavily"],
    }
    with pytest.raises(ConfigError, match='keys name "exa"'):
        load_config(_config(tmp_path, data))


def test_router_takes_providers_and_their_addresses() -> None:
    router = Router(
        {"exa": [EXA_KEY], "tavily": [TAVILY_KEY]}, base_urls={"exa": "http://127.0.0.1:9"}
    )
    assert [e.provider for e in router.keys] == ["exa", "tavily"]
    assert EXA_KEY not in repr(router) and TAVILY_KEY not in repr(router)
    with pytest.raises(ConfigError, match="not a provider"):
        Router({"tavily": [TAVILY_KEY]}, base_urls={"bingo": "http://127.0.0.1:1"})
    with pytest.raises(ConfigError, match="base_urls"):
        Router({"tavily": [TAVILY_KEY]}, base_urls={"tavily": "not a url"})


def test_a_rate_per_second_holds_across_routers_sharing_the_store(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    """ "10/s": at most ten requests in any second, whichever router sends them."""
    fake = FakeTavily(keys=[TAVILY_KEY], clock=fake_clock)
    state = tmp_path / "state" / "searchfuse.db"
    with fake.serve() as url:
        routers = [
            Router(
                [{"key": TAVILY_KEY, "rate": "10/s"}],  # type: ignore[list-item]
                base_url=url,
                state=state,
                clock=fake_clock,
                max_wait=0.0,
            )
            for _ in range(2)
        ]
        for i in range(10):
            routers[i % 2].search(f"q{i}")
        for router in routers:
            with pytest.raises(Throttled):
                router.search("one too many")
        fake_clock.advance(1.1)
        routers[1].search("room again")
    assert len(fake.searches) == 11
