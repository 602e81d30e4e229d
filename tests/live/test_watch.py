"""`searchfuse status --watch`: what a person at a terminal sees, and how it ends.

The live view runs as a real process under a pseudo-terminal; another process (this
test) searches through the same SQLite state and hits a 429 from the simulated
Tavily on loopback; the screen, as a terminal emulator (pyte) draws it, must show
the cooling key, the hold and the event. Ctrl-C (the byte a terminal sends) ends it
with exit code 0 and no traceback.
"""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest
from rich.console import Console

from searchfuse import Budget, BudgetExhausted, RateLimited, Router, spend_scope
from searchfuse._live import Snapshot, snapshot
from searchfuse._watch import render, watch
from searchfuse.cli import main
from searchfuse.router.state import Event
from searchfuse.testing import FakeClock, FakeTavily

from ..conftest import leaks_in

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]
COLUMNS, ROWS = 150, 40


def many_keys(n: int) -> list[str]:
    """`n` more made-up development keys."""
    return [f"tvly-dev-fleet{i:04d}" for i in range(n)]


class Terminal:
    """A process on a pseudo-terminal, and its screen as a VT100 emulator draws it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.screen = pyte.Screen(int(env["COLUMNS"]), int(env["LINES"]))
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            try:
                os.execve(sys.executable, [sys.executable, *argv], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.status: int | None = None

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # the child closed its side
                data = b""
            self.raw += data
            self.stream.feed(data)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, found: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read(0.1)
            if found(self.text()):
                return self.text()
        raise AssertionError(f"the screen never showed it; it shows:\n{self.text()}")

    def exit_code(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read(0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.read(0.05)
                return os.waitstatus_to_exitcode(status)
        raise AssertionError("the view did not end")

    def close(self) -> None:
        try:
            if os.waitpid(self.pid, os.WNOHANG)[0] == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def start(*args: str, size: tuple[int, int] = (COLUMNS, ROWS), keys: int = 0) -> Terminal:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
            "TERM": "xterm-256color",
            "COLUMNS": str(size[0]),
            "LINES": str(size[1]),
            "TAVILY_API_KEYS": ",".join([*KEYS, *many_keys(keys)]),
            "SEARCHFUSE_STATE": str(tmp_path / "state" / "searchfuse.db"),
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        term = Terminal(["-m", "searchfuse", *args], env)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def test_the_screen_shows_a_429_another_process_recorded(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    term = terminal("status", "--watch", "--interval", "0.2")
    first = term.wait_for(lambda s: s.count("available") == 2 and "hold: none" in s)
    assert "tvly-dev-…0001" in first and "0/100 per min" in first
    # No state yet: the view says so and creates nothing (not even the folder).
    assert "no state at " in first and "looking creates nothing" in first
    assert not (tmp_path / "state").exists()

    fake = FakeTavily(KEYS)
    with fake.serve() as url:
        other = Router(KEYS, state=tmp_path / "state" / "searchfuse.db", base_url=url)
        other.search("first")
        fake.fail_next(429, retry_after=40, path="/search", detail="slow down, please")
        with pytest.raises(RateLimited) as caught:
            other.search("second")
        other.close()
    hit = caught.value.key
    assert hit in ("tvly-dev-…0001", "tvly-dev-…0002")

    screen = term.wait_for(lambda s: "cooling" in s and "hold: every search waits" in s)
    assert "no state at " not in screen  # read once the search created it
    row = next(line for line in screen.splitlines() if "cooling" in line)
    assert row.split()[0] == hit  # the key that answered 429, masked
    assert "rate_limited" in row  # its countdown names why it cools
    assert "429: slow down, please" in row  # the last error, as the server said it
    rows = [line for line in screen.splitlines() if "per min" in line]
    sent = [int(line.split("/100 per min")[0].split()[-1]) for line in rows]
    assert sum(sent) == 2  # both searches, in the keys' pacing windows
    assert f"after a 429 on {hit} (tavily)" in screen
    waits = re.search(r"waits (\d+) s after", screen)
    assert waits is not None and 30 <= int(waits.group(1)) <= 40  # counting down from 40 s
    events = screen[screen.index("last events") :]
    assert f"429 {hit} tavily for 40 s" in events
    other_row = next(line for line in screen.splitlines() if "held" in line)
    assert other_row.split()[0] != hit  # every other key waits for the hold

    os.write(term.fd, b"\x03")  # Ctrl-C, as the terminal sends it
    assert term.exit_code() == 0
    shown = term.raw.decode("utf-8", "replace")
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown
    assert not leaks_in(shown)


def test_a_narrow_short_terminal_keeps_each_keys_state_and_countdown_and_sigterm_ends_it(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    """60 columns, 24 rows, 42 keys: the cooling key comes first with its whole
    countdown, the others are counted, nothing scrolls; SIGTERM exits 0 like Ctrl-C."""
    term = terminal("status", "--watch", "--interval", "0.2", size=(60, 24), keys=40)
    fake = FakeTavily([*KEYS, *many_keys(40)])
    with fake.serve() as url:
        other = Router(KEYS, state=tmp_path / "state" / "searchfuse.db", base_url=url)
        fake.fail_next(429, retry_after=600, path="/search", detail="slow down, please")
        with pytest.raises(RateLimited) as caught:
            other.search("refused")
        other.close()
    screen = term.wait_for(lambda s: "cooling" in s and "more of 42 keys" in s)
    lines = screen.splitlines()
    row = next(i for i, line in enumerate(lines) if "cooling" in line)
    assert lines[row].split()[:2] == [caught.value.key, "cooling"]
    assert re.search(r"cooling +(9|10) min \(rate_limited\)$", lines[row])
    assert lines[row + 1].strip().endswith("· window 1/100 per min")
    assert lines[row + 2].strip() == "last error: 429: slow down, please"
    assert re.search(r"… \d+ more of 42 keys: \d+ held", screen)
    assert lines[0].startswith("searchfuse · ") and "hold: every search waits" in screen
    assert len(term.screen.display) == 24 and "last events" in screen  # all of it on screen
    os.kill(term.pid, signal.SIGTERM)
    assert term.exit_code() == 0
    shown = term.raw.decode("utf-8", "replace")
    assert "Traceback" not in shown and not leaks_in(shown)


@pytest.mark.parametrize(
    "args",
    [
        ["--watch", "--interval", "0"],
        ["--watch", "--interval", "nan"],
        ["--watch", "--interval", "soon"],
        ["--watch", "--interval", "-1"],
        ["--interval", "5"],
        ["--watch", "--json"],
    ],
)
def test_a_bad_interval_is_a_usage_error(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", ",".join(KEYS))
    assert main(["status", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("searchfuse status: error: ") and len(err.splitlines()) == 1
    assert "interval" in err or "--json" in err


def _view(snap: Snapshot, elapsed: float = 0.0) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(render(snap, elapsed, interval=2.0))
    return console.export_text()


def test_texts_from_the_store_and_the_server_are_shown_as_text() -> None:
    """Markup, terminal escapes and pasted keys in errors and events are shown inert."""
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    router = Router(KEYS, transport=fake.transport(), clock=clock, sleep=clock.advance)
    hostile = f"[bold red]<script>alert(1)</script> {KEYS[1]}"
    fake.fail_next(429, retry_after=30, path="/search", detail=hostile)
    with pytest.raises(RateLimited):
        router.search("q")
    # Another process (or a hand edit) can leave any text in the store's event log.
    now = clock()
    event = Event(now, "passed_over", "exa", None, f"\x1b[2J[link=x]gone[/link] {KEYS[0]}")
    router.store.update(now, lambda state: state.note(event))
    console = Console(record=True, width=200, file=io.StringIO(), force_terminal=True)
    console.print(render(snapshot(router)))
    text = console.export_text()
    ansi = console.file.getvalue()  # type: ignore[attr-defined]
    assert "429: [bold red]<script>alert(1)</script> tvly-dev-…0002" in text
    assert "passed over exa · \\x1b[2J[link=x]gone[/link] tvly-dev-…0001" in text
    assert "\x1b[2J" not in ansi  # the stored escape never reaches the terminal
    assert not leaks_in(text) and not leaks_in(ansi)


def test_countdowns_tick_between_reads_and_budgets_show() -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    router = Router(KEYS, transport=fake.transport(), clock=clock, sleep=clock.advance)
    router.search("one")
    router.search("two")
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited):
        router.search("three")
    snap = snapshot(router)
    assert "30 s (rate_limited)" in _view(snap)
    later = _view(snap, elapsed=12.5)
    assert "18 s (rate_limited)" in later and "waits 18 s after a 429" in later
    assert "hold: none" in _view(snap, elapsed=31)
    assert "budgets: none set for this router" in later


#: A conversation id as a gateway client may send it (X-Session-Id): markup, a
#: terminal escape that would write the clipboard, a bell.
HOSTILE_ID = "<b>c-9</b>\x1b]52;c;aGk=\x07[red]x"


def test_budgets_show_the_routers_use_and_every_conversations_and_users() -> None:
    """As `status --budgets` says them: the router's used and left, and per conversation
    and per user how many spent, how many used it all and who most, ids shown inert."""
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    budgets = [
        Budget(10, unit="searches", per="router", period="day"),
        Budget(3, unit="searches", per="conversation"),
        Budget(5, unit="searches", per="user"),
    ]
    options: dict[str, Any] = {"transport": fake.transport(), "clock": clock, "budgets": budgets}
    router = Router(KEYS, sleep=clock.advance, **options)
    with spend_scope(user="alice", conversation="c-1"):
        for i in range(3):
            router.search(f"alice {i}")
        with pytest.raises(BudgetExhausted):
            router.search("alice, once more")
    with spend_scope(user="bob", conversation=HOSTILE_ID):
        router.search("bob")
    watcher = Router(KEYS, state=router.store, **options)  # another process's view
    console = Console(record=True, width=200, file=io.StringIO(), force_terminal=True)
    console.print(render(snapshot(watcher), interval=2.0))
    text = console.export_text()
    lines = [line.strip() for line in text.splitlines()]
    shown = "<b>c-9</b>\\x1b]52;c;aGk=\\x07[red]x"
    router_line = "10 searches per router a day: 4 used, 6 left, resets in 12.0 h"
    assert any(line.endswith(router_line) and line.startswith("█") for line in lines)
    assert "3 searches per conversation: 2 conversations counted, 1 used all; " in text
    assert f"most c-1 3, {shown} 1" in text
    assert "5 searches per user: 2 users counted, 0 used all; most alice 3, bob 1" in text
    ansi = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b]52" not in ansi and "\x07" not in ansi


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_at_any_width_each_keys_state_and_whole_countdown_share_its_line(width: int) -> None:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    router = Router(KEYS, transport=fake.transport(), clock=clock, sleep=clock.advance)
    detail = "Your request has been blocked due to excessive requests. " * 3
    fake.fail_next(429, retry_after=1800, path="/search", detail=detail)
    with pytest.raises(RateLimited) as caught:
        router.search("q")
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(render(snapshot(router), 0.0, 2.0, width=width))
    lines = console.export_text().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines)
    row = next(line for line in lines if line.split()[:2] == [caught.value.key, "cooling"])
    assert re.search(r" cooling .*30 min \(rate_limited\)( |$)", row), row
    held = next(line for line in lines if line.split()[:2] == ["tvly-dev-…0002", "held"])
    assert re.search(r" held .*30 min \(held\)( |$)", held), held
    assert "429: Your request has been blocked" in "\n".join(lines)


def test_a_thousand_keys_are_summarised_in_a_view_that_fits() -> None:
    """Printed in turn (no terminal): 50 keys a provider, those needing a look first;
    on a screen: as many as fit its height."""
    keys = [*KEYS, *many_keys(998)]
    clock = FakeClock()
    fake = FakeTavily(keys, clock=clock)
    router = Router(keys, transport=fake.transport(), clock=clock, sleep=clock.advance)
    router.search("one")
    fake.fail_next(429, retry_after=30, path="/search")
    with pytest.raises(RateLimited) as caught:
        router.search("two")
    out = io.StringIO()
    watch(router, interval=5, console=Console(file=out, width=200), sleep=lambda s: None, rounds=1)
    rows = [line for line in out.getvalue().splitlines() if " per min " in line]
    assert len(rows) == 50 and rows[0].split()[:2] == [caught.value.key, "cooling"]
    assert "… 950 more of 1000 keys: 950 held (searchfuse status lists all)" in out.getvalue()
    screen = Console(file=io.StringIO(), width=120, height=40, force_terminal=True, record=True)
    watch(router, interval=5, console=screen, sleep=lambda s: None, rounds=1)
    frame = "searchfuse · " + screen.export_text().split("searchfuse · ")[-1]  # the last drawn
    drawn = frame.rstrip("\n").splitlines()
    assert len(drawn) < 40 and "last events (newest first, UTC):" in drawn
    assert sum(" per min " in line for line in drawn) >= 15


def test_without_a_terminal_each_read_is_printed_in_turn() -> None:
    fake = FakeTavily(KEYS)
    router = Router(KEYS, transport=fake.transport())
    out = io.StringIO()
    naps: list[float] = []
    assert (
        watch(router, interval=5, console=Console(file=out, width=120), sleep=naps.append, rounds=3)
        == 0
    )
    assert out.getvalue().count("hold: none") == 3 and naps == [5, 5]
    assert fake.requests == []  # watching never sends a request
