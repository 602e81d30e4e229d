"""smolagents: guarded, routed `web_search` and `tavily_search` tools.

`pip install ".[smolagents]"`, then:

```python
from smolagents import ToolCallingAgent
from searchfuse.integrations.smolagents import WebSearchTool

agent = ToolCallingAgent(tools=[WebSearchTool()], model=model)
```

Every call passes one [`Guard`][searchfuse.Guard] (cache, fuse, turn budget)
and is served by a [`Router`][searchfuse.Router]. A turn is one agent step:
the parallel tool calls of a `ToolCallingAgent` step (run in threads) and
every search of one `CodeAgent` code action. With `per_turn=1` one of them
searches and the others are refused; the next step may search again. A
refusal is the tool's output, a text that tells the model what happened
and what to do; it never raises, so the run goes on. smolagents' own web
tools pace at one request a second in one process and know nothing of a
429: here the first 429 stops searching and every later step is refused,
with nothing sent, until the cooldown ends.

smolagents hands a tool no context, so the tool finds the step it serves on
the calling thread's stack, innermost first:

- a running agent (the agent's own thread, or the worker thread it starts
  for each parallel call): the step is named by the last entry of the
  agent's memory, which a step writes only when it ends, so it is the same
  for every call of a step and new for the next one, across
  `run(reset=False)` too;
- a code action of smolagents' local Python interpreter (a `CodeAgent` runs
  each action in a worker thread of its own, where the agent is not on the
  stack): the step is named by the action's print buffer, which the
  interpreter makes anew for every action.

A managed agent is found before the agent that called it: its steps are its
own turns. Called outside any agent, the guard's burst rule decides: calls
that overlap are one turn.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, ClassVar

try:
    from smolagents import MultiStepAgent, Tool  # type: ignore[import-untyped]  # no types
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'searchfuse.integrations.smolagents needs smolagents: pip install ".[smolagents]"'
    ) from exc

from searchfuse._spend import conversation_scope
from searchfuse.guard import Guard, GuardState, turn
from searchfuse.integrations._names import ObjectNames
from searchfuse.integrations._search_tools import (
    TAVILY_SEARCH_DESCRIPTION,
    TAVILY_SEARCH_NAME,
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    call_of,
    reply,
)
from searchfuse.router import Router

__all__ = [
    "TavilySearchTool",
    "WebSearchTool",
    "running_agent",
    "step_turn_id",
    "task_conversation",
]

#: How far up the calling thread's stack the tool looks for the step it serves
#: (the interpreter of a CodeAgent nests a few frames per expression).
MAX_DEPTH = 400

_INTERPRETER = "smolagents.local_python_executor"


def _step_marker() -> tuple[object, MultiStepAgent | None] | None:
    """The object naming the step the calling thread serves, and its agent when on the stack."""
    frame = sys._getframe(1)
    for _ in range(MAX_DEPTH):
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            agent = frame.f_locals.get("self")
            if isinstance(agent, MultiStepAgent):
                steps = agent.memory.steps
                return (steps[-1], agent) if steps else None
        if "state" in code.co_varnames and frame.f_globals.get("__name__") == _INTERPRETER:
            state = frame.f_locals.get("state")
            printed = state.get("_print_outputs") if isinstance(state, dict) else None
            if printed is not None:
                return printed, None
        if frame.f_back is None:
            return None
        frame = frame.f_back
    return None


def running_agent() -> MultiStepAgent | None:
    """The innermost smolagents agent on the calling thread's stack, or `None`.

    `None` in the worker thread of a `CodeAgent`'s code action too: the
    agent waits on another thread.
    """
    found = _step_marker()
    return found[1] if found is not None else None


#: Names for the objects that name steps and tasks; they live as long as the
#: step's memory or code action keeps them.
_STEPS = ObjectNames()


def step_turn_id() -> str | None:
    """The turn id of the agent step the calling thread serves, or `None` outside any agent."""
    found = _step_marker()
    if found is None:
        return None
    return f"smolagents:step-{_STEPS.name(found[0])}"


def task_conversation() -> str | None:
    """The conversation budgets count a call against: the task in the running agent's
    memory (its first step, which `run(reset=False)` keeps), or `None` when no agent
    is on the calling thread's stack (a `CodeAgent`'s code action runs on another)."""
    agent = running_agent()
    steps = agent.memory.steps if agent is not None else None
    if not steps:
        return None
    return f"smolagents:task-{_STEPS.name(steps[0])}"


#: The inputs both tools share, as smolagents describes them (`nullable`: optional).
_COMMON_INPUTS: dict[str, dict[str, Any]] = {
    "query": {"type": "string", "description": "What to search for (at most 400 characters)."},
    "max_results": {
        "type": "integer",
        "minimum": 0,
        "maximum": 20,
        "description": "How many results, 0 to 20 (default 5).",
        "nullable": True,
    },
    "time_range": {
        "type": "string",
        "enum": ["day", "week", "month", "year"],
        "description": "Only results from the last day, week, month or year.",
        "nullable": True,
    },
    "include_domains": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Only results from these domains.",
        "nullable": True,
    },
    "exclude_domains": {
        "type": "array",
        "items": {"type": "string"},
        "description": "No results from these domains.",
        "nullable": True,
    },
}


def _topic(*topics: str) -> dict[str, Any]:
    return {
        "type": "string",
        "enum": list(topics),
        "description": f"The kind of search: {', '.join(topics)} (default general).",
        "nullable": True,
    }


def _argument_problem(inputs: dict[str, dict[str, Any]], params: dict[str, Any]) -> str | None:
    """What is wrong with the arguments the model passed, by the tool's `inputs`, or `None`."""
    for name, value in params.items():
        if value is None:
            continue
        spec = inputs[name]
        kind = spec["type"]
        if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{name} must be a whole number, not {value!r}"
        if kind == "integer" and not spec["minimum"] <= value <= spec["maximum"]:
            return f"{name} must be between {spec['minimum']} and {spec['maximum']}, not {value}"
        if kind == "string" and value not in spec["enum"]:
            return f"{name} must be one of {', '.join(spec['enum'])}, not {value!r}"
        if kind == "array" and (
            not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value)
        ):
            return f"{name} must be a list of domain names, not {value!r}"
    return None


