"""The gateway's ASGI app: Tavily's API (`/search`, `/extract`, `/crawl`, `/map`, `/usage`)
served by a [`Router`][searchfuse.Router].

A request passes, in order: the edges (concurrency bound, access log, span),
the client's token (`Authorization: Bearer`, or `api_key` in the body as old
tavily-python versions send it; never forwarded), the body bound and JSON,
the caller's ids, then the router (searches through the guard's rules). Every
answer has Tavily's shape and status codes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from searchfuse import _telemetry
from searchfuse._secrets import mask, redact
from searchfuse._serving import ClientTokens, bearer_token
from searchfuse._spend import finite
from searchfuse.errors import SearchRefused
from searchfuse.router import Router

from ._errors import BUSY, MESSAGES, Answer, answer_for
from ._identity import BadHeader, Caller, caller_of, spend_scope_for
from ._limits import (
    DEADLINE_GRACE,
    DEFAULT_CONCURRENCY,
    DEFAULT_DEADLINE,
    ENDPOINTS,
    MAX_BODY,
    OPEN_PATHS,
)
from ._searches import CacheMode, Searches
from ._usage import pool_usage

__all__ = ["build_app"]

log = logging.getLogger("searchfuse.gateway")
access_log = logging.getLogger("searchfuse.gateway.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Reply(Exception):
    """An error answer decided deep in a handler."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.message)
        self.answer = answer


def _json_text(data: Any) -> str:
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        # NaN or an infinity in an upstream answer is not JSON: null is what JSON can say.
        text = json.dumps(data, ensure_ascii=False)
        return json.dumps(json.loads(text, parse_constant=lambda _: None), ensure_ascii=False)


def _error(answer: Answer) -> Response:
    return Response(
        _json_text(answer.body),
        status_code=answer.status,
        headers=answer.headers,
        media_type="application/json",
    )


