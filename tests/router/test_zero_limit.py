"""A limit of 0 means nothing is served, and every surface says so the same way.

A rate of 0 in the configuration sends nothing: it is refused when read, naming the
field and the fix (`disabled` keeps a key out of rotation). A key whose provider reports
a limit of 0 (Tavily's `/usage`) serves nothing: status, the pick and the diagnosis agree.
"""

from __future__ import annotations

import pytest

from searchfuse import ConfigError, NoKeyAvailable, Router
from searchfuse.testing import FakeClock, FakeTavily

KEY = "tvly-dev-test0001"


@pytest.mark.parametrize(("field", "value"), [("rate", "0/s"), ("rate", "0/min"), ("rpm", 0)])
def test_a_rate_of_zero_is_refused_naming_the_field_and_the_fix(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as raised:
        Router({"tavily": [{"key": KEY, field: value}]})
    error = raised.value
    assert error.field == f"keys[0].{field}"
    assert "0" in error.problem and "nothing" in error.problem
    assert "disabled" in error.fix


def test_a_key_limit_of_zero_serves_nothing_on_every_surface(fake_clock: FakeClock) -> None:
    fake = FakeTavily(keys=[KEY], clock=fake_clock)
    fake.set_limit(KEY, 0)
    with fake.serve() as url:
        router = Router([KEY], base_url=url, clock=fake_clock)
        with pytest.raises(NoKeyAvailable) as raised:
            router.search("q")
    assert [r.path for r in fake.requests] == ["/usage"]  # nothing searched
    (status,) = router.status()
    assert status.state == "exhausted" and status.key_limit == 0 and status.remaining == 0
    assert status.blocked_reason is not None and "limit of 0" in status.blocked_reason
    assert "limit of 0" in raised.value.reasons[status.key]
    diagnosis = raised.value.diagnosis
    assert diagnosis is not None and diagnosis.verdict == "exhausted"
    (quota,) = diagnosis.step("quota").evidence
    assert quota["quota"] == "exhausted" and "limit of 0" in quota["note"]
