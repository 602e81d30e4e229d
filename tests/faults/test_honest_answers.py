"""What the model and the user are told matches what is wrong: a wait is offered only
when waiting helps, the configuration is named when it is the cause, a probe that
was skipped says why, and a router-wide hold shows in every key's status."""

from __future__ import annotations

import pytest

from searchfuse import NoKeyAvailable, RateLimited, Router, guard, turn
from searchfuse.router import KeyEntry
from searchfuse.router.diagnose import VERDICTS
from searchfuse.testing import FakeClock, FakeTavily

K1, K2, OTHER = "tvly-dev-test0001", "tvly-dev-test0002", "tvly-dev-test0099"


def rejected(clock: FakeClock) -> tuple[FakeTavily, Router]:
    """A router whose every key Tavily rejects (401)."""
    fake = FakeTavily((OTHER,), clock=clock)
    return fake, Router([K1, K2], transport=fake.transport(), clock=clock)


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_rejected_keys_are_never_offered_as_a_wait(attempt: int) -> None:
    clock = FakeClock()
    _, router = rejected(clock)
    for _ in range(attempt):
        with pytest.raises(NoKeyAvailable) as info:
            router.search("q")
        clock.advance(5)
    refusal = info.value
    assert refusal.diagnosis is not None and refusal.diagnosis.verdict == "auth"
    text = refusal.message.lower()
    assert "rejected" in text and "check" in text
    assert "available again" not in text and "wait" not in text.replace("waiting will not", "")
    assert refusal.retry_after is None  # no wait fixes a rejected key


def test_the_guard_hands_the_model_the_same_honest_refusal() -> None:
    clock = FakeClock()
    _, router = rejected(clock)
    tool = guard(lambda query: router.search(query), on_refusal="return", clock=clock)
    answers = []
    for query in ("first", "second"):
        with turn():
            answers.append(tool(query))
        clock.advance(30)
    for answer in answers:
        assert isinstance(answer, str) and "rejected" in answer
        assert "3600" not in answer and "ask whether to wait" not in answer


def test_every_key_disabled_in_the_config_is_named_as_the_configuration() -> None:
    clock = FakeClock()
    fake = FakeTavily((K1, K2), clock=clock)
    keys = [KeyEntry(K1, disabled=True), KeyEntry(K2, disabled=True)]
    router = Router(keys, transport=fake.transport(), clock=clock)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    diagnosis = info.value.diagnosis
    assert diagnosis is not None
    assert diagnosis.verdict == "config" and "config" in VERDICTS
    assert "disabled" in diagnosis.advice and "failed" not in diagnosis.advice
    assert "disabled" in info.value.message and info.value.retry_after is None
    assert fake.requests == []  # nothing was sent


def test_no_keys_at_all_is_the_configuration_too() -> None:
    router = Router([], fallback=lambda query, **kw: {"results": []})
    assert router.diagnose().verdict == "config"


def test_a_mix_of_disabled_and_rejected_keys_is_not_called_a_provider_failure() -> None:
    clock = FakeClock()
    fake = FakeTavily((OTHER,), clock=clock)
    router = Router([KeyEntry(K1, disabled=True), K2], transport=fake.transport(), clock=clock)
    with pytest.raises(NoKeyAvailable) as info:
        router.search("q")
    assert info.value.diagnosis is not None
    assert info.value.diagnosis.verdict == "auth"
    assert "Tavily failed" not in info.value.diagnosis.advice


def test_a_key_re_checked_right_after_a_401_is_probed_again() -> None:
    clock = FakeClock()
    fake, router = rejected(clock)
    (first,) = router.test_keys()[:1]
    assert first.status_code == 401
    clock.advance(1)
    again = router.test_keys()
    assert [r.status_code for r in again] == [401, 401]  # asked again, not skipped
    assert sum(1 for r in fake.requests if r.path == "/usage") == 4


def test_a_skipped_probe_says_the_true_reason() -> None:
    clock = FakeClock()
    fake = FakeTavily((K1,), clock=clock)
    router = Router([K1], transport=fake.transport(), clock=clock)
    for _ in range(10):
        assert router.test_keys()[0].ok
    (skipped,) = router.test_keys()
    assert skipped.status_code is None
    assert "10 /usage requests in the last 10 minutes" in skipped.note
    assert "the next is possible in" in skipped.note
    assert sum(1 for r in fake.requests if r.path == "/usage") == 10


def test_a_router_wide_hold_shows_in_every_keys_status() -> None:
    clock = FakeClock()
    fake = FakeTavily((K1, K2), clock=clock)
    router = Router([K1, K2], transport=fake.transport(), clock=clock)
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        router.search("q")
    statuses = router.status()
    assert [s.state for s in statuses if s.state != "cooling"] == ["held"]
    held = next(s for s in statuses if s.state == "held")
    assert held.blocked_reason is not None and "429" in held.blocked_reason
    assert held.cooldown_left == pytest.approx(30.0)
    clock.advance(31)
    assert {s.state for s in router.status()} == {"available"}
