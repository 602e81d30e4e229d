"""The original skill's own `state/quota.json`: one record per key of its keys file, by
position (`"keys": [{...}, {...}]`). Its running cooldowns are taken over when the
configured keys match its records (as many, in the same order); otherwise nothing is
taken and the warning says exactly why. Either way the search goes on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from searchfuse import Router
from searchfuse._secrets import fingerprint, mask
from searchfuse.testing import FakeClock, FakeTavily

K1, K2, K3 = "tvly-dev-test0001", "tvly-dev-test0002", "tvly-dev-test0003"


def skill_state(clock: FakeClock, *records: dict[str, Any] | None) -> bytes:
    """The skill's quota.json with `records` in the keys file's order."""
    data = {"month": "2026-01", "keys": list(records)}
    return json.dumps(data, indent=2).encode()


def cooling(clock: FakeClock, seconds: float = 600, **names: str) -> dict[str, Any]:
    """A record of the skill's whose 429 cooldown runs `seconds` more."""
    return {
        "cooldown_until": clock() + seconds,
        "cooldown_reason": "rate_limited",
        "last_error": "429: Too many requests",
        "disabled": False,
        **names,
    }


def project(tmp_path: Path, content: bytes, keys: list[str]) -> Path:
    """A project: config/keys.json with `keys`, and the skill's state/quota.json."""
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "keys.json"
    path.write_text(json.dumps({"format_version": 2, "keys": [{"key": k} for k in keys]}))
    path.chmod(0o600)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "quota.json").write_bytes(content)
    return path


def router_for(tmp_path: Path, store: str, keys_file: Path, clock: FakeClock, fake: FakeTavily):
    state = tmp_path / "state" / store
    return Router.from_config(keys_file, state=state, transport=fake.transport(), clock=clock)


STORES = pytest.mark.parametrize("store", ["quota.json", "searchfuse.db"])


@STORES
@pytest.mark.parametrize(
    "names",
    [{}, {"masked": mask(K1)}, {"fingerprint": fingerprint(K1)}, {"key": K1}],
    ids=["by-position", "masked", "fingerprint", "raw-key"],
)
def test_a_running_cooldown_of_the_skill_is_kept_when_the_keys_match(
    store: str,
    names: dict[str, str],
    tmp_path: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    content = skill_state(clock, cooling(clock, **names), {"disabled": False})
    keys_file = project(tmp_path, content, [K1, K2])
    fake = FakeTavily((K1, K2), clock=clock)
    with caplog.at_level(logging.INFO, logger="searchfuse"):
        router = router_for(tmp_path, store, keys_file, clock, fake)
        for n in range(3):
            router.search(f"q{n}")
    # The first key's cooldown held: nothing was sent with it.
    assert fake.requests_for(K1) == [] and len(fake.requests_for(K2, "/search")) == 3
    first = router.status()[0]
    assert first.state == "cooling" and first.cooldown_reason == "rate_limited"
    assert first.cooldown_left == pytest.approx(600, abs=1)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "listed by position (the original skill's format)" in said
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    source = tmp_path / "state" / "quota.json"
    if store == "searchfuse.db":
        assert source.read_bytes() == content  # imported, never written
        source.unlink()  # it holds a raw key in one case: not left behind
    else:
        kept = json.loads(source.read_bytes())  # written in searchfuse's form since
        assert set(kept["keys"]) <= {fingerprint(K1), fingerprint(K2)}
        assert K1 not in source.read_text()
    clock.advance(601)  # and the cooldown ends when it said
    router.search("later")
    assert len(fake.requests_for(K1, "/search")) + len(fake.requests_for(K2, "/search")) == 4


def _unmatched(clock: FakeClock) -> dict[str, tuple[bytes, list[str], str]]:
    return {
        "more-records": (
            skill_state(clock, cooling(clock), {}, {}),
            [K1, K2],
            "it has 3 record(s) and the configuration 2 key(s), so which record belongs to "
            "which key cannot be known",
        ),
        "fewer-records": (
            skill_state(clock, cooling(clock)),
            [K1, K2],
            "it has 1 record(s) and the configuration 2 key(s)",
        ),
        "other-order": (
            skill_state(clock, cooling(clock, masked=mask(K2)), {"masked": mask(K1)}),
            [K1, K2],
            "its record 1 is for a key ending '0002' while the configuration's key 1 is "
            "tvly-dev-…0001: the keys are in another order, or other keys",
        ),
        "other-key": (
            skill_state(clock, {}, cooling(clock, key=K3)),
            [K1, K2],
            f"its record 2 is for key {fingerprint(K3)} while the configuration's key 2 is "
            "tvly-dev-…0002",
        ),
        "not-a-record": (
            skill_state(clock, cooling(clock), "tvly-dev-…0002"),  # type: ignore[arg-type]
            [K1, K2],
            "its record 2 is not an object",
        ),
    }


@STORES
@pytest.mark.parametrize(
    "case", ["more-records", "fewer-records", "other-order", "other-key", "not-a-record"]
)
def test_records_that_do_not_match_the_keys_are_not_used_and_the_warning_says_why(
    store: str, case: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    content, keys, why = _unmatched(clock)[case]
    keys_file = project(tmp_path, content, keys)
    fake = FakeTavily(tuple(keys), clock=clock)
    with caplog.at_level(logging.WARNING, logger="searchfuse"):
        router = router_for(tmp_path, store, keys_file, clock, fake)
        router.search("q")
        router.search("q2")
    assert len(fake.searches) == 2  # the search goes on, on every key
    assert {s.state for s in router.status()} == {"available"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "listed by position (the original skill's format)" in warnings[0]
    assert why in warnings[0]
    source = tmp_path / "state" / "quota.json"
    if store == "searchfuse.db":
        assert warnings[0].startswith("not importing quota.json into searchfuse.db")
        assert source.read_bytes() == content  # left as it is
        source.unlink()
    else:
        assert "state searchfuse cannot use" in warnings[0] and "moved aside to" in warnings[0]
        (aside,) = source.parent.glob("quota.json.corrupt.*")
        assert aside.read_bytes() == content and aside.stat().st_mode & 0o777 == 0o600
        aside.unlink()
