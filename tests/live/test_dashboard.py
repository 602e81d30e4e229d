"""The dashboard over real loopback HTTP, and its page in headless Chromium.

One uvicorn server and one browser for the module: each test plugs a fresh
dashboard (over a fresh SQLite state that another router wrote, through the
simulated Tavily on loopback) into the server.
"""

from __future__ import annotations

import hmac
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from searchfuse import Budget, RateLimited, Router, spend_scope
from searchfuse._live import snapshot
from searchfuse._serving import StartRefused, running
from searchfuse._watch import render
from searchfuse.cli import main
from searchfuse.dashboard import build_app
from searchfuse.dashboard import running as dashboard_running
from searchfuse.router import KeyEntry
from searchfuse.testing import EXA_TEST_KEYS, FakeClock, FakeExa, FakeTavily

from ..conftest import leaks_in
from ..gateway.conftest import Switch
from ..stores.redis_server import free_port
from .browser import Browser, Page, find_chromium

KEYS = ["tvly-dev-test0001", "tvly-dev-test0002"]
TOKEN = "dashboard-token-7f3a9c"
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
#: A conversation id as a gateway client may send it (X-Session-Id).
SPENDER = '<img src=x onerror="window.__pwned = 3">c-1'
METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "PROPFIND"]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Switch, str]]:
    switch = Switch()
    with running(switch) as url:
        yield switch, url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if find_chromium() is None:
        pytest.skip("chromium is not installed here (.ci/run installs it)")
    chromium = Browser.start()
    try:
        yield chromium
    finally:
        chromium.close()


