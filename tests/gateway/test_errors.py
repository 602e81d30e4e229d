"""The error table, row by row: each exception the router and guard raise, and its answer."""

from __future__ import annotations

import pytest

from searchfuse.errors import (
    BadRequest,
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    SearchFailed,
    SearchRefused,
    StoreUnavailable,
    Throttled,
    TurnLimitReached,
)
from searchfuse.gateway import ERRORS, answer_for
from searchfuse.gateway._errors import MESSAGES
from searchfuse.router.diagnose import Diagnosis


def _budget(message: str, retry_after: float) -> SearchRefused:
    """What a spend budget's refusal looks like: a refusal whose reason is "budget".

    An instance, not a subclass: the suite reads SearchRefused's subclasses as the
    refusals that exist.
    """
    refusal = SearchRefused(message, retry_after=retry_after)
    refusal.reason = "budget"
    return refusal


def _diagnosis(verdict: str) -> Diagnosis:
    return Diagnosis(steps=(), verdict=verdict, burst=False, advice="")


@pytest.mark.parametrize(
    ("exc", "status", "retry_after"),
    [
        (_budget("Search refused: the daily budget is spent.", 3600), 432, "3600"),
        (TurnLimitReached(1), 429, None),
        (RateLimited(30.0, key="tvly-dev-…0001"), 429, "30"),
        (CooldownActive(12.2), 429, "13"),
        (Throttled(0.4), 429, "1"),
        (NoKeyAvailable(diagnosis=_diagnosis("exhausted")), 432, None),
        (NoKeyAvailable(timed_out=True), 504, None),
        (NoKeyAvailable(retry_after=90.0, diagnosis=_diagnosis("cooling")), 503, "90"),
        (NoKeyAvailable(diagnosis=_diagnosis("auth")), 503, None),
        (BadRequest("max_results must be 0-20"), 400, None),
        (BadRequest("query is empty", sent=False), 400, None),
        (StoreUnavailable("redis://cache:6379/0", "unreachable", "start it"), 503, None),
        (ConfigError("keys.json", "keys", "no keys", "add one"), 503, None),
        (SearchFailed("answer was not JSON", status_code=200), 502, None),
        (RuntimeError("a bug"), 500, None),
    ],
)
def test_each_exception_gets_its_status_and_retry_after(
    exc: Exception, status: int, retry_after: str | None
) -> None:
    answer = answer_for(exc)
    assert answer.status == status
    assert answer.headers.get("Retry-After") == retry_after
    assert answer.body == {"detail": {"error": answer.message}}


@pytest.mark.parametrize(
    "exc",
    [
        StoreUnavailable("redis://:hunter2@cache:6379/0", "unreachable", "run redis-server"),
        ConfigError("/etc/searchfuse/keys.json", "keys[0].key", "empty", "edit the file"),
        SearchFailed("Tavily answered 200 with /srv/app/state.db locked"),
        RuntimeError("/home/op/config/keys.json"),
    ],
)
def test_operator_text_never_reaches_the_client(exc: Exception) -> None:
    message = answer_for(exc).message
    assert message in MESSAGES.values()  # the gateway's own short text, nothing of the error's
    assert "redis" not in message and "keys.json" not in message


def test_refusals_answer_their_own_model_facing_message() -> None:
    for refusal in (TurnLimitReached(1), RateLimited(30.0), CooldownActive(5.0), Throttled(2.0)):
        assert answer_for(refusal).message == refusal.message


def test_every_row_is_reachable() -> None:
    """No row is shadowed by one above it that matches everything it matches."""
    for index, row in enumerate(ERRORS):
        for earlier in ERRORS[:index]:
            if earlier.when is not None or isinstance(earlier.match, str):
                continue
            if isinstance(row.match, type):
                assert not issubclass(row.match, earlier.match), (row, earlier)
