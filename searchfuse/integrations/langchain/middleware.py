"""`SearchFuseMiddleware`: one model reply is one turn, for `create_agent`.

How it sits with LangChain's own middleware, in either order:

- The reply's search calls are decided in `after_model`, but the refusals
  are handed out when a call runs (`wrap_tool_call`), never as messages of
  their own: a call another middleware already answered
  (`ToolCallLimitMiddleware`) never runs, so no call gets two answers.
- The guard runs where the tool runs: `wrap_tool_call` swaps the request's
  tool for a guarded one, so middleware between this one and the tool
  (`ToolRetryMiddleware`) calls the guarded tool. A 429 trips the fuse and
  comes back as an error `ToolMessage`, which is not an exception a retry
  middleware retries, and a retry through the guard would be refused by the
  fuse before any request.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextlib import ExitStack
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from searchfuse import _clock
from searchfuse._spend import conversation_scope
from searchfuse.errors import SearchRefused
from searchfuse.guard import Fuse, RouterLike, TurnBudget, search_key, turn
from searchfuse.guard.cache import CacheKey
from searchfuse.guard.core import DEFAULT_MIN_INTERVAL
from searchfuse.guard.fuse import DEFAULT_COOLDOWN
from searchfuse.integrations.langchain._conversation import (
    RUN_KEY,
    config_conversation,
    run_name,
)
from searchfuse.integrations.langchain._reports import (
    GuardParts,
    call_of,
    error_message,
    make_guard,
)
from searchfuse.integrations.langchain.guard_tool import GuardedTool

__all__ = ["DEFAULT_SEARCH_TOOLS", "SearchFuseMiddleware", "ToolSelection"]

logger = logging.getLogger("searchfuse.integrations.langchain")

#: Tool names [`SearchFuseMiddleware`][searchfuse.integrations.langchain.SearchFuseMiddleware]
#: guards unless told otherwise: `tavily_search`, `web_search`, `tavily_search_results_json`,
#: `my_web_search`... (not `tavily_extract`: an extract is not a search).
DEFAULT_SEARCH_TOOLS = re.compile(r"(?:^|_)(?:tavily|web)_?search(?:_|$)", re.IGNORECASE)

#: Which tools a middleware guards: names, tools, or a predicate on the name.
ToolSelection = Iterable[str | BaseTool] | Callable[[str], bool] | None

#: Refusals decided for calls that have not run yet, at most this many remembered.
REMEMBERED_REFUSALS = 4096


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


def _messages(state: Any) -> list[Any]:
    if isinstance(state, Mapping):
        return list(state.get("messages") or ())
    return list(getattr(state, "messages", None) or ())


def _latest_reply(messages: list[Any]) -> AIMessage | None:
    """The model reply being decided: the last AI message, followed by tool answers only.

    Middleware whose ``after_model`` ran before this one may have answered
    some calls already (``ToolCallLimitMiddleware`` appends a ``ToolMessage``
    per call over its limit); the reply is still the AI message before them.
    """
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
        if not isinstance(message, ToolMessage):
            return None
    return None


def _owning_turn(request: ToolCallRequest) -> str | None:
    call_id = request.tool_call.get("id")
    for message in reversed(_messages(request.state)):
        if isinstance(message, AIMessage) and any(
            call.get("id") == call_id for call in message.tool_calls
        ):
            return _turn_of_message(message)
    return None


def _call_scope(request: ToolCallRequest, prepared: ToolCallRequest | None) -> ExitStack:
    """The scopes a tool call runs in: its conversation, and its reply's turn when guarded."""
    scopes = ExitStack()
    scopes.enter_context(conversation_scope(config_conversation(None, request.state)))
    reply = _owning_turn(request) if prepared is not None else None
    if reply is not None:
        scopes.enter_context(turn(id=reply))
    return scopes


class _RunState(AgentState[Any]):
    """The agent state, plus the name of the run (not kept in a thread's checkpoints)."""

    searchfuse_run: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