class _GuardedSearch(Tool):  # type: ignore[misc]  # smolagents is untyped
    """The shell both tools share: a guard in front of the router, one turn per step."""

    output_type = "string"

    def __init__(self, router: Router | None = None, **guard_options: Any) -> None:
        super().__init__()
        if router is None:
            router = Router.from_env()
        guard_options.setdefault("min_interval", 0.0)
        #: The rules every call passes; share `budget=` / `fuse=` between tools to share them.
        self.guard = Guard(name=self.name, router=router, **guard_options)
        self.router = router

    def guard_state(self) -> GuardState:
        """The guard's state now: turn count, fuse, cooldown left, cache size, counters."""
        return self.guard.state()

    def _search(self, query: str, **params: Any) -> str:
        problem = _argument_problem(self.inputs, params)
        if problem is not None:
            # A CodeAgent calls the tool as Python, past smolagents' own argument
            # checks (which read types only): a bad argument is the model's to fix,
            # and costs no search.
            return f"Search not sent: {problem}. Fix the arguments and call the tool again."
        turn_id = step_turn_id()
        scope = turn(id=turn_id) if turn_id is not None else contextlib.nullcontext()
        with scope, conversation_scope(task_conversation()):
            return reply(self.guard, call_of(self.name, query, params))


class WebSearchTool(_GuardedSearch):
    """A smolagents `Tool` named `web_search`, guarded and served by `router`.

    `WebSearchTool(router=None, **guard_options)`: `router` defaults to
    [`Router.from_env`][searchfuse.Router.from_env]; the keyword arguments
    are [`Guard`][searchfuse.Guard]'s (`per_turn`, `cache`, `cooldown`,
    `checklist`, `budget`, `fuse`...; `min_interval`, default 0, matters only
    outside an agent).

    The inputs are the provider-neutral ones: `query`, `max_results`,
    `topic` (`general` or `news`), `time_range`, `include_domains` and
    `exclude_domains`. The output is the result as JSON, in Tavily's shape
    (`query`, `answer`, `results` with `title`, `url`, `content`, `score`)
    without the router's accounting, or the refusal's message.
    """

    name = WEB_SEARCH_NAME
    description = WEB_SEARCH_DESCRIPTION
    inputs: ClassVar[dict[str, dict[str, Any]]] = {
        "query": _COMMON_INPUTS["query"],
        "max_results": _COMMON_INPUTS["max_results"],
        "topic": _topic("general", "news"),
        "time_range": _COMMON_INPUTS["time_range"],
        "include_domains": _COMMON_INPUTS["include_domains"],
        "exclude_domains": _COMMON_INPUTS["exclude_domains"],
    }

    def forward(
        self,
        query: str,
        max_results: int | None = None,
        topic: str | None = None,
        time_range: str | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> str:
        """Search the web for `query` (smolagents calls this through the tool)."""
        return self._search(
            query,
            max_results=5 if max_results is None else max_results,
            topic=topic,
            time_range=time_range,
            include_domains=include_domains,
            exclude_domains=exclude_domains,
        )


class TavilySearchTool(_GuardedSearch):
    """A smolagents `Tool` named `tavily_search`: the MCP server's Tavily-shaped contract.

    The same as [`WebSearchTool`][searchfuse.integrations.smolagents.WebSearchTool],
    with Tavily's inputs: `query`, `max_results`, `search_depth`, `topic`
    (`general`, `news`, `finance`), `time_range`, `include_domains` and
    `exclude_domains`.
    """

    name = TAVILY_SEARCH_NAME
    description = TAVILY_SEARCH_DESCRIPTION
    inputs: ClassVar[dict[str, dict[str, Any]]] = {
        "query": _COMMON_INPUTS["query"],
        "max_results": _COMMON_INPUTS["max_results"],
        "search_depth": {
            "type": "string",
            "enum": ["basic", "advanced", "fast", "ultra-fast"],
            "description": "basic (1 credit, default), advanced (2 credits), fast or ultra-fast.",
            "nullable": True,
        },
        "topic": _topic("general", "news", "finance"),
        "time_range": _COMMON_INPUTS["time_range"],
        "include_domains": _COMMON_INPUTS["include_domains"],
        "exclude_domains": _COMMON_INPUTS["exclude_domains"],
    }

    def forward(
        self,
        query: str,
        max_results: int | None = None,
        search_depth: str | None = None,
        topic: str | None = None,
        time_range: str | None = None,
        include_domains: list[str] | None = None,
        exclude_domains: list[str] | None = None,
    ) -> str:
        """Search Tavily for `query` (smolagents calls this through the tool)."""
        return self._search(
            query,
            max_results=5 if max_results is None else max_results,
            search_depth=search_depth,
            topic=topic,
            time_range=time_range,
            include_domains=include_domains,
            exclude_domains=exclude_domains,
        )
