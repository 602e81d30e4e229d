"""Make the pictures of docs/live.md: the terminal view (SVG) and the dashboard (PNG).

    python -m tests.live.screenshots docs/images

Both show the same fleet, made the way a real one gets there: three keys behind
the simulated Tavily and one behind the simulated Exa, on loopback; searches,
one key answering 401, Tavily failing once (Exa serves), then a 429; budgets for the
router, each conversation and each user.
The dashboard is photographed by the same headless Chromium the tests drive.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from searchfuse import Budget, RateLimited, Router, spend_scope
from searchfuse._live import snapshot
from searchfuse._serving import running
from searchfuse._watch import render
from searchfuse.dashboard import build_app
from searchfuse.router import KeyEntry
from searchfuse.testing import EXA_TEST_KEYS, FakeClock, FakeExa, FakeTavily

from .browser import Browser

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002", "tvly-test0003"]


def fleet(folder: Path) -> Router:
    """A router over a state that another router filled (see the module docstring)."""
    clock = FakeClock()
    tavily, exa = FakeTavily(KEYS, clock=clock), FakeExa(EXA_TEST_KEYS[:1], clock=clock)
    entries = [
        KeyEntry(KEYS[0], account="research@example.com", notes="dev key, research team"),
        KeyEntry(KEYS[1], account="research@example.com", notes="second dev key"),
        KeyEntry(KEYS[2], account="prod@example.com", notes="production"),
        KeyEntry(EXA_TEST_KEYS[0], provider="exa", notes="backup provider"),
    ]
    budgets = [
        Budget(200, unit="credits", per="router", period="day"),
        Budget(10, unit="searches", per="conversation"),
        Budget(50, unit="searches", per="user", period="day"),
    ]
    state = folder / "searchfuse.db"
    with tavily.serve() as tavily_url, exa.serve() as exa_url:
        options: dict[str, Any] = {"base_url": tavily_url, "base_urls": {"exa": exa_url}}
        options.update(clock=clock, budgets=budgets)
        writer = Router(entries, state=state, sleep=clock.advance, **options)
        for i in range(12):
            who = ("ana", "c-7") if i < 10 else ("ben", "c-8")  # ana's c-7 uses all 10
            with spend_scope(user=who[0], conversation=who[1]):
                writer.search(f"release notes {i}")
            clock.advance(120)
        tavily.revoke(KEYS[1])
        tavily.fail_next(503, times=3, path="/search")
        writer.search("changelog")  # Tavily fails: Exa serves, the move is named
        clock.advance(90)
        for i in range(3):
            writer.search(f"changelog {i}")  # Tavily serves again
            clock.advance(40)
        tavily.fail_next(429, retry_after=60, path="/search", detail="Too many requests.")
        for i in range(4):
            try:
                writer.search(f"burst {i}")
            except RateLimited:
                break
        clock.advance(12)
        writer.close()
    return Router(entries, state=state, **options)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        router = fleet(Path(tmp))
        console = Console(record=True, width=140, file=io.StringIO(), force_terminal=True)
        console.print(render(snapshot(router), interval=2.0))
        console.save_svg(str(out / "watch.svg"), title="searchfuse status --watch")
        with running(build_app(router)) as url:
            browser = Browser.start()
            try:
                page = browser.page(f"{url}/")
                page.wait_for("document.querySelectorAll('table.keys tbody tr').length === 4")
                page.screenshot(out / "dashboard.png")
            finally:
                browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