class SearchFuseMiddleware(GuardParts, AgentMiddleware[AgentState[Any], Any, Any]):
    """Agent middleware for `create_agent` that keeps an agent within its search budget.

    ```python
    from langchain.agents import create_agent
    from searchfuse.integrations.langchain import SearchFuseMiddleware

    agent = create_agent(model, tools=[tavily_search], middleware=[SearchFuseMiddleware()])
    ```

    Each model reply is one turn. After the model answers, the search calls
    of its AI message are decided together: up to `per_turn` distinct
    uncached searches run (cache hits and repeats of an allowed query are
    free); the others are answered with an error `ToolMessage` telling the
    model to use the result it gets or to combine queries, and never reach
    the tool. While a cooldown runs every uncached search of the reply is
    refused with the seconds left.

    Each call that runs goes through a [`Guard`][searchfuse.Guard] at the
    tool: the cache, the fuse, the turn budget, then the backend, which is
    `router` when one is given (the tool's arguments are mapped onto
    `router.search`) and otherwise the tool itself. A 429 trips the fuse,
    whether the tool raised it or reported it in its result
    (`langchain_tavily`'s `{"error": ...}`); refusals come back as
    `ToolMessage(status="error")`, never as an exception into the
    `ToolNode`. Other exceptions from the tool propagate as they would
    without the middleware. It combines with `ToolRetryMiddleware`,
    `ToolCallLimitMiddleware` and `ModelRetryMiddleware` in any order:
    a 429 is never retried and no call gets two answers.

    Args:
        tools: Which tool calls are searches: tool names, tools, or a
            predicate on the name. Default: names like `tavily_search`
            and `web_search` (`DEFAULT_SEARCH_TOOLS`).
        per_turn: Searches per model reply, across all guarded tools
            (`None`: unlimited).
        router: Serve every guarded call with this router instead of the
            tool's own backend (several keys, lazy usage sync).
        cache: `True` (a 15-minute TTL cache of 256 entries), `False`,
            `"shared"` (with a router: the router's store) or a cache
            instance; keyed by tool name and arguments.
        cache_key: `(query, **arguments) -> key` (see
            [`search_key`][searchfuse.guard.search_key]).
        cooldown: Seconds to refuse after a 429 without a usable Retry-After.
        budget: A [`TurnBudget`][searchfuse.TurnBudget] to share.
        fuse: A [`Fuse`][searchfuse.Fuse] to share (for example with
            a guarded tool outside the agent).
        clock: Zero-argument callable returning epoch seconds.

    Budgets per conversation (`Router(budgets=...)`) count a call against
    its thread (`config["configurable"]["thread_id"]`), else against its
    agent run: the `run_id` given in the config, else a name the middleware
    gives each run as it starts. A subagent called as a tool spends from
    the outer run's conversation; an application's own
    `spend_scope(conversation=...)` wins over both.
    """

    state_schema = _RunState

    def __init__(
        self,
        *,
        tools: ToolSelection = None,
        per_turn: int | None = 1,
        router: RouterLike | None = None,
        cache: bool | str | MutableMapping[Any, Any] = True,
        cache_key: CacheKey = search_key,
        cooldown: float = DEFAULT_COOLDOWN,
        budget: TurnBudget | None = None,
        fuse: Fuse | None = None,
        clock: _clock.Clock | None = None,
    ) -> None:
        super().__init__()
        self._guards = _tool_matcher(tools)
        self._guard = make_guard(
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
        self._lock = threading.Lock()
        self._refusals: OrderedDict[str, SearchRefused] = OrderedDict()

    def guards(self, tool_name: str) -> bool:
        """Whether calls of the tool `tool_name` are guarded."""
        return bool(self._guards(tool_name))

    def cooldown_left(self) -> float:
        """Seconds until searches may reach the backend again (`0.0`: no cooldown)."""
        return self._guard.fuse.remaining(self._guard.now())

    # -- one decision per model reply ---------------------------------------------------

    def decide(self, message: AIMessage, *, answered: Iterable[str] = ()) -> list[ToolMessage]:
        """The refusals for the search calls of `message`, one error message each.

        Calls in `answered` (already answered by another middleware) are
        left out. The refusals are remembered and handed out when each
        refused call runs
        ([`wrap_tool_call`][searchfuse.integrations.langchain.SearchFuseMiddleware.wrap_tool_call]);
        the calls not refused run through the guard.
        """
        skip = set(answered)
        calls = [
            call
            for call in message.tool_calls
            if self.guards(call["name"]) and str(call.get("id")) not in skip
        ]
        if not calls:
            return []
        decisions = self._guard.decide(
            [call_of(call["name"], call["args"]) for call in calls],
            turn_id=_turn_of_message(message),
        )
        refusals: list[ToolMessage] = []
        with self._lock:
            for call, refusal in zip(calls, decisions, strict=True):
                if refusal is None:
                    continue
                call_id = str(call.get("id"))
                self._refusals[call_id] = refusal
                refusals.append(error_message(call_id, call["name"], refusal.message))
            while len(self._refusals) > REMEMBERED_REFUSALS:
                self._refusals.popitem(last=False)
        return refusals

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Decide the model reply's search calls at once (handed out as each call runs)."""
        messages = _messages(state)
        reply = _latest_reply(messages)
        if reply is None or not reply.tool_calls:
            return None
        answered = (m.tool_call_id for m in messages if isinstance(m, ToolMessage))
        self.decide(reply, answered=answered)
        return None

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """The same as
        [`after_model`][searchfuse.integrations.langchain.SearchFuseMiddleware.after_model] (it does
        no I/O)."""
        return self.after_model(state, runtime)

    # -- the run -------------------------------------------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        """Name the run starting now: the conversation of its calls without a thread."""
        return {RUN_KEY: run_name()}

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any]:
        """The same as
        [`before_agent`][searchfuse.integrations.langchain.SearchFuseMiddleware.before_agent]."""
        return self.before_agent(state, runtime)

    # -- each call that runs -------------------------------------------------------------

    def _prepare(self, request: ToolCallRequest) -> ToolMessage | ToolCallRequest | None:
        """The refusal decided for this call, the request with its tool guarded, or `None`."""
        call = request.tool_call
        if not self.guards(call["name"]):
            return None
        call_id = str(call.get("id"))
        with self._lock:
            refusal = self._refusals.pop(call_id, None)
        if refusal is not None:
            return error_message(call_id, call["name"], refusal.message)
        tool = request.tool
        if tool is None:
            return None  # an unknown tool: the ToolNode answers it
        if not isinstance(tool, GuardedTool):
            tool = GuardedTool.over(tool, self._guard)
        return request.override(tool=tool)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Hand out a decided refusal, or run the call, tool guarded, in its reply's turn.

        Every call (a search or not) runs in the conversation of its thread or
        run, so a subagent called as a tool spends from the outer run's budgets.
        """
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        with _call_scope(request, prepared):
            return handler(prepared or request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The same as
        [`wrap_tool_call`][searchfuse.integrations.langchain.SearchFuseMiddleware.wrap_tool_call],
        on the running event loop."""
        prepared = self._prepare(request)
        if isinstance(prepared, ToolMessage):
            return prepared
        with _call_scope(request, prepared):
            return await handler(prepared or request)
