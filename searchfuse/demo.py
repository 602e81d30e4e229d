"""`searchfuse demo`: a scripted agent session against the simulated Tavily, offline.

The simulator runs on a loopback port with made-up keys; a guarded
`web_search` tool delegates to a [`Router`][searchfuse.Router]; time is a
fake clock, so cooldowns pass instantly. The transcript shows every rule
firing: one search per reply, a parallel burst reduced to one request, a 429
that stops the turn and the cooldown refusal that follows, a cache hit, a
local-lookup answer, a stale cooldown that serves without a reset, a chain
whose next provider (a simulated Exa) serves once Tavily's keys are spent,
the move named once, then the chain's status table and its diagnosis (with a
free `/usage` probe of Tavily's keys).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from searchfuse.errors import SearchRefused
from searchfuse.guard import MappingLookup, guard, turn
from searchfuse.router import Router
from searchfuse.testing import FakeClock, FakeExa, FakeTavily, testing_mode

__all__ = ["DemoResult", "Event", "run_demo", "run_session"]

DEMO_KEYS = ("tvly-dev-test0001", "tvly-dev-test0002", "tvly-dev-test0003", "tvly-dev-test0004")
EXA_KEY = "00000000-0000-4000-8000-0000000e0001"
LOCAL_FACTS = {
    "which search backend does this project use": {
        "query": "which search backend does this project use",
        "answer": "Tavily, through searchfuse's router (from the project's own notes).",
        "results": [],
    }
}


@dataclass
class Event:
    """One step of the transcript."""

    title: str
    calls: int
    outcome: str
    detail: str
    api_requests: int
    usage_requests: int


@dataclass
class DemoResult:
    """The whole session: its steps, the final status and diagnosis, and the summary."""

    base_url: str
    events: list[Event] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: dict[str, Any] = field(default_factory=dict)
    diagnosis_text: str = ""
    #: The chain's log lines about moves down it (the demo's chain scene).
    chain_moves: list[str] = field(default_factory=list)
    calls: int = 0
    api_searches: int = 0
    api_usage: int = 0

    @property
    def saved(self) -> int:
        """Tool calls that never became a search request."""
        return self.calls - self.api_searches

    def summary(self) -> str:
        """The closing line."""
        return (
            f"summary: {self.calls} web_search calls, {self.api_searches} reached the API "
            f"(+{self.api_usage} /usage), {self.saved} requests saved"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (`searchfuse demo --json`)."""
        return {
            "base_url": self.base_url,
            "events": [asdict(e) for e in self.events],
            "status": self.status,
            "diagnosis": self.diagnosis,
            "summary": {
                "calls": self.calls,
                "api_searches": self.api_searches,
                "api_usage": self.api_usage,
                "saved": self.saved,
            },
        }


def _describe(result: Any) -> str:
    if isinstance(result, dict):
        served = result.get("searchfuse") or {}
        results = result.get("results") or []
        top = f'; top: "{results[0].get("title", "")}"' if results else ""
        if served.get("served_by") == "tavily":
            return f"searched with key {served.get('key')}: {len(results)} results{top}"
        if result.get("answer"):
            return f"answered locally: {result['answer']}"
        return f"{len(results)} results{top}"
    return str(result)


