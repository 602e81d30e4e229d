"""A scripted Tavily on pytest-httpx for exact reaction-table tests, and made-up keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

KEYS = [f"tvly-dev-test000{i}" for i in range(1, 5)]
BASE = "https://api.tavily.com"


def usage_body(
    usage: float = 10, limit: float | None = 1000, plan_usage: float = 10, plan_limit: float = 1000
) -> dict[str, Any]:
    return {
        "key": {"usage": usage, "limit": limit, "search_usage": usage},
        "account": {
            "current_plan": "Researcher",
            "plan_usage": plan_usage,
            "plan_limit": plan_limit,
            "paygo_usage": 0,
            "paygo_limit": None,
        },
    }


def search_body(query: str = "q", credits: int = 1) -> dict[str, Any]:
    return {
        "query": query,
        "answer": None,
        "images": [],
        "results": [{"title": "T", "url": "https://example.com", "content": "c", "score": 0.9}],
        "response_time": 0.1,
        "usage": {"credits": credits},
        "request_id": "r-1",
    }


class Upstream:
    """A scripted Tavily: per-key answers for /search, a reusable 200 for /usage."""

    def __init__(self, httpx_mock: Any) -> None:
        self.mock = httpx_mock
        self.usage_json = usage_body()
        self.mock.add_callback(self._usage, url=f"{BASE}/usage", is_reusable=True, is_optional=True)

    def _usage(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=self.usage_json)

    def search(
        self,
        key: str,
        status: int = 200,
        *,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        reusable: bool = False,
    ) -> None:
        if json_body is None:
            json_body = search_body() if status == 200 else {"detail": {"error": f"error {status}"}}
        self.mock.add_response(
            method="POST",
            url=f"{BASE}/search",
            status_code=status,
            json=json_body,
            headers=headers,
            match_headers={"Authorization": f"Bearer {key}"},
            is_reusable=reusable,
            is_optional=True,  # tests assert what was requested themselves
        )

    def fail(self, key: str, exc: Exception) -> None:
        self.mock.add_exception(
            exc, url=f"{BASE}/search", match_headers={"Authorization": f"Bearer {key}"}
        )

    def requests(self) -> list[tuple[str, str]]:
        """``(path, key)`` of every request that reached the mock, in order."""
        out = []
        for r in self.mock.get_requests():
            out.append((r.url.path, r.headers["authorization"].removeprefix("Bearer ")))
        return out

    def searches(self) -> list[str]:
        return [key for path, key in self.requests() if path == "/search"]

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.mock.get_requests() if r.url.path == "/search"]


def read_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def isolate_cli(tmp_path: Path, monkeypatch: Any) -> None:
    """Run the CLI in `tmp_path`: no provider or SEARCHFUSE_ variables, the user's
    state directory (platformdirs, for keys from the environment) inside it."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("TAVILY_", "SEARCHFUSE_", "EXA_", "BRAVE_", "SERPER_", "SEARXNG_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
