"""No raw key in exception texts, reprs, status, diagnosis or state across failure scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from searchfuse import Router, SearchFuseError
from searchfuse.testing import FakeClock

from ..scripted import KEYS, Upstream

RAW = KEYS


def texts_of(exc: BaseException) -> list[str]:
    out = [str(exc), repr(exc)]
    to_dict = getattr(exc, "to_dict", None)
    if callable(to_dict):
        out.append(json.dumps(to_dict(), default=str))
    diagnosis = getattr(exc, "diagnosis", None)
    if diagnosis is not None:
        out.append(str(diagnosis))
        out.append(json.dumps(diagnosis.to_dict(), default=str))
    return out


@pytest.mark.parametrize(
    "scenario",
    ["401", "403", "429", "432", "433", "500", "timeout", "400", "echo"],
)
def test_failure_scenarios_leak_no_key(
    scenario: str, upstream: Upstream, clock: FakeClock, state_file: Path
) -> None:
    router = Router(
        KEYS, state=state_file, clock=clock, on_429="failover", max_keys_per_call=len(KEYS)
    )
    for key in KEYS:
        if scenario == "timeout":
            upstream.fail(key, httpx.ReadTimeout(f"timed out for Bearer {key}"))
        elif scenario == "echo":
            # An upstream that echoes the key back in its error text.
            upstream.search(key, 401, json_body={"detail": {"error": f"Invalid key {key}"}})
        else:
            upstream.search(key, int(scenario), headers={"Retry-After": "5"})
    collected = [repr(router), repr(router.config), repr(router.keys)]
    with pytest.raises(SearchFuseError) as info:
        router.search("q")
    collected += texts_of(info.value)
    collected += [json.dumps([s.to_dict() for s in router.status()])]
    diagnosis = router.diagnose()
    collected += [str(diagnosis), json.dumps(diagnosis.to_dict(), default=str)]
    collected.append(state_file.read_text() if state_file.exists() else "")
    blob = "\n".join(collected)
    for key in RAW:
        assert key not in blob
