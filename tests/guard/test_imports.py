"""The guard half stands alone: guarding any search function never loads the router."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What the guard must not pull in: the router half and the HTTP client behind it.
ROUTER_SIDE = ("searchfuse.router", "searchfuse.integrations", "httpx", "filelock")


def _loaded_after(statement: str) -> list[str]:
    code = (
        "import json, sys\n"
        f"{statement}\n"
        f"prefixes = {ROUTER_SIDE!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if any(m == p or m.startswith(p + '.') for p in prefixes))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(out.stdout))


@pytest.mark.parametrize(
    "statement",
    [
        "import searchfuse",
        "import searchfuse.guard",
        "from searchfuse import guard, turn, Guard, RateLimited",
        "import searchfuse._answers",
        (
            "from searchfuse import guard\n"
            "@guard\n"
            "def web_search(query: str) -> str:\n"
            "    return query\n"
            "web_search('a')"
        ),
    ],
)
def test_the_guard_does_not_import_the_router(statement: str) -> None:
    assert _loaded_after(statement) == []


def test_router_still_reachable_from_the_package() -> None:
    loaded = _loaded_after("import searchfuse\nsearchfuse.Router\nsearchfuse.Diagnosis")
    assert "searchfuse.router" in loaded
    assert "httpx" in loaded


def test_policy_reads_answers_through_the_neutral_module() -> None:
    from searchfuse import _answers
    from searchfuse.router import policy

    # One implementation, re-exported: the router and the guard cannot disagree.
    assert policy.status_of is _answers.status_of
    assert policy.retry_after_of is _answers.retry_after_of
    assert policy.clamp_park is _answers.clamp_park
    assert policy.MAX_PARK == _answers.MAX_PARK


def test_import_searchfuse_defers_what_only_a_guarded_call_needs() -> None:
    # wrapt (which imports importlib.metadata), cachetools, asyncio and
    # email.utils load on first use, not on `import searchfuse`.
    code = (
        "import sys\n"
        "import searchfuse\n"
        "print(sorted(m for m in ('wrapt', 'cachetools', 'asyncio', 'email.utils',"
        " 'importlib.metadata') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
