"""Fixtures for the framework integrations: loopback only, made-up keys, fake time.

The frameworks are the real ones (``langchain``, ``langgraph``, ``hermes-agent``);
only Tavily and, where one is needed, the model are simulated.
"""

from __future__ import annotations

import pytest

#: Proxies must never see a loopback request (requests and httpx both honour them).
LOOPBACK = "127.0.0.1,localhost"


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy for loopback, and no Tavily settings inherited from the environment."""
    monkeypatch.setenv("NO_PROXY", LOOPBACK)
    monkeypatch.setenv("no_proxy", LOOPBACK)
    for name in ("TAVILY_API_KEY", "TAVILY_API_KEYS", "TAVILY_BASE_URL", "SEARCHFUSE_STATE"):
        monkeypatch.delenv(name, raising=False)