def _printable(text: str, limit: int = 200) -> str:
    text = text[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


class _Gateway:
    """The endpoints, with what they share: the router, the tokens, the searches."""

    def __init__(
        self,
        router: Router,
        tokens: ClientTokens,
        searches: Searches,
        deadline: float,
        max_body: int,
    ) -> None:
        self.router = router
        self.tokens = tokens
        self.searches = searches
        self.deadline = deadline
        self.max_body = max_body
        #: Only ever shown masked: the pool's keys, whatever an answer echoes.
        self.secrets = tuple(entry.key for entry in router.keys)

    # -- who is calling ------------------------------------------------------------

    def client(self, token: str | None) -> str | None:
        """The client's name; `None` when no tokens are configured (then anyone may call)."""
        if not self.tokens:
            return None
        name = self.tokens.identify(token)
        if name is None:
            raise _Reply(Answer(401, MESSAGES[401]))
        return name

    def caller(self, request: Request, client: str | None) -> Caller:
        try:
            caller = caller_of(request.headers, client)
        except BadHeader as exc:
            raise _Reply(Answer(400, str(exc))) from None
        request.scope["state"]["client"] = client
        return caller

    # -- the body ------------------------------------------------------------------

    async def read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise _Reply(Answer(400, "Content-Length is not a number of bytes."))
            if int(declared) > self.max_body:
                raise _Reply(self.too_large())
        size = 0
        chunks: list[bytes] = []
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise _Reply(self.too_large())
            chunks.append(chunk)
        return b"".join(chunks)

    def too_large(self) -> Answer:
        return Answer(413, MESSAGES[413].format(limit=self.max_body))

    @staticmethod
    def parse(raw: bytes) -> dict[str, Any] | Answer:
        """The body as a JSON object, or the 400 that says why it is not one."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return Answer(400, "The request body is not valid JSON.")
        if not isinstance(data, dict):
            return Answer(400, "The request body must be a JSON object.")
        return data

    # -- the endpoints -------------------------------------------------------------

    async def post(self, request: Request) -> Response:
        """`POST /search`, `/extract`, `/crawl`, `/map`."""
        return await self.answer(request, self._post)

    async def usage(self, request: Request) -> Response:
        """`GET /usage`: the pool's totals in Tavily's shape."""
        return await self.answer(request, self._usage)

    async def answer(
        self, request: Request, handler: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """`handler`'s answer within the deadline, every error in Tavily's shape."""
        try:
            async with asyncio.timeout(self.deadline + min(DEADLINE_GRACE, self.deadline / 10)):
                return await handler(request)
        except _Reply as reply:
            return _error(reply.answer)
        except TimeoutError:
            log.warning(
                "%s %s: no answer within %g s", request.method, request.url.path, self.deadline
            )
            return _error(Answer(504, MESSAGES[504]))
        except Exception as exc:
            answer = answer_for(exc)
            # Refusals are the router doing its job; anything else is the operator's to see.
            refused = isinstance(exc, SearchRefused)
            why = f"{type(exc).__name__}: {exc}"
            reasons = getattr(exc, "reasons", None)
            if reasons:
                why += f" ({'; '.join(f'{k}: {v}' for k, v in reasons.items())})"
            log.log(
                logging.INFO if refused or answer.status < 500 else logging.ERROR,
                "%s %s answered %d: %s",
                request.method,
                request.url.path,
                answer.status,
                redact(why, self.secrets),
                exc_info=answer.status == 500,
            )
            return _error(answer)

    async def _usage(self, request: Request) -> Response:
        client = self.client(bearer_token(request.headers.get("authorization")))
        caller = self.caller(request, client)
        records = await asyncio.to_thread(self.router.status)
        budgets = await asyncio.to_thread(
            self.router.budgets, user=caller.user, conversation=caller.spending_conversation
        )
        usage = pool_usage(records, budgets)
        return Response(_json_text(usage), media_type="application/json")

    async def _post(self, request: Request) -> Response:
        path = request.url.path
        token = bearer_token(request.headers.get("authorization"))
        client = self.client(token) if token is not None else None
        body = self.parse(await self.read_body(request))
        if token is None:
            # Old tavily-python versions send the key in the body.
            given = body.get("api_key") if isinstance(body, dict) else None
            client = self.client(given if isinstance(given, str) else None)
        if isinstance(body, Answer):
            raise _Reply(body)
        # The client's token never travels upstream: only the pool's keys do.
        body.pop("api_key", None)
        caller = self.caller(request, client)
        asked_usage = body.get("include_usage") is True
        with spend_scope_for(caller):
            if path == "/search":
                result, sent = await self.searches.search(caller, body)
            else:
                result = await self.router.arequest(path, body, timeout=self._timeout(body))
                sent = True
        return self.served(request, result, sent=sent, asked_usage=asked_usage)

    def _timeout(self, body: Mapping[str, Any]) -> float | None:
        """The time an extraction or crawl asks for (its `timeout`), within the deadline."""
        asked = body.get("timeout")
        if isinstance(asked, bool) or not isinstance(asked, int | float):
            return None
        if not finite(asked) or asked <= 0:  # finite: JSON ints may be beyond any float
            return None
        return min(float(asked), self.deadline)

    def served(
        self, request: Request, result: dict[str, Any], *, sent: bool, asked_usage: bool
    ) -> Response:
        """A result as Tavily sends it; who served it goes to the log and the headers."""
        meta = result.get("searchfuse")
        meta = meta if isinstance(meta, dict) else {}
        state = request.scope["state"]
        served_by = str(meta.get("served_by") or "?") if sent else "cache"
        state["served_by"] = served_by
        if sent and isinstance(meta.get("key"), str):
            state["key"] = meta["key"]
        body = {name: value for name, value in result.items() if name != "searchfuse"}
        if not asked_usage:
            body.pop("usage", None)  # asked for by the router, to count credits
        elif not sent:
            body["usage"] = {"credits": 0}  # a cache hit costs nothing
        text = _json_text(body)
        for key in self.secrets:
            if key in text:
                text = text.replace(key, mask(key))
        headers = {"X-Searchfuse-Served-By": _printable(served_by, 40)}
        degraded = meta.get("degraded")
        if isinstance(degraded, dict):
            headers["X-Searchfuse-Degraded"] = _printable(
                f"{degraded.get('from')}: {degraded.get('reason')}", 120
            )
        return Response(text, media_type="application/json", headers=headers)


async def _healthz(request: Request) -> Response:
    return Response('{"status":"ok"}', media_type="application/json")


async def _http_error(request: Request, exc: Exception) -> Response:
    """404 and 405 (and any other HTTP error Starlette raises) in Tavily's shape."""
    assert isinstance(exc, HTTPException)
    message = MESSAGES.get(exc.status_code) or str(exc.detail)
    response = _error(Answer(exc.status_code, message))
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def _crash(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)
    return _error(Answer(500, MESSAGES[500]))


class _Record:
    """What one request's log line and span say, written once when its answer is complete."""

    def __init__(
        self,
        edges: _Edges,
        method: str,
        path: str,
        state: Mapping[str, Any],
        attributes: dict[str, str | int | float],
    ) -> None:
        self.edges = edges
        self.method = method
        self.path = path
        self.state = state
        self.attributes = attributes
        self.status = 0
        self.started = time.perf_counter()
        self.done = False

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        elapsed = time.perf_counter() - self.started
        self.edges._log(self.method, self.path, self.status, self.state, elapsed)
        self.attributes["http.response.status_code"] = self.status
        for name in ("served_by", "key", "client"):
            if self.state.get(name):
                self.attributes[f"searchfuse.{name}"] = str(self.state[name])


class _Edges:
    """Around every request: the concurrency bound, one access-log line, one span."""

    def __init__(self, app: ASGIApp, *, max_concurrency: int, secrets: Iterable[str]) -> None:
        self.app = app
        self.max_concurrency = max_concurrency
        self.in_flight = 0
        self.secrets = tuple(secrets)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        method = str(scope.get("method", ""))
        known = path in ENDPOINTS or path in ("/usage", "/healthz")
        with _telemetry.request_span(method, path if known else "unknown") as attributes:
            record = _Record(self, method, path, scope.setdefault("state", {}), attributes)

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    record.status = int(message["status"])
                elif message["type"] == "http.response.body" and not message.get("more_body"):
                    # Written before the last byte leaves: whoever has the answer can
                    # read its log line.
                    record.finish()
                await send(message)

            try:
                # Checked and counted with no await between: one event loop, no race.
                if path not in OPEN_PATHS and self.in_flight >= self.max_concurrency:
                    await _error(Answer(503, BUSY, 1.0))(scope, receive, sending)
                else:
                    self.in_flight += 1
                    try:
                        await self.app(scope, receive, sending)
                    finally:
                        self.in_flight -= 1
            finally:
                record.finish()

    def _log(
        self, method: str, path: str, status: int, state: Mapping[str, Any], seconds: float
    ) -> None:
        shown = _printable(redact(path, self.secrets))
        access_log.info(
            "%s %s %d served_by=%s key=%s client=%s %.1f ms",
            _printable(method, 16),
            shown,
            status,
            state.get("served_by") or "-",
            state.get("key") or "-",
            _printable(str(state.get("client") or "-"), 64),
            seconds * 1000.0,
        )


def build_app(
    router: Router,
    *,
    tokens: ClientTokens | Mapping[str, str] | None = None,
    per_turn: int | None = None,
    min_interval: float = 2.0,
    deadline: float = DEFAULT_DEADLINE,
    max_concurrency: int = DEFAULT_CONCURRENCY,
    cache: CacheMode = "shared",
    max_body: int = MAX_BODY,
) -> Any:
    """The gateway as an ASGI app (Starlette), serving Tavily's API with `router`.

    Args:
        router: the router that serves every request.
        tokens: client tokens by name (`{"alice": "t1"}`); without them any
            caller is served (the app is then for loopback only, which
            [`serve`][searchfuse.gateway.serve] enforces).
        per_turn: searches per turn of one session (`X-Session-Id`);
            `None` (default) counts no turns.
        min_interval: a session's calls that overlap, or start within this
            many seconds of its previous one, are one turn.
        deadline: seconds within which every request is answered (else 504).
        max_concurrency: requests served at once; more are answered 503.
        cache: `"shared"` (the router's store: every gateway sharing it
            shares the cache), `"memory"` (this process) or `"off"`.
        max_body: the largest request body, in bytes (else 413).
    """
    tokens = tokens if isinstance(tokens, ClientTokens) else ClientTokens(dict(tokens or {}))
    if per_turn is not None and (
        isinstance(per_turn, bool) or not isinstance(per_turn, int) or per_turn < 0
    ):
        raise ValueError(f"per_turn must be None or a whole number >= 0, not {per_turn!r}")
    for name, seconds in (("deadline", deadline), ("min_interval", min_interval)):
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"{name} must be a number of seconds, not {seconds!r}")
        if not finite(seconds) or seconds < 0 or (name == "deadline" and seconds == 0):
            raise ValueError(f"{name} must be a finite number of seconds > 0, not {seconds!r}")
    for name, count in (("max_concurrency", max_concurrency), ("max_body", max_body)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be a whole number >= 1, not {count!r}")
    pool = {entry.key for entry in router.keys}
    if any(token in pool for token in tokens.tokens.values()):
        raise ValueError("a client token must not be one of the pool's keys")
    searches = Searches(router, per_turn=per_turn, min_interval=float(min_interval), cache=cache)
    gateway = _Gateway(router, tokens, searches, float(deadline), max_body)
    routes = [Route(path, gateway.post, methods=["POST"]) for path in ENDPOINTS]
    routes += [
        Route("/usage", gateway.usage, methods=["GET"]),
        Route("/healthz", _healthz, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_error, Exception: _crash},
    )
    secrets = [*gateway.secrets, *tokens.tokens.values()]
    return _Edges(app, max_concurrency=max_concurrency, secrets=secrets)
