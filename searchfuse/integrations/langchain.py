"""LangChain v1: one import keeps a LangChain agent within its web-search budget.

``pip install "searchfuse[langchain]"``, then pick what fits the code:

- :class:`SearchFuseMiddleware` for ``langchain.agents.create_agent``. Each
  model reply is one turn: the whole batch of search calls in one AI message
  is decided at once (``per_turn`` of them run, the rest are answered with an
  error tool message), and every call that runs passes the cache, the fuse
  and, if given, the router.
- :func:`guard_tool` wraps any existing ``BaseTool`` for code that does not
  use ``create_agent``: same name, description and argument schema, so the
  model sees the same tool; ``invoke``, ``ainvoke``, ``batch`` and ``run``
  are all guarded.
- :class:`RoutedTavilySearch`, a drop-in for ``langchain_tavily.TavilySearch``
  (same name and arguments) whose searches go through a
  :class:`~searchfuse.Router`: several keys, lazy usage sync, a hard stop on
  a 429.

Refusals always reach the model as a tool message with ``status="error"``
carrying :attr:`~searchfuse.SearchRefused.message`, never as an exception:
LangGraph's ``ToolNode`` re-raises ordinary exceptions, which would end the
run. The rules themselves are the guard's (:func:`searchfuse.guard`): one
:class:`~searchfuse.guard.TurnBudget`, one :class:`~searchfuse.guard.Fuse`
and one cache per middleware or wrapped tool, shared by every tool it guards.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from typing import Annotated, Any, Literal

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import ArgsSchema, BaseTool, ToolException
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.langchain needs LangChain v1: pip install "searchfuse[langchain]"'
    ) from exc
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SkipValidation, create_model

from searchfuse import _clock
from searchfuse.errors import SearchFailed, SearchRefused, TurnLimitReached
from searchfuse.guard import Fuse, RouterLike, TurnBudget, guard, search_key, turn
from searchfuse.guard.cache import CACHE_LOCK, CacheKey, make_cache
from searchfuse.guard.calls import Binder
from searchfuse.guard.decorator import DEFAULT_MIN_INTERVAL
from searchfuse.guard.delegation import TAVILY_PARAMS
from searchfuse.guard.fuse import DEFAULT_COOLDOWN
from searchfuse.router import Router, policy

__all__ = [
    "DEFAULT_SEARCH_TOOLS",
    "TAVILY_SEARCH_DESCRIPTION",
    "GuardedTool",
    "RoutedTavilySearch",
    "SearchFuseMiddleware",
    "TavilySearchInput",
    "guard_tool",
]

logger = logging.getLogger("searchfuse.integrations.langchain")

#: Tool names :class:`SearchFuseMiddleware` guards unless told otherwise:
#: ``tavily_search``, ``web_search``, ``tavily_search_results_json``,
#: ``my_web_search``... (not ``tavily_extract``: an extract is not a search).
DEFAULT_SEARCH_TOOLS = re.compile(r"(?:^|_)(?:tavily|web)_?search(?:_|$)", re.IGNORECASE)

#: Which tools a middleware guards: names, tools, or a predicate on the name.
ToolSelection = Iterable[str | BaseTool] | Callable[[str], bool] | None

# -- reading what a tool reported ------------------------------------------------------

# langchain_tavily's TavilySearch swallows every HTTP error into a *successful*
# result ``{"error": ValueError("Error 429: ...")}``; other tools raise a
# ToolException that BaseTool turns into an error message. Both still mean
# "the backend said 429", and the fuse must hear it.
_ERROR_SHAPE = re.compile(r"""^\s*\{\s*['"]error['"]\s*:""")
_TOO_MANY = re.compile(r"too many requests", re.IGNORECASE)
_STATUS_IN_TEXT = re.compile(r"(?:error|status|http)\D{0,16}?\b([1-5]\d\d)\b", re.IGNORECASE)
_RETRY_AFTER_IN_TEXT = re.compile(r"retry[- _]?after\D{0,8}?(\d+(?:\.\d+)?)", re.IGNORECASE)


class _Reported(Exception):
    """A tool reported an error in its result instead of raising it.

    Raised inside the guard so the result is never cached; ``status_code``
    (when the text names one) lets the guard recognise a 429 and the router
    react to a 401 or a 432 like to an HTTP answer. ``result`` is what the
    tool returned, handed back to the caller unchanged.
    """

    def __init__(
        self,
        result: Any,
        text: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        origin: str | None = None,
    ) -> None:
        super().__init__(text)
        self.result = result
        self.status_code = status_code
        self.retry_after = retry_after
        self.origin = origin


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return str(content)


def _reported(result: Any, origin: str | None = None) -> _Reported | None:
    """The error a tool reported in ``result``, or ``None`` for a result that is no error."""
    error: Any = None
    if isinstance(result, ToolMessage):
        text = _content_text(result.content)
        if result.status != "error" and not _ERROR_SHAPE.match(text):
            return None
        error = text
    elif isinstance(result, Mapping):
        if "error" not in result or result.get("results"):
            return None
        error = result["error"]
    elif isinstance(result, str) and _ERROR_SHAPE.match(result):
        error = result
    else:
        return None
    status: int | None = None
    retry_after: float | None = None
    if isinstance(error, BaseException):
        status = policy.status_of(error)
        retry_after = policy.retry_after_of(error, _clock.now())
    text = str(error)
    if status is None:
        match = _STATUS_IN_TEXT.search(text)
        if match:
            status = int(match.group(1))
        elif _TOO_MANY.search(text):
            status = 429
    if retry_after is None:
        match = _RETRY_AFTER_IN_TEXT.search(text)
        if match:
            retry_after = float(match.group(1))
    return _Reported(result, text, status_code=status, retry_after=retry_after, origin=origin)


# -- the shared engine ---------------------------------------------------------------

# The backend of the call being guarded right now. The guard runs the wrapped
# function in the caller's thread (or task), so a context variable hands each
# call its own backend while the guarded function's signature stays the
# tool's arguments alone: the cache key, the router mapping and the logs see
# exactly what the model sent, never run managers, callbacks or configs.
_BACKEND: contextvars.ContextVar[Callable[[dict[str, Any]], Any]] = contextvars.ContextVar(
    "searchfuse_langchain_backend"
)
_ABACKEND: contextvars.ContextVar[Callable[[dict[str, Any]], Awaitable[Any]]] = (
    contextvars.ContextVar("searchfuse_langchain_abackend")
)

# Refusals raised inside a RoutedTavilySearch while a guarded call runs it.
# BaseTool turns them into error *text*; this box keeps the exception itself
# (with its exact ``retry_after``) for the guard around the call.
_REFUSALS: contextvars.ContextVar[list[SearchRefused] | None] = contextvars.ContextVar(
    "searchfuse_langchain_refusals", default=None
)


def _scope(turn_id: str | None) -> AbstractContextManager[Any]:
    return turn(id=turn_id) if turn_id is not None else nullcontext()


class _Searches:
    """One guarded callable per tool name, all sharing one cache, one budget and one fuse."""

    def __init__(
        self,
        *,
        per_turn: int | None,
        min_interval: float,
        cache: bool | MutableMapping[Any, Any],
        cache_key: CacheKey,
        cooldown: float,
        router: RouterLike | None,
        inject: str | None,
        budget: TurnBudget | None,
        fuse: Fuse | None,
        clock: _clock.Clock | None,
    ) -> None:
        self.per_turn = per_turn
        self.min_interval = min_interval
        self.cooldown = cooldown
        self.router = router
        self.inject = inject
        self.budget = budget if budget is not None else TurnBudget()
        self.fuse = fuse if fuse is not None else Fuse()
        self.clock = clock
        self.cache = make_cache(cache, timer=self.now)
        self.cache_key = cache_key
        self._lock = threading.Lock()
        self._sync: dict[str, Callable[..., Any]] = {}
        self._async: dict[str, Callable[..., Awaitable[Any]]] = {}
        self._binder = Binder(inspect.signature(_arguments_only), tool="")
        # Built now so that bad options fail here, not at the first search.
        self._sync["search"] = self._make("search", asynchronous=False)

    def now(self) -> float:
        clock = self.clock
        return clock() if clock is not None else _clock.now()

    def _key_for(self, name: str) -> CacheKey:
        cache_key = self.cache_key

        def key(query: str, /, **params: Any) -> Hashable:
            # Tools return different shapes: one cache, one partition per tool.
            return (name, cache_key(query, **params))

        return key

    def _make(self, name: str, *, asynchronous: bool) -> Callable[..., Any]:
        backend: Callable[..., Any]
        if asynchronous:

            async def abackend(**arguments: Any) -> Any:
                return await _ABACKEND.get()(arguments)

            backend = abackend
        else:

            def sbackend(**arguments: Any) -> Any:
                return _BACKEND.get()(arguments)

            backend = sbackend
        backend.__name__ = backend.__qualname__ = name
        return guard(
            backend,
            per_turn=self.per_turn,
            min_interval=self.min_interval,
            cache=self.cache if self.cache is not None else False,
            cache_key=self._key_for(name),
            cooldown=self.cooldown,
            router=self.router,
            inject=self.inject,
            on_refusal="raise",
            budget=self.budget,
            fuse=self.fuse,
            clock=self.clock,
        )

    def _guarded(self, name: str) -> Callable[..., Any]:
        with self._lock:
            guarded = self._sync.get(name)
            if guarded is None:
                guarded = self._sync[name] = self._make(name, asynchronous=False)
            return guarded

    def _aguarded(self, name: str) -> Callable[..., Awaitable[Any]]:
        with self._lock:
            guarded = self._async.get(name)
            if guarded is None:
                guarded = self._async[name] = self._make(name, asynchronous=True)
            return guarded

    def key(self, name: str, arguments: Mapping[str, Any]) -> Hashable:
        """The cache key the guard uses for these arguments of tool ``name``."""
        call = self._binder((), dict(arguments))
        return self._key_for(name)(call.query, **call.params)

    def cached(self, key: Hashable) -> bool:
        """Whether a search with this key would be a (free) cache hit now."""
        if self.cache is None:
            return False
        with CACHE_LOCK:
            return key in self.cache

    def blocked(self, now: float) -> SearchRefused | None:
        """What refuses any uncached search now (the fuse, or no usable key), or ``None``."""
        try:
            self.fuse.check(now)
            if self.router is not None:
                self.router.ensure_available()
        except SearchRefused as refusal:
            return refusal
        return None

    def spent(self, turn_id: str, now: float) -> int:
        """Searches the turn ``turn_id`` has spent so far."""
        with turn(id=turn_id):
            return self.budget.spent(min_interval=self.min_interval, now=now)

    def run(
        self,
        name: str,
        arguments: dict[str, Any],
        backend: Callable[[dict[str, Any]], Any],
        turn_id: str | None,
    ) -> Any:
        """Run one call of tool ``name`` through the guard; ``backend`` does the real work."""
        token = _BACKEND.set(backend)
        try:
            with _scope(turn_id):
                return self._guarded(name)(**arguments)
        finally:
            _BACKEND.reset(token)

    async def arun(
        self,
        name: str,
        arguments: dict[str, Any],
        backend: Callable[[dict[str, Any]], Awaitable[Any]],
        turn_id: str | None,
    ) -> Any:
        """Async twin of :meth:`run`."""
        token = _ABACKEND.set(backend)
        try:
            with _scope(turn_id):
                return await self._aguarded(name)(**arguments)
        finally:
            _ABACKEND.reset(token)


def _arguments_only(**arguments: Any) -> None:
    """The signature every guarded backend has: the tool's arguments, by name."""


def _accept(result: Any, refusals: list[SearchRefused], origin: str | None) -> Any:
    """``result`` if it may be cached; otherwise raise what the guard must see instead."""
    if refusals:
        raise refusals[-1]
    if isinstance(result, Command):
        # A state update is this call's own business: hand it back, never cache it.
        raise _Reported(result, "a Command", origin=origin)
    reported = _reported(result, origin)
    if reported is not None:
        raise reported
    return result


def _stringify(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _message_for(result: Any, call_id: str, name: str) -> ToolMessage | Command[Any]:
    """``result`` as the answer to the tool call ``call_id``."""
    if isinstance(result, ToolMessage):
        if result.tool_call_id == call_id:
            return result
        # A cache hit, or an identical call that shared a search in flight.
        return result.model_copy(update={"tool_call_id": call_id, "id": None})
    if isinstance(result, Command):
        return result
    return ToolMessage(content=_stringify(result), tool_call_id=call_id, name=name)


def _error_message(call_id: str, name: str, text: str) -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call_id, name=name, status="error")


def _shared_result(reported: _Reported, call_id: str, name: str) -> ToolMessage | Command[Any]:
    """What a call gets when the tool reported an error (or a Command) for it or its twin."""
    if isinstance(reported.result, Command) and reported.origin != call_id:
        return _error_message(
            call_id,
            name,
            "The same search ran for another call of this reply; use the result it returned.",
        )
    return _message_for(reported.result, call_id, name)


# -- the middleware ----------------------------------------------------------------


def _tool_matcher(tools: ToolSelection) -> Callable[[str], bool]:
    if tools is None:
        return lambda name: DEFAULT_SEARCH_TOOLS.search(name) is not None
    if callable(tools) and not isinstance(tools, BaseTool):
        return tools
    if isinstance(tools, str | BaseTool):
        tools = [tools]
    names = frozenset(t if isinstance(t, str) else t.name for t in tools)
    return names.__contains__


def _turn_of_message(message: AIMessage) -> str:
    """The turn id of one model reply: the id of the AI message that carries its calls."""
    if message.id:
        return f"langchain:{message.id}"
    # create_agent always assigns an id; outside it, the calls identify the reply.
    return "langchain:calls:" + ",".join(str(call.get("id")) for call in message.tool_calls)


def _owning_turn(request: ToolCallRequest) -> str | None:
    state = request.state
    if isinstance(state, Mapping):
        messages = state.get("messages")
    else:
        messages = getattr(state, "messages", None)
    call_id = request.tool_call.get("id")
    for message in reversed(list(messages or ())):
        if isinstance(message, AIMessage) and any(
            call.get("id") == call_id for call in message.tool_calls
        ):
            return _turn_of_message(message)
    return None


class SearchFuseMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Agent middleware for ``create_agent`` that keeps an agent within its search budget.

    ::

        from langchain.agents import create_agent
        from searchfuse.integrations.langchain import SearchFuseMiddleware

        agent = create_agent(model, tools=[tavily_search], middleware=[SearchFuseMiddleware()])

    Each model reply is one turn. After the model answers, the search calls
    of its AI message are decided together: up to ``per_turn`` distinct
    uncached searches run (cache hits and repeats of an allowed query are
    free); the others are answered at once with an error ``ToolMessage``
    telling the model to use the result it gets or to combine queries,
    and never reach the tool. While a cooldown runs every uncached search
    of the reply is refused with the seconds left.

    Each call that runs goes through the guard (``wrap_tool_call`` and
    ``awrap_tool_call``): the cache, the fuse, the turn budget, then the
    backend, which is ``router`` when one is given (the tool's arguments are
    mapped onto ``router.search``) and otherwise the tool itself. A 429
    trips the fuse, whether the tool raised it or reported it in its result
    (``langchain_tavily``'s ``{"error": ...}``); refusals come back as
    ``ToolMessage(status="error")``, never as an exception into the
    ``ToolNode``. Other exceptions from the tool propagate as they would
    without the middleware.

    Args:
        tools: Which tool calls are searches: tool names, tools, or a
            predicate on the name. Default: names like ``tavily_search``
            and ``web_search`` (:data:`DEFAULT_SEARCH_TOOLS`).
        per_turn: Searches per model reply, across all guarded tools
            (``None``: unlimited).
        router: Serve every guarded call with this router instead of the
            tool's own backend (several keys, lazy usage sync).
        cache: ``True`` (a 15-minute TTL cache of 256 entries), ``False``,
            or a cache instance; keyed by tool name and arguments.
        cache_key: ``(query, **arguments) -> key`` (see
            :func:`~searchfuse.guard.search_key`).
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        budget: A :class:`~searchfuse.guard.TurnBudget` to share.
        fuse: A :class:`~searchfuse.guard.Fuse` to share (for example with
            a guarded tool outside the agent).
        clock: Zero-argument callable returning epoch seconds.
    """

    def __init__(
        self,
        *,
        tools: ToolSelection = None,
        per_turn: int | None = 1,
        router: RouterLike | None = None,
        cache: bool | MutableMapping[Any, Any] = True,
        cache_key: CacheKey = search_key,
        cooldown: float = DEFAULT_COOLDOWN,
        budget: TurnBudget | None = None,
        fuse: Fuse | None = None,
        clock: _clock.Clock | None = None,
    ) -> None:
        super().__init__()
        self._guards = _tool_matcher(tools)
        self._searches = _Searches(
            per_turn=per_turn,
            min_interval=DEFAULT_MIN_INTERVAL,
            cache=cache,
            cache_key=cache_key,
            cooldown=cooldown,
            router=router,
            inject=None,
            budget=budget,
            fuse=fuse,
            clock=clock,
        )

    @property
    def fuse(self) -> Fuse:
        """The fuse every guarded call shares (``fuse.remaining(now)``, ``fuse.reset()``)."""
        return self._searches.fuse

    @property
    def budget(self) -> TurnBudget:
        """The turn budget every guarded call shares."""
        return self._searches.budget

    def guards(self, tool_name: str) -> bool:
        """Whether calls of the tool ``tool_name`` are guarded."""
        return bool(self._guards(tool_name))

    def cooldown_left(self) -> float:
        """Seconds until searches may reach the backend again (``0.0``: no cooldown)."""
        return self._searches.fuse.remaining(self._searches.now())

    # -- one decision per model reply ---------------------------------------------------

    def decide(self, message: AIMessage) -> list[ToolMessage]:
        """The refusals for the search calls of ``message``, one error message each.

        The calls not refused are left to run. This is what ``after_model``
        does with every model reply.
        """
        calls = [call for call in message.tool_calls if self.guards(call["name"])]
        if not calls:
            return []
        searches = self._searches
        turn_id = _turn_of_message(message)
        now = searches.now()
        spent = searches.spent(turn_id, now)
        running: set[Hashable] = set()
        blocked: SearchRefused | None = None
        checked = False
        refusals: list[ToolMessage] = []
        for call in calls:
            key: Hashable
            try:
                key = searches.key(call["name"], call["args"])
            except TypeError:
                key = ("unreadable", call.get("id"))
            if key in running or searches.cached(key):
                continue  # a repeat shares the search; a cache hit is free
            if not checked:
                blocked, checked = searches.blocked(now), True
            refusal = blocked
            if refusal is None and searches.per_turn is not None and spent >= searches.per_turn:
                refusal = TurnLimitReached(searches.per_turn)
            if refusal is None:
                spent += 1
                running.add(key)
                continue
            refusals.append(_error_message(str(call.get("id")), call["name"], refusal.message))
        if refusals:
            logger.info(
                "refused %d of %d search call(s) in one model reply (%s)",
                len(refusals),
                len(calls),
                blocked.reason if blocked is not None else "turn_limit",
            )
        return refusals

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Decide the model reply's search calls at once; answer the refused ones."""
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        refusals = self.decide(last)
        return {"messages": refusals} if refusals else None

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_model` (it does no I/O beyond a state-file read)."""
        return self.after_model(state, runtime)

    # -- each call that runs -------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run a guarded call through the cache, the fuse, the budget and the backend."""
        call = request.tool_call
        name = call["name"]
        if not self.guards(name):
            return handler(request)
        call_id = str(call.get("id"))

        def backend(arguments: dict[str, Any]) -> Any:
            refusals: list[SearchRefused] = []
            token = _REFUSALS.set(refusals)
            try:
                result = handler(request)
            finally:
                _REFUSALS.reset(token)
            return _accept(result, refusals, call_id)

        try:
            outcome = self._searches.run(name, dict(call["args"]), backend, _owning_turn(request))
        except SearchRefused as refusal:
            return _error_message(call_id, name, refusal.message)
        except _Reported as reported:
            return _shared_result(reported, call_id, name)
        except SearchFailed as failed:  # from the router: the model may fix its arguments
            return _error_message(call_id, name, str(failed))
        return _message_for(outcome, call_id, name)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        call = request.tool_call
        name = call["name"]
        if not self.guards(name):
            return await handler(request)
        call_id = str(call.get("id"))

        async def backend(arguments: dict[str, Any]) -> Any:
            refusals: list[SearchRefused] = []
            token = _REFUSALS.set(refusals)
            try:
                result = await handler(request)
            finally:
                _REFUSALS.reset(token)
            return _accept(result, refusals, call_id)

        try:
            outcome = await self._searches.arun(
                name, dict(call["args"]), backend, _owning_turn(request)
            )
        except SearchRefused as refusal:
            return _error_message(call_id, name, refusal.message)
        except _Reported as reported:
            return _shared_result(reported, call_id, name)
        except SearchFailed as failed:
            return _error_message(call_id, name, str(failed))
        return _message_for(outcome, call_id, name)


# -- wrapping an existing tool -------------------------------------------------------


def _schema_without(schema: ArgsSchema | None, field: str) -> ArgsSchema | None:
    """``schema`` without the argument ``field`` (what the model must not see)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        hidden = dict(schema)
        properties = dict(hidden.get("properties") or {})
        properties.pop(field, None)
        hidden["properties"] = properties
        if "required" in hidden:
            hidden["required"] = [name for name in hidden["required"] if name != field]
        return hidden
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        fields: dict[str, Any] = {
            name: (info.annotation, info)
            for name, info in schema.model_fields.items()
            if name != field
        }
        model: type[BaseModel] = create_model(schema.__name__, __doc__=schema.__doc__, **fields)
        return model
    return schema


def _schema_fields(schema: ArgsSchema | None) -> tuple[str, ...]:
    if isinstance(schema, dict):
        return tuple((schema.get("properties") or {}).keys())
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return tuple(schema.model_fields)
    return ()


class GuardedTool(BaseTool):
    """A ``BaseTool`` whose calls pass searchfuse's guard; made by :func:`guard_tool`.

    It has the wrapped tool's name, description and argument schema (minus
    an injected key argument), so a model sees the same tool. Every entry
    point (``invoke``, ``ainvoke``, ``batch``, ``abatch``, ``run``,
    ``arun``) goes through :meth:`run` or :meth:`arun`, which guard the call
    and then run the wrapped tool. A refusal is returned, never raised: an
    error ``ToolMessage`` for a tool call, the refusal's message otherwise.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    #: The tool being guarded; it still validates and formats its own calls.
    inner: BaseTool

    _searches: _Searches = PrivateAttr()
    _inject: str | None = PrivateAttr(default=None)
    _model_fields: tuple[str, ...] = PrivateAttr(default=())

    @property
    def fuse(self) -> Fuse:
        """The fuse this tool's calls share."""
        return self._searches.fuse

    @property
    def budget(self) -> TurnBudget:
        """The turn budget this tool's calls share."""
        return self._searches.budget

    @property
    def tool_call_schema(self) -> ArgsSchema:
        """What the model sees: the wrapped tool's own schema, minus an injected key."""
        if self._inject is None:
            return self.inner.tool_call_schema
        return super().tool_call_schema

    def _arguments(self, tool_input: str | dict[str, Any]) -> dict[str, Any]:
        """The model-facing arguments of a call: what the cache key and the router see."""
        if isinstance(tool_input, str):
            first = self._model_fields[0] if self._model_fields else "query"
            return {first: tool_input}
        fields = self._model_fields
        # The ToolNode adds injected values (state, runtime, call id) to the
        # arguments; they are not part of the search.
        return {k: v for k, v in tool_input.items() if not fields or k in fields}

    def _inner_input(
        self, tool_input: str | dict[str, Any], arguments: dict[str, Any]
    ) -> str | dict[str, Any]:
        inject = self._inject
        if inject is None or inject not in arguments:
            return tool_input
        base = self._arguments(tool_input) if isinstance(tool_input, str) else dict(tool_input)
        return {**base, inject: arguments[inject]}

    def _slot(self, tool_call_id: str | None) -> str:
        # A tool call gets a ToolMessage back, a plain call the raw value: two cache shapes.
        return self.name if tool_call_id is not None else f"{self.name}:value"

    def _refused(self, refusal: SearchRefused | SearchFailed, tool_call_id: str | None) -> Any:
        text = refusal.message if isinstance(refusal, SearchRefused) else str(refusal)
        if tool_call_id is not None:
            return _error_message(tool_call_id, self.name, text)
        return text

    def _output(self, outcome: Any, tool_call_id: str | None) -> Any:
        if tool_call_id is None:
            if isinstance(outcome, ToolMessage):
                return outcome.content
            return outcome
        return _message_for(outcome, tool_call_id, self.name)

    def run(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Guard the call, then run the wrapped tool (unless refused or answered from cache)."""

        def backend(arguments: dict[str, Any]) -> Any:
            refusals: list[SearchRefused] = []
            token = _REFUSALS.set(refusals)
            try:
                result = self.inner.run(
                    self._inner_input(tool_input, arguments),
                    *args,
                    tool_call_id=tool_call_id,
                    **kwargs,
                )
            finally:
                _REFUSALS.reset(token)
            return _accept(result, refusals, tool_call_id)

        try:
            outcome = self._searches.run(
                self._slot(tool_call_id), self._arguments(tool_input), backend, None
            )
        except (SearchRefused, SearchFailed) as refusal:
            return self._refused(refusal, tool_call_id)
        except _Reported as reported:
            if tool_call_id is None:
                return reported.result
            return _shared_result(reported, tool_call_id, self.name)
        return self._output(outcome, tool_call_id)

    async def arun(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Async twin of :meth:`run`."""

        async def backend(arguments: dict[str, Any]) -> Any:
            refusals: list[SearchRefused] = []
            token = _REFUSALS.set(refusals)
            try:
                result = await self.inner.arun(
                    self._inner_input(tool_input, arguments),
                    *args,
                    tool_call_id=tool_call_id,
                    **kwargs,
                )
            finally:
                _REFUSALS.reset(token)
            return _accept(result, refusals, tool_call_id)

        try:
            outcome = await self._searches.arun(
                self._slot(tool_call_id), self._arguments(tool_input), backend, None
            )
        except (SearchRefused, SearchFailed) as refusal:
            return self._refused(refusal, tool_call_id)
        except _Reported as reported:
            if tool_call_id is None:
                return reported.result
            return _shared_result(reported, tool_call_id, self.name)
        return self._output(outcome, tool_call_id)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a GuardedTool runs through run()/arun(), which guard the call")


def guard_tool(
    tool: BaseTool,
    *,
    per_turn: int | None = 1,
    min_interval: float = DEFAULT_MIN_INTERVAL,
    cache: bool | MutableMapping[Any, Any] = True,
    cache_key: CacheKey = search_key,
    cooldown: float = DEFAULT_COOLDOWN,
    router: RouterLike | None = None,
    inject: str | None = None,
    budget: TurnBudget | None = None,
    fuse: Fuse | None = None,
    clock: _clock.Clock | None = None,
) -> GuardedTool:
    """Wrap an existing LangChain tool so its calls pass searchfuse's guard.

    ::

        from searchfuse import turn
        from searchfuse.integrations.langchain import guard_tool

        search = guard_tool(TavilySearch(max_results=3))
        with turn():                                   # one assistant reply
            search.invoke({"query": "python 3.13 release date"})   # searches
            search.invoke({"query": "rust 2024 edition"})          # refused: the message

    The result keeps the tool's name, description and argument schema.
    Calls through ``invoke``, ``ainvoke``, ``batch``, ``abatch``, ``run``
    and ``arun`` are all guarded, in the guard's order: cache, fuse, turn
    budget, backend. A turn is the caller's :func:`~searchfuse.turn` scope,
    or outside any, calls that overlap or follow within ``min_interval``
    seconds (so one ``batch`` is one turn). A 429 trips the fuse whether the
    tool raises it or reports it in its result. The cache key is the
    model-facing arguments only (never run managers, callbacks or configs).

    Args:
        tool: The tool to guard.
        per_turn: Searches per turn (``None``: unlimited).
        min_interval: Outside any ``turn()``, the burst window in seconds.
        cache: ``True``, ``False`` or a cache instance.
        cache_key: ``(query, **arguments) -> key``.
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        router: Serve calls with this router instead of the tool's backend
            (the tool's arguments are mapped onto ``router.search``).
        inject: With ``router``: run the tool itself with the key the router
            chose passed as this argument (``"api_key"``), once per key it
            tries. The argument is hidden from the schema the model sees.
        budget: A :class:`~searchfuse.guard.TurnBudget` to share.
        fuse: A :class:`~searchfuse.guard.Fuse` to share.
        clock: Zero-argument callable returning epoch seconds.
    """
    if inject is not None and router is None:
        raise ValueError("inject= needs router=: the router chooses the key to inject")
    schema: ArgsSchema | None = tool.args_schema
    if schema is None:
        schema = tool.get_input_schema()
    if inject is not None:
        if inject not in _schema_fields(schema):
            raise TypeError(f"inject={inject!r}: the tool {tool.name!r} has no argument {inject!r}")
        schema = _schema_without(schema, inject)
    wrapped = GuardedTool(
        name=tool.name,
        description=tool.description,
        args_schema=schema,
        return_direct=tool.return_direct,
        response_format=tool.response_format,
        tags=tool.tags,
        metadata=tool.metadata,
        extras=tool.extras,
        inner=tool,
    )
    wrapped._searches = _Searches(
        per_turn=per_turn,
        min_interval=min_interval,
        cache=cache,
        cache_key=cache_key,
        cooldown=cooldown,
        router=router,
        inject=inject,
        budget=budget,
        fuse=fuse,
        clock=clock,
    )
    wrapped._inject = inject
    # What the model sends: the tool-call schema leaves out injected arguments.
    fields = _schema_fields(tool.tool_call_schema) or _schema_fields(schema)
    wrapped._model_fields = tuple(name for name in fields if name != inject)
    return wrapped


# -- the router-backed Tavily tool --------------------------------------------------

#: The description :class:`RoutedTavilySearch` shows the model.
TAVILY_SEARCH_DESCRIPTION = (
    "A web search engine for current, accurate and citable results. Useful when you "
    "need facts or news you do not already have. Returns JSON with the query, an "
    "optional answer and a list of results (title, url, content, score). "
    "Input should be a search query."
)


class TavilySearchInput(BaseModel):
    """The arguments of ``tavily_search``, as ``langchain_tavily.TavilySearch`` takes them."""

    model_config = ConfigDict(extra="allow")

    query: str = Field(description="The search query.")
    include_domains: list[str] | None = Field(
        default=[],
        description="Only return results from these domains (e.g. ['nasa.gov']).",
    )
    exclude_domains: list[str] | None = Field(
        default=[],
        description="Never return results from these domains.",
    )
    search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] | None = Field(
        default="basic",
        description="'basic' for quick answers, 'advanced' for thorough research (2 credits).",
    )
    include_images: bool | None = Field(
        default=False,
        description="Also return related images; only when the user asks for visuals.",
    )
    time_range: Literal["day", "week", "month", "year"] | None = Field(
        default=None,
        description="Only content published in this recent period; only when asked for.",
    )
    topic: Literal["general", "news", "finance"] | None = Field(
        default="general",
        description="'general' for most queries, 'news' for current events, 'finance' for markets.",
    )
    start_date: str | None = Field(
        default=None,
        description="Only content published on or after this date (YYYY-MM-DD).",
    )
    end_date: str | None = Field(
        default=None,
        description="Only content published on or before this date (YYYY-MM-DD).",
    )


def _router_from_env() -> Any:
    return Router.from_env()


class RoutedTavilySearch(BaseTool):
    """``tavily_search`` served by a :class:`~searchfuse.Router`: a drop-in for ``TavilySearch``.

    ::

        from searchfuse import Router
        from searchfuse.integrations.langchain import RoutedTavilySearch

        search = RoutedTavilySearch(router=Router.from_config("config/keys.json"), max_results=3)

    Same name (``tavily_search``) and arguments (:class:`TavilySearchInput`)
    as ``langchain_tavily.TavilySearch``, and the same result: Tavily's JSON
    as a dict (plus a ``"searchfuse"`` entry naming the masked key that
    served it). Instance settings (``max_results``, ``topic``,
    ``include_answer``...) override the model's arguments, as in
    ``TavilySearch``. Without ``router`` the keys come from the environment
    (:meth:`Router.from_env <searchfuse.Router.from_env>`).

    The router picks the key with the most quota left and skips cooling,
    invalid and exhausted ones. A 429 stops the search (no other key is
    tried) and every search is refused until the cooldown ends; refusals
    and errors become an error tool message with a model-facing text, never
    an exception. Combine it with :class:`SearchFuseMiddleware` (or
    :func:`guard_tool`) for the per-reply limit and the cache.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "tavily_search"
    description: str = TAVILY_SEARCH_DESCRIPTION
    args_schema: Annotated[ArgsSchema | None, SkipValidation()] = TavilySearchInput
    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True

    #: The router that serves the searches (anything with ``search``/``asearch``).
    router: Any = Field(default_factory=_router_from_env, exclude=True)
    #: Results per search (Tavily's default is 5).
    max_results: int | None = None
    #: Overrides the model's ``topic``.
    topic: Literal["general", "news", "finance"] | None = None
    #: Overrides the model's ``search_depth``.
    search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] | None = None
    #: Overrides the model's ``include_domains``.
    include_domains: list[str] | None = None
    #: Overrides the model's ``exclude_domains``.
    exclude_domains: list[str] | None = None
    #: Overrides the model's ``include_images``.
    include_images: bool | None = None
    #: Overrides the model's ``time_range``.
    time_range: Literal["day", "week", "month", "year"] | None = None
    #: Ask Tavily for a short answer (``True``, ``"basic"``, ``"advanced"``).
    include_answer: bool | Literal["basic", "advanced"] | None = None
    #: Ask for each result's cleaned page content (``True``, ``"markdown"``, ``"text"``).
    include_raw_content: bool | Literal["markdown", "text"] | None = None
    #: Describe each image.
    include_image_descriptions: bool | None = None
    #: Include each result's favicon URL.
    include_favicon: bool | None = None
    #: Boost results from this country (general topic only).
    country: str | None = None
    #: Let Tavily choose parameters from the query.
    auto_parameters: bool | None = None

    def _params(self, model_args: dict[str, Any]) -> dict[str, Any]:
        settings = {
            "topic": self.topic,
            "search_depth": self.search_depth,
            "include_domains": self.include_domains,
            "exclude_domains": self.exclude_domains,
            "include_images": self.include_images,
            "time_range": self.time_range,
            "include_answer": self.include_answer,
            "include_raw_content": self.include_raw_content,
            "include_image_descriptions": self.include_image_descriptions,
            "include_favicon": self.include_favicon,
            "country": self.country,
            "auto_parameters": self.auto_parameters,
        }
        params: dict[str, Any] = {k: v for k, v in model_args.items() if k in TAVILY_PARAMS}
        params.update({k: v for k, v in settings.items() if v not in (None, [])})
        params = {k: v for k, v in params.items() if v not in (None, [])}
        params["max_results"] = self.max_results if self.max_results is not None else 5
        return params

    @staticmethod
    def _refuse(exc: SearchRefused | SearchFailed) -> ToolException:
        if isinstance(exc, SearchRefused):
            box = _REFUSALS.get()
            if box is not None:
                box.append(exc)
            return ToolException(exc.message)
        return ToolException(str(exc))

    @staticmethod
    def _check(query: str, result: dict[str, Any]) -> dict[str, Any]:
        if not result.get("results"):
            raise ToolException(
                f"No search results found for {query!r}. Try a broader or differently "
                "worded query, or drop the domain and time filters."
            )
        return result

    # The schema (TavilySearchInput) names the model's arguments; they arrive as
    # keyword arguments, and only Tavily's own fields pass on to the router.
    def _run(self, query: str, **model_args: Any) -> dict[str, Any]:
        try:
            result = self.router.search(query, **self._params(model_args))
        except (SearchRefused, SearchFailed) as exc:
            raise self._refuse(exc) from exc
        return self._check(query, result)

    async def _arun(self, query: str, **model_args: Any) -> dict[str, Any]:
        try:
            result = await self.router.asearch(query, **self._params(model_args))
        except (SearchRefused, SearchFailed) as exc:
            raise self._refuse(exc) from exc
        return self._check(query, result)
