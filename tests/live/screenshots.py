"""Make the pictures of docs/live.md: the terminal view (SVG) and the dashboard (PNG).

    python -m tests.live.screenshots docs/images

Both show the same fleet, made the way a real one gets there: three keys behind
the simulated Tavily on loopback, a few searches, one key answering 401 and
another 429, two budgets. The dashboard is photographed by the same headless
Chromium the tests drive.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from searchfuse import Budget, RateLimited, Router
from searchfuse._live import snapshot
from searchfuse._serving import running
from searchfuse._watch import render
from searchfuse.dashboard import build_app
from searchfuse.router import KeyEntry
from searchfuse.testing import FakeClock, FakeTavily

from .browser import Browser

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002", "tvly-test0003"]


def fleet(folder: Path) -> Router:
    """A router over a state that another router filled (see the module docstring)."""
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    entries = [
        KeyEntry(KEYS[0], account="research@example.com", notes="dev key, research team"),
        KeyEntry(KEYS[1], account="research@example.com", notes="second dev key"),
        KeyEntry(KEYS[2], account="prod@example.com", notes="production"),
    ]
    budgets = [
        Budget(200, unit="credits", per="router", period="day"),
        Budget(10, unit="searches", per="conversation"),
    ]
    state = folder / "searchfuse.db"
    with fake.serve() as url:
        writer = Router(
            entries, state=state, base_url=url, clock=clock, sleep=clock.advance, budgets=budgets
        )
        for i in range(12):
            writer.search(f"release notes {i}")
            clock.advance(150)
        fake.revoke(KEYS[1])
        for i in range(4):
            writer.search(f"changelog {i}")
            clock.advance(40)
        fake.fail_next(429, retry_after=60, path="/search", detail="Too many requests.")
        for i in range(4):
            try:
                writer.search(f"burst {i}")
            except RateLimited:
                break
        clock.advance(12)
        writer.close()
    return Router(entries, state=state, clock=clock, budgets=budgets)


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
                page.wait_for("document.querySelectorAll('table.keys tbody tr').length === 3")
                page.screenshot(out / "dashboard.png")
            finally:
                browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
