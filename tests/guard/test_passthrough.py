"""A guard that does not read its calls (no cache, no checklist) runs them directly, without
the flow driver: every rule still applies as it does to a call the guard reads."""

from __future__ import annotations

from typing import Any

import pytest

from searchfuse.errors import CooldownActive, RateLimited, TurnLimitReached
from searchfuse.guard import guard, turn
from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend, http_error


class NotSent(Exception):
    """A client's error saying the request never left (it costs the turn nothing)."""

    sent = False


def outcomes(web_search: Any, clock: FakeClock, backend: Backend) -> list[str]:
    """One scenario, call by call: what each call gave, as text."""
    seen: list[str] = []

    def call(query: str) -> None:
        try:
            seen.append(f"{query}: {len(web_search(query)['results'])} result(s)")
        except StopIteration:
            seen.append(f"{query}: StopIteration")
        except Exception as exc:
            seen.append(f"{query}: {type(exc).__name__}")

    with turn():
        call("one")
        call("two")  # over the turn's one search
    with turn():
        backend.fail_next(NotSent())
        call("unsent")
        call("after unsent")  # the unsent search gave its budget back
    with turn():
        backend.fail_next(StopIteration())
        call("stop iteration")  # travels as it was raised, not as a RuntimeError
    with turn():
        backend.fail_next(http_error(429, "30"))
        call("rate limited")
    with turn():
        call("in cooldown")
    clock.advance(30)
    with turn():
        call("after cooldown")
    state = web_search.guard_state()
    seen.append(f"searches={state.searches} refusals={state.refusals}")
    return seen


@pytest.mark.parametrize("cache", [False, True], ids=["pass-through", "read"])
def test_a_pass_through_keeps_every_rule(cache: bool, clock: FakeClock, backend: Backend) -> None:
    @guard(clock=clock, per_turn=1, **({} if cache else {"cache": False}))
    def web_search(query: str) -> dict[str, Any]:
        return backend.search(query)

    assert outcomes(web_search, clock, backend) == [
        "one: 1 result(s)",
        f"two: {TurnLimitReached.__name__}",
        "unsent: NotSent",
        "after unsent: 1 result(s)",
        "stop iteration: StopIteration",
        f"rate limited: {RateLimited.__name__}",
        f"in cooldown: {CooldownActive.__name__}",
        "after cooldown: 1 result(s)",
        "searches=6 refusals=3",
    ]
    assert backend.queries == [
        "one",
        "unsent",
        "after unsent",
        "stop iteration",
        "rate limited",
        "after cooldown",
    ]