@dataclass
class Fleet:
    """A state another router wrote (a 429 and a served search), and the dashboard's router."""

    clock: FakeClock
    fake: FakeTavily
    state: Path
    writer: Router
    viewer: Router
    hit: str

    def files(self) -> dict[str, tuple[bytes, int]]:
        folder = self.state.parent.parent
        return {
            str(p): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    clock = FakeClock()
    fake = FakeTavily(KEYS, clock=clock)
    config = tmp_path / "config" / "keys.json"
    config.parent.mkdir()
    entries = [
        {"key": KEYS[0], "account": "ops@example.com", "notes": f"main {HOSTILE}"},
        {"key": KEYS[1], "account": "ops@example.com", "notes": "spare"},
    ]
    config.write_text(json.dumps({"format_version": 2, "keys": entries}))
    config.chmod(0o600)
    state = tmp_path / "state" / "searchfuse.db"
    budgets = [
        Budget(50, unit="searches", per="router", period="day"),
        Budget(2, unit="searches", per="conversation"),
    ]
    with fake.serve() as url:
        options: dict[str, Any] = {"base_url": url, "clock": clock, "budgets": budgets}
        writer = Router.from_config(config, sleep=clock.advance, **options)
        with spend_scope(conversation=SPENDER):  # a gateway client's X-Session-Id
            writer.search("served")
        fake.fail_next(429, retry_after=45, path="/search", detail=f"slow down {HOSTILE}")
        with pytest.raises(RateLimited) as caught:
            writer.search("refused")
        assert caught.value.key is not None
        viewer = Router.from_config(config, **options)
        yield Fleet(clock, fake, state, writer, viewer, caught.value.key)


def plug(server: tuple[Switch, str], router: Router, **options: Any) -> str:
    switch, url = server
    switch.target = build_app(router, **options)
    return url


# -- the API --------------------------------------------------------------------------------


def test_api_status_is_the_stores_state_as_one_json_object(
    server: tuple[Switch, str], fleet: Fleet
) -> None:
    url = plug(server, fleet.viewer)
    answer = httpx.get(f"{url}/api/status")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"
    data = answer.json()
    assert data["keys"] == [s.to_dict() for s in fleet.viewer.status()]  # status --json
    cooling = next(k for k in data["keys"] if k["key"] == fleet.hit)
    assert cooling["state"] == "cooling" and cooling["cooldown_left"] == pytest.approx(45)
    assert cooling["last_error"].startswith("429: slow down <script>")
    assert sum(k["window_requests"] for k in data["keys"]) == 2
    assert data["hold"] == {
        "seconds_left": pytest.approx(45),
        "until": pytest.approx(fleet.clock() + 45),
        "key": fleet.hit,
        "provider": "tavily",
    }
    router_budget, per_conversation = data["budgets"]
    assert router_budget["budget"] == "50 searches per router a day"
    assert (router_budget["used"], router_budget["left"]) == (1.0, 49.0)
    assert per_conversation["budget"] == "2 searches per conversation"
    assert (per_conversation["spenders"], per_conversation["exhausted"]) == (1, 0)
    assert per_conversation["top"] == [{"who": SPENDER, "used": 1.0, "left": 1.0}]
    kinds = [e["kind"] for e in data["events"]]
    assert kinds[:2] == ["hold", "rate_limited"]  # newest first
    assert data["events"][1]["key"] == fleet.hit and data["events"][1]["retry_after"] == 45
    assert not leaks_in(answer.text)
    for key in KEYS:
        assert key not in answer.text


def test_healthz_is_open_and_says_nothing(server: tuple[Switch, str], fleet: Fleet) -> None:
    url = plug(server, fleet.viewer, token=TOKEN)
    answer = httpx.get(f"{url}/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_every_method_but_get_is_refused_and_nothing_is_written(
    server: tuple[Switch, str], fleet: Fleet
) -> None:
    url = plug(server, fleet.viewer)
    before = fleet.files()
    sent = len(fleet.fake.requests)
    with httpx.Client(base_url=url) as client:
        for _ in range(3):
            assert client.get("/api/status").status_code == 200
            assert client.get("/").status_code == 200
        for method in METHODS:
            for path in ("/", "/api/status", "/healthz", "/api/reset"):
                answer = client.request(method, path, content=b'{"reset": true}')
                assert answer.status_code == 405, (method, path)
                assert answer.headers["allow"] == "GET"
        assert client.get("/api/anything").status_code == 404
    assert fleet.files() == before  # the keys file and every state file, byte for byte
    assert len(fleet.fake.requests) == sent  # no probe, no search


#: Paths that name no page: encoded and plain traversal, the page's own parts, near misses.
ODD_PATHS = [
    "/../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/..%2f..%2fetc%2fpasswd",
    "//etc/passwd",
    "/page.js",
    "/page.css",
    "/dashboard/page.html",
    "/api/status/",
    "/API/STATUS",
    "/api/status%00",
    "/api/status/..",
    "/index.html/..%2f_app.py",
]


def raw_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """`GET path` sent exactly as written (no client normalises it)."""
    address = httpx.URL(url)
    conn = http.client.HTTPConnection(address.host, address.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_no_path_but_the_pages_answers_and_none_serves_a_file(
    server: tuple[Switch, str], fleet: Fleet
) -> None:
    url = plug(server, fleet.viewer)
    for path in ODD_PATHS:
        status, body = raw_get(url, path)
        assert status in (400, 404), path
        assert "root:" not in body and "function" not in body and "import" not in body, path
    url = plug(server, fleet.viewer, token=TOKEN)
    for path in ODD_PATHS:  # without the token not even "not found" is said
        assert raw_get(url, path)[0] in (400, 401), path


def test_with_a_token_every_request_without_it_is_refused(
    server: tuple[Switch, str], fleet: Fleet
) -> None:
    url = plug(server, fleet.viewer, token=TOKEN)
    with httpx.Client(base_url=url) as client:
        for path in ("/", "/api/status", "/nowhere"):
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "ops@example.com" not in refused.text
            assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
            assert client.get(path, params={"token": TOKEN[:-1]}).status_code == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/status", headers=bearer).status_code == 200
        assert client.get("/api/status", params={"token": TOKEN}).status_code == 200
        assert client.get("/", params={"token": TOKEN}).status_code == 200
        # A token opens the dashboard to any address it was reached by.
        assert client.get("/api/status", headers={**bearer, "Host": "dash.example"}).is_success


def test_a_token_is_compared_in_constant_time_wherever_it_is_given(
    server: tuple[Switch, str], fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Header or address, right or wrong: every comparison is `hmac.compare_digest`
    (its time says nothing of how much was right), and the header wins."""
    compared: list[bytes] = []
    real = hmac.compare_digest

    def spy(given: bytes, known: bytes) -> bool:
        compared.append(given)
        return real(given, known)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    url = plug(server, fleet.viewer, token=TOKEN)
    near = TOKEN[:-1] + "x"
    with httpx.Client(base_url=url) as client:
        assert client.get("/api/status", params={"token": near}).status_code == 401
        assert (
            client.get("/api/status", headers={"Authorization": f"Bearer {near}"}).status_code
            == 401
        )
        assert (
            client.get("/api/status", headers={"Authorization": f"Basic {TOKEN}"}).status_code
            == 401
        )
        both = {"Authorization": f"Bearer {near}"}
        assert client.get("/api/status", params={"token": TOKEN}, headers=both).status_code == 401
        assert client.get("/api/status", params={"token": TOKEN}).status_code == 200
    # A "Basic" header is no bearer token: nothing to compare, the answer is 401.
    assert compared == [near.encode()] * 3 + [TOKEN.encode()]


def test_without_a_token_only_requests_to_loopback_names_are_answered(
    server: tuple[Switch, str], fleet: Fleet
) -> None:
    """A page whose domain name rebinds to 127.0.0.1 cannot read the dashboard."""
    url = plug(server, fleet.viewer)
    port = url.rsplit(":", 1)[1]
    loopback = ["localhost", "localhost.", "127.0.0.1", "127.8.9.10", "[::1]", "app.localhost"]
    for host in [*loopback, *(f"{name}:{port}" for name in loopback)]:
        assert httpx.get(f"{url}/api/status", headers={"Host": host}).status_code == 200, host
    others = [
        f"attacker.example:{port}",
        "attacker.example",
        f"10.0.0.5:{port}",
        "0.0.0.0",
        "[::]",
        f"[::ffff:10.0.0.5]:{port}",
        "localhost.attacker.example",
        "127.0.0.1.nip.io",
        f"localhost:{port}@attacker.example",  # not a name a browser sends, whatever it holds
        f"localhost:{port}:attacker.example",
        "[::1]attacker.example",
        "localhost/attacker.example",
        "",
    ]
    for host in others:
        answer = httpx.get(f"{url}/api/status", headers={"Host": host})
        assert answer.status_code == 403 and "ops@example.com" not in answer.text, host


def test_a_host_other_than_loopback_needs_a_token(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        pytest.raises(StartRefused, match="--token"),
        dashboard_running(fleet.viewer, host="0.0.0.0"),
    ):
        pass
    args = ["--config", str(tmp_path / "config" / "keys.json")]
    assert main([*args, "dashboard", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("searchfuse dashboard: error: refusing to serve the dashboard on 0.0.0.0")
    assert "--token" in err and len(err.splitlines()) == 1
    assert main([*args, "dashboard", "--host", "::", "--token", "has space"]) == 2
    err = capsys.readouterr().err
    assert "--token" in err and "has space" not in err
    assert main([*args, "dashboard", "--port", "0"]) == 2  # a port out of range
    capsys.readouterr()
    assert main([*args, "dashboard", "--token", KEYS[1]]) == 2  # a key of the router
    err = capsys.readouterr().err
    assert "--token: the dashboard's token must not be one of the router's keys" in err
    assert KEYS[1] not in err and len(err.splitlines()) == 1
    with pytest.raises(ValueError, match="must not be one of the router's keys"):
        build_app(fleet.viewer, token=KEYS[0])


@pytest.mark.parametrize(
    "option",
    [
        ["--port", "0"],
        ["--port", "65536"],
        ["--port", "http"],
        ["--port", "80.5"],
        ["--poll", "0"],
        ["--poll", "-1"],
        ["--poll", "nan"],
        ["--poll", "inf"],
        ["--poll", "1e400"],
        ["--poll", "soon"],
    ],
)
def test_a_bad_port_or_poll_is_a_usage_error(
    option: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", ",".join(KEYS))
    assert main(["dashboard", *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"searchfuse dashboard: error: argument {option[0]}: ")
    assert len(err.splitlines()) == 1


def test_a_loopback_name_that_resolves_elsewhere_needs_a_token(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`localhost` is loopback by its name only if it resolves there: a hosts file (or a
    resolver) mapping it to another interface makes it a host like any other."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host).rstrip(".") == "localhost":
            return real("10.0.0.5", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    for host in ("localhost", "localhost."):
        with (
            pytest.raises(StartRefused, match=f"refusing to serve the dashboard on {host}:"),
            dashboard_running(fleet.viewer, host=host),
        ):
            pass
    with dashboard_running(fleet.viewer, host="127.0.0.1") as url:  # an address is what it says
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_the_command_creates_no_state_writes_none_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`searchfuse dashboard` as a process: before any search there is no state, and it
    creates none (its page says so); once another process has written the state it
    shows it and never changes a byte of it; SIGTERM stops it with exit code 0."""
    state = tmp_path / "state" / "searchfuse.db"
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TAVILY_API_KEYS": ",".join(KEYS),
        "SEARCHFUSE_STATE": str(state),
    }
    argv = [sys.executable, "-m", "searchfuse", "dashboard", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert started == f"searchfuse dashboard: http://127.0.0.1:{port}/; stop with Ctrl-C\n"
        url = f"http://127.0.0.1:{port}"
        empty = httpx.get(f"{url}/api/status").json()
        assert [k["state"] for k in empty["keys"]] == ["available", "available"]
        assert empty["note"].startswith(f"no state at {state} yet")
        assert not state.parent.exists()  # looking created nothing
        fake = FakeTavily(KEYS)
        with fake.serve() as upstream:
            other = Router(KEYS, state=state, base_url=upstream)
            fake.fail_next(429, retry_after=60, path="/search")
            with pytest.raises(RateLimited):
                other.search("q")
            other.close()
        written = {p.name: p.read_bytes() for p in state.parent.glob("*.db")}
        seen = httpx.get(f"{url}/api/status").json()
        assert seen["note"] is None and "cooling" in [k["state"] for k in seen["keys"]]
        for _ in range(3):
            assert httpx.get(f"{url}/api/status").status_code == 200
        assert {p.name: p.read_bytes() for p in state.parent.glob("*.db")} == written
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


# -- the page, in Chromium ------------------------------------------------------------------


@contextmanager
def opened(browser: Browser, url: str, polled: bool = True) -> Iterator[Page]:
    """The page at `url` in a new tab (once it has polled the server), closed after."""
    page = browser.page(url)
    try:
        if polled:
            page.wait_for("document.body && document.body.dataset.polls >= 1")
        yield page
    finally:
        page.close()


def column(page: Page, rows: str, cell: int) -> list[str]:
    """The text of cell `cell` of every row the CSS selector `rows` finds."""
    found = page.evaluate(
        f"[...document.querySelectorAll({json.dumps(rows)})].map(r => r.cells[{cell}].textContent)"
    )
    return list(found)


def test_the_page_shows_a_cooling_key_its_countdown_and_the_timeline(
    server: tuple[Switch, str], fleet: Fleet, browser: Browser
) -> None:
    url = plug(server, fleet.viewer, poll=3600)
    with opened(browser, f"{url}/") as page:
        rows = page.evaluate(
            "[...document.querySelectorAll('table.keys tbody tr')].map(r =>"
            " [...r.cells].map(c => c.textContent))"
        )
        by_key = {cells[0]: cells for cells in rows}
        cooling = by_key[fleet.hit]
        assert cooling[3] == "cooling"
        assert cooling[6].endswith(" s (rate_limited)") and 40 <= int(cooling[6].split()[0]) <= 45
        assert cooling[7].startswith("429: slow down <script>")
        other = next(cells for key, cells in by_key.items() if key != fleet.hit)
        assert other[3] == "held"
        assert sum(int(cells[5].split("/")[0]) for cells in rows) == 2
        assert all(cells[5].endswith("/100 per min") for cells in rows)
        hold = page.evaluate("document.getElementById('hold').textContent")
        assert hold.startswith("Hold: every search waits 4") and f"on {fleet.hit} (tavily)" in hold
        marks = page.evaluate(
            "[...document.querySelectorAll('#timeline circle.mark')].map(c => c.classList[1])"
        )
        assert "rate_limited" in marks and "hold" in marks
        assert column(page, "#events tbody tr", 1)[:2] == ["hold", "429"]
        router_budget, per_conversation = page.evaluate(
            "[...document.querySelectorAll('#budgets tbody tr')].map(r =>"
            " [...r.cells].map(c => c.textContent))"
        )
        assert router_budget[:3] == ["50 searches per router a day", "1/50", "49"]
        assert router_budget[5] == "12.0 h"  # the FakeClock is at noon UTC
        assert per_conversation[:4] == [
            "2 searches per conversation",
            "2 for each",
            "–",
            "1 conversations, 0 used all",
        ]
        assert per_conversation[4] == f"{SPENDER} 1"
        # The countdowns tick without asking the server: 20 s of the page's time later.
        virtual = {"policy": "advance", "budget": 20000}
        page.browser.send("Emulation.setVirtualTimePolicy", virtual, page.session)
        # Virtual time runs forward task by task until the budget is spent, then stops.
        later = page.wait_for(
            "(() => { const t = [...document.querySelectorAll('td.countdown')]"
            ".map(c => c.textContent).find(t => t.includes('rate_limited'));"
            " return t && parseInt(t) <= 26 ? t : null })()"
        )
        assert later.endswith(" s (rate_limited)") and 22 <= int(later.split()[0]) <= 26


def test_the_page_shows_every_text_as_text(
    server: tuple[Switch, str], fleet: Fleet, browser: Browser
) -> None:
    url = plug(server, fleet.viewer, token=TOKEN)
    with opened(browser, f"{url}/?token={TOKEN}") as page:
        page.wait_for("document.querySelectorAll('table.keys tbody tr').length === 2")
        assert f"main {HOSTILE}" in column(page, "table.keys tbody tr", 2)
        assert page.evaluate("window.__pwned === undefined")
        assert page.evaluate("document.querySelectorAll('script').length") == 1
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert any(HOSTILE in d for d in column(page, "#events tbody tr", 5))
        spender = page.evaluate("document.querySelector('#budgets td.top .who').textContent")
        assert spender == SPENDER
        assert not leaks_in(page.evaluate("document.documentElement.outerHTML"))


def test_the_page_without_its_token_shows_nothing_of_the_fleet(
    server: tuple[Switch, str], fleet: Fleet, browser: Browser
) -> None:
    url = plug(server, fleet.viewer, token=TOKEN)
    with opened(browser, f"{url}/", polled=False) as page:
        text = page.wait_for(
            "document.body && document.body.innerText.includes('token') && document.body.innerText"
        )
        assert "a token is needed" in text
        assert "ops@example.com" not in text and "tvly-dev" not in text


def test_a_note_is_shown_masked_when_it_holds_a_key(
    server: tuple[Switch, str], tmp_path: Path
) -> None:
    entries = [KeyEntry(KEYS[0], notes=f"copy of {KEYS[1]}"), KeyEntry(KEYS[1])]
    router = Router(entries, state=tmp_path / "s.db")
    url = plug(server, router)
    text = httpx.get(f"{url}/api/status").text
    assert "copy of tvly-dev-…0002" in text and not leaks_in(text)
    assert os.path.exists(tmp_path / "s.db")


def test_a_chain_shows_each_provider_and_the_move_down_on_the_timeline(
    server: tuple[Switch, str], browser: Browser, tmp_path: Path
) -> None:
    clock = FakeClock()
    tavily, exa = FakeTavily(KEYS, clock=clock), FakeExa(EXA_TEST_KEYS[:1], clock=clock)
    state = tmp_path / "state" / "searchfuse.db"
    with tavily.serve() as tavily_url, exa.serve() as exa_url:
        keys = {"tavily": KEYS, "exa": list(EXA_TEST_KEYS[:1])}
        options: dict[str, Any] = {"base_url": tavily_url, "base_urls": {"exa": exa_url}}
        writer = Router(keys, state=state, clock=clock, sleep=clock.advance, **options)
        tavily.fail_next(503, times=None, path="/search")
        result = writer.search("served down the chain")
        assert result["searchfuse"]["degraded"]["from"] == "tavily"
        viewer = Router(keys, state=state, clock=clock, **options)
        url = plug(server, viewer, poll=3600)
        with opened(browser, f"{url}/") as page:
            tables = page.evaluate(
                "[...document.querySelectorAll('table.keys')].map(t => t.dataset.provider)"
            )
            assert tables == ["tavily", "exa"]  # chain order
            assert column(page, "table.keys[data-provider=exa] tbody tr", 3) == ["available"]
            assert set(column(page, "table.keys[data-provider=tavily] tbody tr", 3)) == {"cooling"}
            marks = page.evaluate(
                "[...document.querySelectorAll('#timeline circle.mark')].map(c => c.classList[1])"
            )
            assert "passed_over" in marks
            assert "passed over" in column(page, "#events tbody tr", 1)
        console = Console(record=True, width=160, file=io.StringIO())
        console.print(render(snapshot(viewer)))
        view = console.export_text()
        titles = [line.strip() for line in view.splitlines() if line.strip() in ("tavily", "exa")]
        assert titles == ["tavily", "exa"] and " passed over tavily · " in view


def test_a_thousand_keys_show_those_needing_a_look_first(
    server: tuple[Switch, str], browser: Browser
) -> None:
    """The API carries every key; the page draws 50 a provider (cooling, exhausted,
    disabled, held first), counts the rest, and shows them all on request."""
    keys = [f"tvly-dev-fleet{i:04d}" for i in range(1000)]
    clock = FakeClock()
    fake = FakeTavily(keys, clock=clock)
    router = Router(keys, transport=fake.transport(), clock=clock, on_429="failover")
    fake.fail_next(429, retry_after=600, path="/search")
    served = router.search("the first key answers 429, the next serves")["searchfuse"]["key"]
    url = plug(server, router, poll=3600)
    data = httpx.get(f"{url}/api/status").json()
    assert len(data["keys"]) == 1000 and not leaks_in(json.dumps(data))
    with opened(browser, f"{url}/") as page:
        states = column(page, "table.keys tbody tr", 3)
        assert len(states) == 50 and states[0] == "cooling" and states.count("cooling") == 1
        assert served in column(page, "table.keys tbody tr", 0)
        assert "tvly-dev-…0999" not in column(page, "table.keys tbody tr", 0)
        more = page.evaluate("document.querySelector('p.more').textContent")
        assert more == "… 950 more of 1000 keys: 950 available show all 1000"
        page.evaluate("document.querySelector('p.more button').click()")
        assert page.wait_for("document.querySelectorAll('table.keys tbody tr').length") == 1000
        assert column(page, "table.keys tbody tr", 0)[-1] == "tvly-dev-…0999"  # chain order
