"""The simulated Tavily over real HTTP on loopback, driven by a real ``httpx.Client``.

Real time is involved here, so every wait is a few tens of milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from searchfuse._secrets import fingerprint
from searchfuse.testing import FakeClock, FakeTavily

KEY = "tvly-dev-test0001"
OTHER = "tvly-dev-test0002"
HEADERS = {"Authorization": f"Bearer {KEY}"}


def recorded(fake: FakeTavily, count: int = 1) -> None:
    """Wait (bounded) until the server thread has handled ``count`` searches.

    A client that timed out may return before the server's thread, on a
    loaded machine, has even read the request.
    """
    deadline = time.monotonic() + 10
    while len(fake.searches) < count:
        assert time.monotonic() < deadline, "the server never handled the request"
        time.sleep(0.002)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(clock: FakeClock) -> FakeTavily:
    return FakeTavily(keys=[KEY, OTHER], clock=clock)


@pytest.fixture
def url(fake: FakeTavily) -> Iterator[str]:
    with fake.serve() as base_url:
        yield base_url


@pytest.fixture
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=2.0) as c:
        yield c


def test_serves_on_loopback_only(url: str) -> None:
    assert url.startswith("http://127.0.0.1:")
    assert int(url.rsplit(":", 1)[1]) > 0


def test_search_and_usage_over_http(client: httpx.Client, fake: FakeTavily) -> None:
    found = client.post("/search", json={"query": "q", "include_usage": True}, headers=HEADERS)
    figures = client.get("/usage", headers=HEADERS)

    assert found.status_code == 200
    assert found.headers["content-type"] == "application/json"
    assert found.json()["usage"] == {"credits": 1}
    assert figures.json()["key"]["usage"] == 1
    assert [(r.method, r.path, r.status) for r in fake.requests] == [
        ("POST", "/search", 200),
        ("GET", "/usage", 200),
    ]
    assert fake.requests[0].key_fingerprint == fingerprint(KEY)
    assert fake.requests[0].body == {"query": "q", "include_usage": True}


def test_same_answers_as_the_transport(client: httpx.Client, clock: FakeClock) -> None:
    in_process = FakeTavily(keys=[KEY], clock=clock)
    with httpx.Client(base_url="https://api.tavily.com", transport=in_process.transport()) as c:
        expected = c.post("/search", json={"query": "same"}, headers=HEADERS).json()

    over_http = client.post("/search", json={"query": "same"}, headers=HEADERS).json()

    assert over_http["results"] == expected["results"]


def test_errors_over_http(client: httpx.Client, fake: FakeTavily) -> None:
    fake.set_rpm(KEY, 1)
    fake.fail_next(432, key=OTHER)
    client.post("/search", json={"query": "q"}, headers=HEADERS)

    limited = client.post("/search", json={"query": "q"}, headers=HEADERS)
    unauthorized = client.get("/usage")
    exhausted = client.post(
        "/search", json={"query": "q"}, headers={"Authorization": f"Bearer {OTHER}"}
    )
    malformed = client.post(
        "/search",
        content=b"{oops",
        headers={"Authorization": f"Bearer {OTHER}", "Content-Type": "application/json"},
    )
    wrong_method = client.put("/search", json={"query": "q"}, headers=HEADERS)

    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "60"
    assert limited.json()["detail"]["error"]
    assert unauthorized.status_code == 401
    assert unauthorized.json() == {"detail": {"error": "Unauthorized: missing or invalid API key."}}
    assert exhausted.status_code == 432
    assert exhausted.reason_phrase == "Plan Limit Exceeded"
    assert malformed.status_code == 400
    assert wrong_method.status_code == 405


def test_timeout_fault_is_a_real_timeout(url: str, fake: FakeTavily) -> None:
    fake.fail_next("timeout")
    started = time.monotonic()

    with (
        httpx.Client(base_url=url, timeout=0.05) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post("/search", json={"query": "q"}, headers=HEADERS)

    assert time.monotonic() - started < 3.0  # held for 30 s without the client's timeout
    recorded(fake)
    assert fake.searches[0].error == "ReadTimeout"


def test_slow_answer_really_waits(client: httpx.Client, fake: FakeTavily) -> None:
    fake.slow_next(0.03)
    started = time.monotonic()

    response = client.get("/usage", headers=HEADERS)

    assert response.status_code == 200
    assert time.monotonic() - started >= 0.03


def test_answer_slower_than_the_client_times_out(url: str, fake: FakeTavily) -> None:
    fake.slow_next(5)

    with (
        httpx.Client(base_url=url, timeout=0.05) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post("/search", json={"query": "q"}, headers=HEADERS)

    # Processed and charged upstream; only the answer was late.
    recorded(fake)
    assert fake.usage_of(KEY)["key"]["usage"] == 1


def test_connect_fault_drops_the_connection(client: httpx.Client, fake: FakeTavily) -> None:
    fake.fail_next("connect")

    with pytest.raises(httpx.TransportError):
        client.get("/usage", headers=HEADERS)

    assert client.get("/usage", headers=HEADERS).status_code == 200


def test_parallel_requests_over_http(client: httpx.Client, fake: FakeTavily) -> None:
    statuses: list[int] = []
    lock = threading.Lock()

    def worker(key: str) -> None:
        for i in range(3):
            response = client.post(
                "/search", json={"query": f"q{i}"}, headers={"Authorization": f"Bearer {key}"}
            )
            with lock:
                statuses.append(response.status_code)

    # A burst like an agent's: 30 searches in flight at once.
    threads = [threading.Thread(target=worker, args=(k,)) for k in [KEY, OTHER] * 15]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses == [200] * 90
    assert fake.requests_by_key() == {fingerprint(KEY): 45, fingerprint(OTHER): 45}


def test_stops_promptly_and_frees_the_port(fake: FakeTavily) -> None:
    fake.fail_next("timeout")  # a held connection must not delay the stop
    with fake.serve(timeout_hold=30) as url, httpx.Client(base_url=url, timeout=0.02) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.get("/usage", headers=HEADERS)
        started = time.monotonic()

    assert time.monotonic() - started < 3.0  # the held connection would hold it 30 s
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/usage", headers=HEADERS, timeout=0.5)
