"""Which conversation a LangChain call's spend counts against: its thread, else its run.

LangGraph names a conversation by `config["configurable"]["thread_id"]` (the
key its checkpointers keep a thread's state under), so a call of that thread
counts against `langchain:thread:<thread_id>`. Without a thread, the call
counts against its run: the `run_id` the caller gave LangGraph (LangGraph's
servers always give one), else, under
[`SearchFuseMiddleware`][searchfuse.integrations.langchain.SearchFuseMiddleware],
a name the middleware gives each agent run as it starts (`before_agent`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig, ensure_config

__all__ = ["RUN_KEY", "config_conversation", "run_name", "thread_conversation"]

#: The agent state's key for the run name the middleware gives an agent run.
RUN_KEY = "searchfuse_run"


def thread_conversation(config: RunnableConfig | None = None) -> str | None:
    """`langchain:thread:<thread_id>` from the run's config, or `None` without a thread.

    `config` is the config a tool was invoked with; the running one
    (LangChain's context) fills what it leaves out.
    """
    configurable = ensure_config(config).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or not str(thread).strip():
        return None
    return f"langchain:thread:{thread}"


def _given_run_id() -> str | None:
    """The `run_id` LangGraph's running graph was given, or `None`."""
    try:
        from langgraph.runtime import get_runtime

        runtime: Any = get_runtime()
    except (ImportError, RuntimeError, KeyError):
        return None  # not inside a LangGraph run
    run_id = getattr(getattr(runtime, "execution_info", None), "run_id", None)
    return str(run_id) if run_id else None


def run_name() -> str:
    """The name of the agent run starting now: `langchain:run:<run_id>` (or a random id)."""
    return f"langchain:run:{_given_run_id() or uuid.uuid4().hex}"


def config_conversation(config: RunnableConfig | None = None, state: Any = None) -> str | None:
    """The conversation of a call: its thread, else its run (`None` when it has neither)."""
    thread = thread_conversation(config)
    if thread is not None:
        return thread
    named = state.get(RUN_KEY) if isinstance(state, Mapping) else getattr(state, RUN_KEY, None)
    if isinstance(named, str):
        return named
    run_id = _given_run_id()
    return f"langchain:run:{run_id}" if run_id else None