class _Moves(logging.Handler):
    """Keeps the chain's log lines about moves down it (and back)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "passed over" in text or "serves again" in text:
            self.lines.append(text)


def run_session(emit: Callable[[Event], None] | None = None) -> DemoResult:
    """Run the scripted session and return what happened (`emit` sees each step live)."""
    clock = FakeClock()
    fake = FakeTavily(keys=DEMO_KEYS, clock=clock)
    exa = FakeExa(keys=[EXA_KEY], clock=clock)
    with (
        testing_mode(clock),
        tempfile.TemporaryDirectory() as tmp,
        fake.serve() as url,
        exa.serve() as exa_url,
    ):
        state = Path(tmp) / "state" / "quota.json"
        router = Router(list(DEMO_KEYS), state=state, base_url=url, clock=clock)
        result = DemoResult(base_url=url)
        seen = {"searches": 0, "usage": 0}

        def record(title: str, calls: int, outcome: str, detail: str) -> None:
            searches = len(fake.searches) + len(exa.searches)
            usage = len(fake.usage_requests)
            event = Event(
                title, calls, outcome, detail, searches - seen["searches"], usage - seen["usage"]
            )
            seen.update(searches=searches, usage=usage)
            result.calls += calls
            result.events.append(event)
            if emit is not None:
                emit(event)

        def make_tool(r: Router) -> Callable[..., Any]:
            @guard(router=r, checklist=[MappingLookup(LOCAL_FACTS)], clock=clock)
            def web_search(query: str, max_results: int = 3) -> dict[str, Any]:
                """Search the web (served by the router)."""
                raise NotImplementedError  # never runs: the router serves

            return web_search

        web_search = make_tool(router)

        def attempt(title: str, query: str) -> None:
            before = len(fake.searches) + len(exa.searches)
            try:
                answer = web_search(query)
            except SearchRefused as exc:
                record(title, 1, f"refused ({exc.reason})", exc.message)
                return
            if len(fake.searches) + len(exa.searches) > before:
                record(title, 1, "served", _describe(answer))
            elif isinstance(answer, dict) and answer.get("answer") and not answer.get("results"):
                record(title, 1, "answered locally", str(answer["answer"]))
            else:
                record(title, 1, "served from the cache", "no request: " + _describe(answer))

        # 1. A normal search, then a second one in the same reply.
        with turn(id="reply-1"):
            attempt("reply 1: search", "python 3.13 release date")
            attempt("reply 1: a second search in the same reply", "python 3.14 release date")

        # 2. A parallel burst: eight searches fired at once in one reply.
        clock.advance(30)
        outcomes: list[str] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            with turn(id="reply-2"):
                try:
                    web_search(f"burst query number {i}")
                    outcome = "served"
                except SearchRefused as exc:
                    outcome = exc.reason
            with lock:
                outcomes.append(outcome)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        record(
            "reply 2: a burst of 8 parallel searches",
            8,
            f"{outcomes.count('served')} served, {len(outcomes) - outcomes.count('served')} "
            "refused",
            "one request reached the API; the others were told to use its result",
        )

        # 3. Tavily answers 429: the turn stops, nothing else is tried.
        clock.advance(30)
        fake.fail_next(429, retry_after=30, path="/search")
        with turn(id="reply-3"):
            attempt("reply 3: Tavily answers 429", "tavily rate limits")
        # 4. The next reply, 5 s later: refused locally with the seconds left.
        clock.advance(5)
        with turn(id="reply-4"):
            attempt("reply 4: search during the cooldown", "tavily usage endpoint")
            # 5. An earlier result is still in the cache: free, even now.
            attempt("reply 4: repeat an earlier search (cache)", "Python 3.13 release  date")
        # 6. A question the project's own notes answer: no search at all.
        with turn(id="reply-5"):
            attempt(
                "reply 5: a question local notes answer",
                "Which search backend does this  project use",
            )

        # 7. 28 minutes later a new process reads the same state file: the
        #    recorded cooldown has expired, so the key simply serves again.
        clock.advance(28 * 60)
        web_search = make_tool(Router(list(DEMO_KEYS), state=state, base_url=url, clock=clock))
        with turn(id="reply-6"):
            attempt("reply 6: 28 min later, a new process, no reset", "tavily search depth")

        # 8. Every Tavily key's credits run out: the chain's next provider serves, and
        #    the move down is named once in the log, however many searches follow.
        for key in DEMO_KEYS:
            fake.set_usage(key, plan_usage=fake.account_of(key).plan_limit)
        keys = {"tavily": list(DEMO_KEYS), "exa": [EXA_KEY]}
        chain = Router(keys, state=state, base_url=url, base_urls={"exa": exa_url}, clock=clock)
        web_search = make_tool(chain)
        moves = _Moves()
        chain_log = logging.getLogger("searchfuse.router")
        saved = chain_log.level, chain_log.propagate
        chain_log.addHandler(moves)
        chain_log.setLevel(logging.INFO)
        chain_log.propagate = False  # the transcript says it; stderr stays quiet
        served: list[str] = []
        try:
            for i, query in enumerate(("zig comptime", "pep 703 status", "rust 2024 edition")):
                clock.advance(60)
                with turn(id=f"reply-{7 + i}"):
                    answer = web_search(query)
                served.append(answer["searchfuse"]["served_by"])
        finally:
            chain_log.removeHandler(moves)
            chain_log.setLevel(saved[0])
            chain_log.propagate = saved[1]
        record(
            "replies 7-9: Tavily's credits are spent; the chain goes on",
            3,
            f"{served.count('exa')} served by Exa",
            f"each result says it is degraded from {answer['searchfuse']['degraded']['from']}; "
            f"the log named the move {len(moves.lines)} time(s): {moves.lines[0]!r}",
        )
        result.chain_moves = list(moves.lines)
        # The closing picture is the chain's (Exa's key included), with a probe: Tavily's
        # /usage is free, so the diagnosis reads the spent plans afresh instead of calling
        # the 432s' flags stale against figures synced before the credits ran out.
        diagnosis = chain.diagnose(probe=True)
        result.status = [s.to_dict() for s in chain.status()]
        chain.close()
        result.diagnosis = diagnosis.to_dict()
        result.diagnosis_text = str(diagnosis)
        result.api_searches = len(fake.searches) + len(exa.searches)
        result.api_usage = len(fake.usage_requests)
        router.close()
        return result


def run_demo(json_output: bool = False) -> int:
    """Run the session and print the transcript (or JSON); returns the exit code."""
    from searchfuse.cli import format_status

    out = sys.stdout
    # The transcript says what the warnings would say; keep stderr quiet.
    logging.getLogger("searchfuse").setLevel(logging.ERROR)
    if json_output:
        result = run_session()
        out.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0

    out.write("searchfuse demo: a scripted agent session against a simulated Tavily (and Exa)\n")
    out.write("(loopback only, made-up keys, a fake clock: nothing leaves this machine)\n\n")
    step = 0

    def show(event: Event) -> None:
        nonlocal step
        step += 1
        requests = f"{event.api_requests} search request(s)"
        if event.usage_requests:
            requests += (
                f" + {event.usage_requests} /usage (a key's figures are synced on its first use "
                "and after 30 min)"
            )
        out.write(f"[{step}] {event.title}\n")
        out.write(f"    -> {event.outcome}: {event.detail}\n")
        out.write(f"    (reached the API: {requests})\n\n")

    result = run_session(show)
    from searchfuse.router.status import KeyStatus

    out.write("status:\n")
    table = format_status([KeyStatus(**s) for s in result.status])
    out.write("".join(f"    {line}\n" if line else "\n" for line in table.splitlines()))
    out.write("\ndiagnosis:\n")
    out.write("".join(f"    {line}\n" for line in result.diagnosis_text.splitlines()))
    out.write("\n" + result.summary() + "\n")
    return 0
