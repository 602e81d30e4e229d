"""Property tests: any input gives a result or a searchfuse error, never a raw exception or key."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchfuse import ConfigError, Router, SearchFuseError
from searchfuse._answers import (
    MAX_PARK,
    MAX_WAIT,
    MIN_RETRY_AFTER,
    clamp_park,
    clamp_wait,
    parse_retry_after,
)
from searchfuse.cli import format_results
from searchfuse.router.config import config_from_env, parse_config
from searchfuse.testing import FakeClock

from ..conftest import LEAKED_TAIL, leaks_in

KEYS = ["tvly-dev-test0001", "tvly-dev-test0001x2", "tvly-prod-test0003"]
FAST = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(KEYS)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "keys",
                    "key",
                    "account",
                    "notes",
                    "disabled",
                    "format_version",
                    "cooldown_minutes",
                    "source",
                    "x",
                ]
            )
            | st.text(max_size=8),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


def _no_leak(text: str) -> None:
    assert not leaks_in(text), text


def _no_own_key(text: str) -> None:
    """None of the router's keys, whole or as a tail (a served page may mention other keys)."""
    for key in KEYS:
        assert key not in text, text
    assert not LEAKED_TAIL.search(text), text


# -- configuration ------------------------------------------------------------------


@FAST
@given(json_values)
def test_any_decoded_keys_file_gives_a_config_or_a_config_error(data: Any) -> None:
    try:
        config = parse_config(data, "keys.json")
    except SearchFuseError as exc:
        _no_leak(str(exc))
    else:
        assert config.keys
        _no_leak(repr(config))


env_text = st.lists(st.sampled_from([*"tvly-dev-tst0123 ,;\"'\n\t\x00é…", *KEYS]), max_size=12).map(
    "".join
)


@FAST
@given(keys=env_text, minutes=st.text(max_size=12) | st.sampled_from(["0.5", "nan", "-1", "1e400"]))
def test_any_environment_gives_a_config_or_a_config_error(keys: str, minutes: str) -> None:
    env = {"TAVILY_API_KEYS": keys, "SEARCHFUSE_COOLDOWN_MINUTES": minutes}
    try:
        config = config_from_env(env)
    except SearchFuseError as exc:
        _no_leak(str(exc))
    else:
        assert all(k.key.isascii() and k.key.isprintable() for k in config.keys)
        assert math.isfinite(config.cooldown_minutes) and config.cooldown_minutes >= 0


# -- Retry-After ---------------------------------------------------------------------


@FAST
@given(
    st.none()
    | st.text(max_size=40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.booleans()
    | st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    st.floats(min_value=0, max_value=4e9),
)
def test_any_retry_after_is_absent_or_a_sane_number(value: Any, now: float) -> None:
    seconds = parse_retry_after(value, now)
    if seconds is not None:
        assert math.isfinite(seconds) and seconds >= MIN_RETRY_AFTER
        assert 0 <= clamp_park(seconds) <= MAX_PARK
        assert 0 <= clamp_wait(seconds) <= MAX_WAIT


# -- Tavily bodies ---------------------------------------------------------------------

statuses = st.sampled_from([200, 200, 200, 301, 400, 401, 403, 404, 429, 432, 433, 500, 503])
bodies = json_values | st.builds(
    lambda results, credits: {"query": "q", "results": results, "usage": {"credits": credits}},
    json_values,
    scalars,
)
usage_bodies = json_values | st.builds(
    lambda k, a: {"key": k, "account": a},
    st.dictionaries(st.sampled_from(["usage", "limit", "search_usage"]), scalars),
    st.dictionaries(
        st.sampled_from(["plan_usage", "plan_limit", "paygo_usage", "current_plan"]), scalars
    ),
)
raw_bodies = st.binary(max_size=40) | st.sampled_from([b"", b"[[[[[[", b'{"detail": "\\ud800"}'])


def _encode(body: Any) -> bytes:
    return json.dumps(body, allow_nan=True).encode()


@FAST
@given(
    status=statuses,
    body=bodies.map(_encode) | raw_bodies,
    usage=usage_bodies.map(_encode) | raw_bodies,
    retry_after=st.none() | st.text(max_size=12),
    query=st.text(min_size=1, max_size=30),
)
def test_any_tavily_answer_gives_a_result_or_a_searchfuse_error(
    status: int, body: bytes, usage: bytes, retry_after: str | None, query: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Retry-After": retry_after} if retry_after and retry_after.isascii() else {}
        if request.url.path == "/usage":
            return httpx.Response(200, content=usage)
        return httpx.Response(status, content=body, headers=headers)

    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "quota.json"
        router = Router(
            KEYS, state=state, clock=FakeClock(), transport=httpx.MockTransport(handler)
        )
        texts = []
        try:
            result = router.search(query)
        except SearchFuseError as exc:
            texts.append(str(exc))
        else:
            # What the server sent is passed through as it was (a page may quote anything);
            # it must print, and everything searchfuse says about it must be clean.
            assert isinstance(result, dict)
            format_results(result).encode("utf-8")
            texts.append(json.dumps(result.get("searchfuse"), allow_nan=False))
        records = [r.to_dict() for r in router.status()]
        texts.append(json.dumps(records, allow_nan=False))
        texts.append(str(router.diagnose()))
        texts.append(state.read_text() if state.exists() else "")
    for text in texts:
        _no_own_key(text)


@FAST
@given(json_values)
def test_any_result_shape_prints(data: Any) -> None:
    text = format_results(data if isinstance(data, dict) else {"results": data})
    text.encode("utf-8")  # printable on any UTF-8 terminal


# -- state values ---------------------------------------------------------------------


@FAST
@given(json_values)
def test_any_state_file_content_gives_state_or_a_warning_never_a_crash(data: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "quota.json"
        state.write_text(json.dumps(data, allow_nan=True))
        before = state.read_bytes()
        try:
            router = Router(
                KEYS,
                state=state,
                clock=FakeClock(),
                transport=httpx.MockTransport(lambda r: httpx.Response(500)),
            )
        except ConfigError as exc:
            # Not searchfuse state: named, and left exactly as it was.
            assert str(state) in str(exc)
            assert state.read_bytes() == before
            return
        records = router.status()
        json.dumps([r.to_dict() for r in records], allow_nan=False)
        _no_leak(str(router.diagnose()))
