"""What a LangChain tool reported, and the guard every LangChain product shares.

Tools report errors in three ways: they raise, they return an error
`ToolMessage` (`BaseTool` turns a `ToolException` into one), or, like
`langchain_tavily.TavilySearch`, they return a *successful* result
`{"error": ValueError("Error 429: ...")}`. All three may mean "the backend
said 429", and the fuse must hear it; none of them may be cached.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from searchfuse import _answers, _clock
from searchfuse.errors import SearchFailed, SearchRefused
from searchfuse.guard import Call, Fuse, Guard, TurnBudget
from searchfuse.guard.cache import CacheKey
from searchfuse.guard.calls import Binder

__all__ = [
    "REFUSALS",
    "GuardParts",
    "Reported",
    "accept",
    "call_of",
    "collecting_refusals",
    "error_message",
    "make_guard",
    "message_for",
    "shared_result",
]

_ERROR_SHAPE = re.compile(r"""^\s*\{\s*['"]error['"]\s*:""")
_TOO_MANY = re.compile(r"too many requests", re.IGNORECASE)
_STATUS_IN_TEXT = re.compile(r"(?:error|status|http)\D{0,16}?\b([1-5]\d\d)\b", re.IGNORECASE)
_RETRY_AFTER_IN_TEXT = re.compile(r"retry[- _]?after\D{0,8}?(\d+(?:\.\d+)?)", re.IGNORECASE)

# The tool a call belongs to travels in the call's params under this name, so
# one Guard (one budget, one fuse, one cache) keys each tool's results apart.
# The router mapping ignores it; the cache key function strips it.
TOOL_PARAM = "searchfuse_tool"

# Refusals and failures raised inside a RoutedTavilySearch while a guarded call runs it.
# BaseTool turns them into error *text*; this box keeps the exception itself
# (with its exact `retry_after`) for the guard around the call.
REFUSALS: contextvars.ContextVar[list[SearchRefused | SearchFailed] | None] = (
    contextvars.ContextVar("searchfuse_langchain_refusals", default=None)
)

_ARGUMENTS = Binder(None, tool="")


class Reported(Exception):
    """A tool reported an error in its result instead of raising it.

    Raised inside the guard so the result is never cached; `status_code`
    (when the text names one) lets the guard recognise a 429 and the router
    react to a 401 or a 432 like to an HTTP answer. `result` is what the
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


def reported(result: Any, origin: str | None = None) -> Reported | None:
    """The error a tool reported in `result`, or `None` for a result that is no error."""
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
        status = _answers.status_of(error)
        retry_after = _answers.retry_after_of(error, _clock.now())
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
    return Reported(result, text, status_code=status, retry_after=retry_after, origin=origin)


def accept(result: Any, refusals: list[SearchRefused | SearchFailed], origin: str | None) -> Any:
    """`result` if it may be cached; otherwise raise what the guard must see instead."""
    if refusals:
        raise refusals[-1]
    if isinstance(result, Command):
        # A state update is this call's own business: hand it back, never cache it.
        raise Reported(result, "a Command", origin=origin)
    report = reported(result, origin)
    if report is not None:
        raise report
    return result


def _stringify(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def message_for(result: Any, call_id: str, name: str) -> ToolMessage | Command[Any]:
    """`result` as the answer to the tool call `call_id`."""
    if isinstance(result, ToolMessage):
        if result.tool_call_id == call_id:
            return result
        # A cache hit, or an identical call that shared a search in flight.
        return result.model_copy(update={"tool_call_id": call_id, "id": None})
    if isinstance(result, Command):
        return result
    return ToolMessage(content=_stringify(result), tool_call_id=call_id, name=name)


def error_message(call_id: str, name: str, text: str) -> ToolMessage:
    """The error `ToolMessage` answering `call_id` with `text` (a refusal's message)."""
    return ToolMessage(content=text, tool_call_id=call_id, name=name, status="error")


def shared_result(report: Reported, call_id: str, name: str) -> ToolMessage | Command[Any]:
    """What a call gets when the tool reported an error (or a Command) for it or its twin."""
    if isinstance(report.result, Command) and report.origin != call_id:
        return error_message(
            call_id,
            name,
            "The same search ran for another call of this reply; use the result it returned.",
        )
    return message_for(report.result, call_id, name)


def _per_tool(cache_key: CacheKey) -> CacheKey:
    def key(query: str, /, **params: Any) -> Hashable:
        tool = params.pop(TOOL_PARAM, "")
        return (tool, cache_key(query, **params))

    return key


def make_guard(*, cache_key: CacheKey, **options: Any) -> Guard:
    """The [`Guard`][searchfuse.Guard] one middleware or guarded tool uses for all its tools.

    `options` are [`Guard`][searchfuse.Guard]'s; the cache keeps each tool's results apart.
    """
    return Guard(name="langchain", cache_key=_per_tool(cache_key), **options)


@contextlib.contextmanager
def collecting_refusals() -> Iterator[list[SearchRefused | SearchFailed]]:
    """Collect the refusals a RoutedTavilySearch raises while the guarded call runs it."""
    refusals: list[SearchRefused | SearchFailed] = []
    token = REFUSALS.set(refusals)
    try:
        yield refusals
    finally:
        REFUSALS.reset(token)


class GuardParts:
    """The guard a LangChain product runs its calls through, and the state it shares."""

    _guard: Guard

    @property
    def guard(self) -> Guard:
        """The [`Guard`][searchfuse.Guard] every guarded call passes."""
        return self._guard

    @property
    def fuse(self) -> Fuse:
        """The fuse every guarded call shares (`fuse.remaining(now)`, `fuse.reset()`)."""
        return self._guard.fuse

    @property
    def budget(self) -> TurnBudget:
        """The turn budget every guarded call shares."""
        return self._guard.budget


def call_of(tool: str, arguments: Mapping[str, Any]) -> Call:
    """The guard's [`Call`][searchfuse.guard.Call] for a call of `tool` with these arguments."""
    query, params = _ARGUMENTS.read((), dict(arguments))
    params[TOOL_PARAM] = tool
    return Call(query, params, tool)
