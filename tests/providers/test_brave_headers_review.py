"""Brave's X-RateLimit-* headers as a server may really send them, malformed ones
included, from a raw loopback server (the simulator only sends well-formed ones):
a header the router cannot read leaves the pace it had, never an unpaced key."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from searchfuse import Router, Throttled
from searchfuse.testing import BRAVE_TEST_KEYS, FakeClock

KEY = BRAVE_TEST_KEYS[0]
BODY = json.dumps({"web": {"results": [{"title": "t", "url": "https://a.example/1"}]}})


class RawBrave:
    """Answers every search 200 with the headers it is given, and counts them."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.searches = 0
        raw = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                raw.searches += 1
                body = BODY.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in raw.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def raw() -> Iterator[RawBrave]:
    server = RawBrave()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.mark.parametrize(
    "headers",
    [
        # A window of 0 seconds would be no pace at all.
        {
            "X-RateLimit-Limit": "1, 15000",
            "X-RateLimit-Remaining": "0, 9000",
            "X-RateLimit-Reset": "1, 100",
            "X-RateLimit-Policy": "1;w=0, 15000;w=2592000",
        },
        # Figures that are not whole numbers, and lists of unequal length.
        {"X-RateLimit-Limit": "1.5, 15000", "X-RateLimit-Remaining": "0, 9000"},
        {"X-RateLimit-Limit": "20, 15000", "X-RateLimit-Remaining": "0"},
        {"X-RateLimit-Limit": "twenty", "X-RateLimit-Remaining": "nineteen"},
    ],
)
def test_an_unreadable_pace_keeps_one_a_second(
    raw: RawBrave, fake_clock: FakeClock, headers: dict[str, str]
) -> None:
    raw.headers, raw.searches = headers, 0
    router = Router({"brave": [KEY]}, base_urls={"brave": raw.url}, clock=fake_clock, max_wait=0)
    assert router.search("first")["searchfuse"]["served_by"] == "brave"
    with pytest.raises(Throttled):  # the same second: nothing is sent
        router.search("second")
    fake_clock.advance(2)
    assert router.search("third")["searchfuse"]["served_by"] == "brave"
    assert raw.searches == 2


def test_a_month_without_its_window_reads_as_the_pace_only(
    raw: RawBrave, fake_clock: FakeClock
) -> None:
    raw.headers = {"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}
    raw.searches = 0
    router = Router({"brave": [KEY]}, base_urls={"brave": raw.url}, clock=fake_clock, max_wait=0)
    served = [router.search(q)["searchfuse"]["served_by"] for q in ("a", "b")]
    assert served == ["brave", "brave"]  # two a second, as the header says
    with pytest.raises(Throttled):
        router.search("c")
    (status,) = router.status()
    assert status.state == "available" and status.key_limit is None  # no month was said
    assert raw.searches == 2
