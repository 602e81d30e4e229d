"""``import searchfuse`` must not import any agent framework: they are optional extras."""

from __future__ import annotations

import subprocess
import sys

# Top-level modules of the frameworks: LangChain's, LangGraph's, and the ones
# hermes-agent installs (it puts generic names such as ``agent`` and ``tools``
# at the top of site-packages).
FRAMEWORK_PREFIXES = (
    "langchain",
    "langgraph",
    "hermes",
    "mcp",
    "agents",
    "openai",
    "tavily",
    "pydantic_ai",
    "smolagents",
    "huggingface_hub",
)
HERMES_MODULES = frozenset(
    {"agent", "tools", "plugins", "run_agent", "model_tools", "toolsets", "gateway", "cron"}
)


def modules_after(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.split()


def frameworks_in(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if name.startswith(FRAMEWORK_PREFIXES) or name.split(".")[0] in HERMES_MODULES
    ]


def test_importing_searchfuse_imports_no_framework() -> None:
    modules = modules_after(
        "import searchfuse, searchfuse.integrations, searchfuse.testing, searchfuse.tavily"
    )

    assert "searchfuse" in modules
    assert frameworks_in(modules) == []


def test_the_integrations_do_import_their_frameworks() -> None:
    # The check above would pass vacuously if the module names were wrong.
    modules = modules_after(
        "import searchfuse.integrations.langchain, searchfuse.integrations.hermes, "
        "searchfuse.integrations.pydantic_ai, searchfuse.integrations.smolagents"
    )

    assert {
        "langchain_core",
        "langgraph",
        "agent.web_search_provider",
        "pydantic_ai",
        "smolagents",
    } <= set(modules)
