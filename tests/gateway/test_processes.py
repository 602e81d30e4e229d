"""`searchfuse gateway` as a process: start-up rules, two processes on one SQLite file, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from searchfuse.cli import main
from searchfuse.testing import TEST_KEYS, FakeTavily

from .conftest import ALICE, BOB

TOKENS = f"alice={ALICE},bob={BOB}"
AUTH = {"Authorization": f"Bearer {ALICE}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeTavily, str]]:
    fake = FakeTavily(keys=TEST_KEYS[:2])
    with fake.serve() as url:
        yield fake, url


@pytest.fixture
def fake(upstream: tuple[FakeTavily, str]) -> Iterator[FakeTavily]:
    simulator, _ = upstream
    yield simulator
    simulator.clear_faults()
    simulator.reset_records()


def environment(upstream_url: str, tmp_path: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TAVILY_", "SEARCHFUSE_"))
    }
    env.update(
        TAVILY_API_KEYS=",".join(TEST_KEYS[:2]),
        TAVILY_BASE_URL=upstream_url,
        SEARCHFUSE_GATEWAY_TOKENS=TOKENS,
    )
    return env


class Process:
    """One `searchfuse gateway` process on a free loopback port."""

    def __init__(
        self, upstream_url: str, tmp_path: Path, *options: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "searchfuse", "gateway", "--port", str(self.port), *options],
            env={**environment(upstream_url, tmp_path), **(env or {})},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the gateway did not start: {self.stderr}")
            time.sleep(0.02)

    stderr = ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.stderr = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, self.stderr = self.proc.communicate()
        return self.proc.returncode


@pytest.fixture
def spawn(upstream: tuple[FakeTavily, str], tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """`spawn(*options)` starts a gateway; every one still running is stopped at the end."""
    started: list[Process] = []

    def start(*options: str, env: dict[str, str] | None = None) -> Process:
        started.append(Process(upstream[1], tmp_path, *options, env=env))
        return started[-1]

    yield start
    for process in started:
        process.stop()


def search(url: str, query: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/search", json={"query": query}, headers={**AUTH, **headers})


def test_two_gateways_on_one_sqlite_file_share_counts_budgets_cache_and_hold(
    spawn: Callable[..., Process], fake: FakeTavily, tmp_path: Path
) -> None:
    state = str(tmp_path / "shared.db")
    budgets = {"SEARCHFUSE_BUDGETS": "5 searches per conversation"}
    a = spawn("--state", state, env=budgets)
    b = spawn("--state", state, env=budgets)
    for n in range(6):
        answer = search((a if n % 2 else b).url, f"question {n}")
        assert answer.status_code == 200, answer.text
    assert len(fake.searches) == 6
    # Both read the same counts from the shared file: six credits in all.
    for gateway in (a, b):
        usage = httpx.get(f"{gateway.url}/usage", headers=AUTH).json()
        assert usage["key"]["usage"] == 6
    # One conversation's budget, raced for at both gateways: exactly five served.
    answers: list[int] = []

    def ask(n: int) -> None:
        url = (a if n % 2 else b).url
        answers.append(search(url, f"raced {n}", **{"X-Session-Id": "s-1"}).status_code)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200] * 5 + [432] * 7  # never six, whatever the race
    assert len(fake.searches) == 11
    rows = httpx.get(f"{b.url}/usage", headers={**AUTH, "X-Session-Id": "s-1"}).json()
    assert [(r["used"], r["left"]) for r in rows["searchfuse"]["budgets"]] == [(5, 0)]
    # The shared cache: asked at one gateway, answered free at the other.
    assert search(a.url, "the same question").headers["X-Searchfuse-Served-By"] == "tavily"
    assert search(b.url, "The  same question").headers["X-Searchfuse-Served-By"] == "cache"
    assert len(fake.searches) == 12
    # The hold: a 429 at one gateway stops the other without a request.
    fake.fail_next(429, retry_after=30, path="/search")
    assert search(a.url, "rate limited").status_code == 429
    held = search(b.url, "held elsewhere")
    assert held.status_code == 429
    assert 1 <= int(held.headers["Retry-After"]) <= 30
    assert len(fake.searches) == 13
    assert [a.stop(), b.stop()] == [0, 0]
    for gateway in (a, b):
        assert "POST /search 200 served_by=tavily key=tvly-dev-…" in gateway.stderr
        for secret in (ALICE, BOB, *TEST_KEYS):
            assert secret not in gateway.stderr


def test_sigterm_lets_the_request_in_flight_finish(
    spawn: Callable[..., Process], fake: FakeTavily, tmp_path: Path
) -> None:
    gateway = spawn("--state", str(tmp_path / "state.db"))
    fake.slow_next(0.5, path="/search")
    answers: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answers.append(search(gateway.url, "in flight")))
    worker.start()
    deadline = time.monotonic() + 10
    while not fake.searches:  # the request has reached Tavily and waits for its answer
        assert time.monotonic() < deadline
        time.sleep(0.005)
    gateway.proc.send_signal(signal.SIGTERM)
    worker.join(10)
    # One SIGTERM only: the gateway closes its router (and the store, once the
    # answer's cache entry is written) after the answer went out.
    gateway.proc.wait(15)
    code = gateway.stop()
    assert answers and answers[0].status_code == 200
    assert answers[0].json()["results"]
    assert code == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{gateway.url}/healthz", timeout=1)


def test_deadline_bounds_a_slow_answer_with_a_504(
    spawn: Callable[..., Process], fake: FakeTavily, tmp_path: Path
) -> None:
    gateway = spawn("--state", str(tmp_path / "state.db"), "--deadline", "1")
    fake.slow_next(4.0, path="/search")
    started = time.monotonic()
    answer = search(gateway.url, "too slow")
    assert answer.status_code == 504
    assert "took longer than the gateway allows" in answer.json()["detail"]["error"]
    assert time.monotonic() - started < 3.5  # the gateway's bound, not the simulator's delay
    assert gateway.stop() == 0


def test_a_host_beyond_loopback_without_tokens_is_refused_at_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEARCHFUSE_GATEWAY_TOKENS", raising=False)
    for host in ("0.0.0.0", "192.0.2.10", "gateway.example", "::"):
        assert main(["gateway", "--host", host]) == 2
        err = capsys.readouterr().err
        assert f"refusing to serve the search gateway on {host}" in err
        assert "--client-token NAME=TOKEN" in err


@pytest.mark.parametrize(
    ("argv", "tokens", "message"),
    [
        (["--client-token", "alice"], "", "is not NAME=TOKEN"),
        (["--client-token", "=t1"], "", "needs a name"),
        (["--client-token", "alice="], "", "has an empty token"),
        (["--client-token", "a=t1", "--client-token", "a=t2"], "", "named twice"),
        (["--client-token", "a=same", "--client-token", "b=same"], "", "the same token"),
        (["--client-token", "a=t1"], "a=t9", "given a token twice"),
        ([], "bob", "is not NAME=TOKEN"),
    ],
)
def test_malformed_tokens_are_usage_errors_that_show_no_token(
    argv: list[str],
    tokens: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEARCHFUSE_GATEWAY_TOKENS", tokens)
    assert main(["gateway", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    for secret in ("t1", "t2", "t9", "same"):
        assert f"{secret}'" not in err and f"={secret}" not in err


def test_a_busy_port_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAVILY_API_KEYS", TEST_KEYS[0])
    monkeypatch.chdir(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["gateway", "--port", str(port), "--state", str(tmp_path / "s.db")])
    assert code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err


def test_without_the_gateway_extra_it_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import searchfuse.gateway

    for name in list(sys.modules):
        if name.split(".")[0] in ("starlette", "uvicorn"):
            monkeypatch.setitem(sys.modules, name, None)
        if name in ("searchfuse.gateway._app", "searchfuse.gateway._serve"):
            monkeypatch.delitem(sys.modules, name)
    for name in ("serve", "build_app", "running"):
        monkeypatch.delitem(vars(searchfuse.gateway), name, raising=False)
    assert main(["gateway"]) == 2
    err = capsys.readouterr().err
    assert 'pip install ".[gateway]"' in err
    assert "Traceback" not in err
