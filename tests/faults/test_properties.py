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

from searchfuse import ConfigError, Router, SearchFuseError, guard
from searchfuse._answers import (
    MAX_PARK,
    MAX_WAIT,
    MIN_RETRY_AFTER,
    clamp_park,
    clamp_wait,
    parse_retry_after,
)
from searchfuse._secrets import fingerprint, mask
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


# -- the implicit burst window ------------------------------------------------------------


@FAST
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=40),
    per_turn=st.integers(min_value=1, max_value=3),
)
def test_sequential_calls_outside_a_turn_get_searches_in_every_new_window(
    gaps: list[float], per_turn: int
) -> None:
    """A tool called outside any turn scope, one call after another: a burst runs
    `min_interval` from its first call, whatever the calls it refuses, and each burst
    gets `per_turn` searches (the rule written out here, against the guard)."""
    clock = FakeClock()
    sent: list[str] = []
    tool = guard(
        lambda query: sent.append(query) or query,
        clock=clock,
        per_turn=per_turn,
        min_interval=2.0,
        cache=False,
        on_refusal="return",
    )
    expected, start, spent = [], -math.inf, 0
    for n, gap in enumerate(gaps):
        clock.advance(gap)
        now = clock()
        if now - start >= 2.0:
            start, spent = now, 0
        if spent < per_turn:
            spent += 1
            expected.append(f"q{n}")
        tool(f"q{n}")
    assert sent == expected


# -- the original skill's records by position ----------------------------------------------

_skill_records = st.lists(
    st.none()
    | st.fixed_dictionaries(
        {},
        optional={
            "cooldown_until": st.floats(allow_nan=True, allow_infinity=True) | scalars,
            "cooldown_reason": scalars,
            "disabled": scalars,
            "last_error": scalars,
            "masked": st.sampled_from(["tvly-dev-…0001", "tvly-dev-…0002", "x"]),
            "key": st.sampled_from(KEYS),
        },
    )
    | scalars,
    max_size=4,
)


def _matches(records: list[Any], keys: list[str]) -> bool:
    """The rule: as many records as keys, each one an object (or null) naming no other key."""

    def names_its_own(record: dict[str, Any], key: str) -> bool:
        masked = record.get("masked")
        return record.get("key", key) == key and (masked is None or masked[-4:] == mask(key)[-4:])

    return len(records) == len(keys) and all(
        r is None or (isinstance(r, dict) and names_its_own(r, k))
        for r, k in zip(records, keys, strict=False)
    )


@FAST
@given(records=_skill_records, keys=st.integers(min_value=1, max_value=3))
def test_any_skill_state_is_taken_over_or_set_aside_and_the_search_goes_on(
    records: list[Any], keys: int
) -> None:
    configured = KEYS[:keys]
    now = FakeClock()
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "quota.json"
        state.write_text(json.dumps({"month": "2026-01", "keys": records}, allow_nan=True))
        router = Router(
            configured,
            state=state,
            clock=now,
            transport=httpx.MockTransport(lambda r: httpx.Response(500)),
        )
        statuses = router.status()
        assert [s.fingerprint for s in statuses] == [fingerprint(k) for k in configured]
        set_aside = list(Path(folder).glob("quota.json.corrupt.*"))
        assert len(set_aside) == (0 if _matches(records, configured) else 1)
        if set_aside:  # never matched by guesswork
            assert all(s.cooldown_left == 0 for s in statuses)
        text = json.dumps([s.to_dict() for s in statuses], allow_nan=False)
        try:
            router.search("q")  # fails (500), and writes the state in searchfuse's form
        except SearchFuseError as exc:
            text += str(exc)
        text += state.read_text()
    _no_own_key(text)


# -- the state option, on the command line --------------------------------------------------

_PASSWORD = "Pw0rdSecret9"


_urls_with_a_password = st.builds(
    lambda scheme, user, rest: f"{scheme}://{user}:{_PASSWORD}@{rest}",
    st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,12}", fullmatch=True),
    st.text(alphabet="abc_-", max_size=5),
    st.text(alphabet="abc.:/09?=", max_size=15),
)


@settings(FAST, max_examples=30)  # each example runs the command: a store is made
@given(_urls_with_a_password | st.text(alphabet="abc:/.+-_ 09?=", max_size=30))
def test_any_state_option_is_served_or_a_usage_error_never_a_crash(value: str) -> None:
    """`--state` anything: the command works, or exits 2 with one line (no traceback,
    no password of a URL shown, whatever its scheme)."""
    import contextlib
    import io
    import os

    from searchfuse.cli import main

    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        cwd, keys = os.getcwd(), os.environ.get("TAVILY_API_KEYS")
        os.chdir(folder)
        os.environ["TAVILY_API_KEYS"] = KEYS[0]  # keys are fine: the state is what is tried
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["--state", value, "status", "--json"]) if value.strip() else 2
        finally:
            os.chdir(cwd)
            if keys is None:
                del os.environ["TAVILY_API_KEYS"]
            else:
                os.environ["TAVILY_API_KEYS"] = keys
    assert code in (0, 2), err.getvalue()
    assert _PASSWORD not in out.getvalue() + err.getvalue()
    if code == 2 and out.getvalue():
        assert json.loads(out.getvalue())["error"] in ("usage", "config", "store")
