"""`RoutedTavilySearch`, a `TavilySearch` served by a [`Router`][searchfuse.Router], and
`RoutedWebSearch`, its provider-neutral sibling `web_search`, served over the whole chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from langchain_core.tools import ArgsSchema, BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from searchfuse._spend import conversation_scope
from searchfuse.errors import SearchFailed, SearchRefused
from searchfuse.guard.delegation import TAVILY_PARAMS
from searchfuse.integrations._search_tools import (
    WEB_SEARCH_DESCRIPTION,
    WEB_SEARCH_NAME,
    unforeseen,
)
from searchfuse.integrations.langchain._conversation import config_conversation
from searchfuse.integrations.langchain._reports import REFUSALS

__all__ = [
    "TAVILY_SEARCH_DESCRIPTION",
    "RoutedTavilySearch",
    "RoutedWebSearch",
    "TavilySearchInput",
    "WebSearchInput",
]

#: The description [`RoutedTavilySearch`][searchfuse.integrations.langchain.RoutedTavilySearch]
#: shows the model.
TAVILY_SEARCH_DESCRIPTION = (
    "A web search engine for current, accurate and citable results. Useful when you "
    "need facts or news you do not already have. Returns JSON with the query, an "
    "Input should be a search query."
)


class TavilySearchInput(BaseModel):
    """The arguments of `tavily_search`, as `langchain_tavily.TavilySearch` takes them."""

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


class WebSearchInput(BaseModel):
    """The arguments of `web_search`: what every search provider can honour."""

    query: str = Field(description="The search query.")
    topic: Literal["general", "news"] | None = Field(
        default="general", description="'general' for most queries, 'news' for current events."
    )
    time_range: Literal["day", "week", "month", "year"] | None = Field(
        default=None,
        description="Only content published in this recent period; only when asked for.",
    )
    include_domains: list[str] | None = Field(
        default=None, description="Only return results from these domains (e.g. ['nasa.gov'])."
    )
    exclude_domains: list[str] | None = Field(
        default=None, description="Never return results from these domains."
    )


# What the router adds to an answer (and a provider's own JSON beside Tavily's shape):
# metadata for people, not for the model.
_FOR_PEOPLE = ("searchfuse", "usage", "raw")


def _router_from_env() -> Any:
    from searchfuse.router import Router

    return Router.from_env()


class _RoutedSearch(BaseTool):
    """A search tool whose searches a [`Router`][searchfuse.Router] serves: the content is
    the answer in Tavily's shape, searchfuse's metadata the artifact, a refusal an error
    tool message."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    handle_tool_error: bool | str | Callable[[ToolException], str] | None = True
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    #: The router that serves the searches (anything with `search`/`asearch`).
    router: Any = Field(default_factory=_router_from_env, exclude=True)
    #: Results per search (5 unless set).
    max_results: int | None = None

    def _params(self, model_args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _refuse(exc: SearchRefused | SearchFailed) -> ToolException:
        # A guard around this tool sees the error itself, not just its text: a
        # failed search is never cached, and one never sent spends no search.
        box = REFUSALS.get()
        if box is not None:
            box.append(exc)
        return ToolException(exc.message if isinstance(exc, SearchRefused) else str(exc))

    @staticmethod
    def _check(query: str, result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The answer for the model, as TavilySearch gives it; the rest for the artifact.

        The router asks Tavily for `usage` (credits, to keep its figures
        right), adds a `searchfuse` entry, and keeps another provider's own
        JSON under `raw`; TavilySearch's content has none of them, so they go
        to the artifact.
        """
        content = {k: v for k, v in result.items() if k not in _FOR_PEOPLE}
        if not content.get("results"):
            raise ToolException(
                f"No search results found for {query!r}. Try a broader or differently "
                "worded query, or drop the domain and time filters."
            )
        return content, {k: result[k] for k in _FOR_PEOPLE if k in result}

    # The schema names the model's arguments; they arrive as keyword arguments, and
    # only the tool's own parameters pass on to the router.
    def _run(self, query: str, **model_args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            with conversation_scope(config_conversation()):
                result = self.router.search(query, **self._params(model_args))
        except (SearchRefused, SearchFailed) as exc:
            raise self._refuse(exc) from exc
        except Exception as exc:  # never into the ToolNode: it would end the run
            raise ToolException(unforeseen(exc, tool=self.name, router=self.router)) from exc
        return self._check(query, result)

    async def _arun(self, query: str, **model_args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            with conversation_scope(config_conversation()):
                result = await self.router.asearch(query, **self._params(model_args))
        except (SearchRefused, SearchFailed) as exc:
            raise self._refuse(exc) from exc
        except Exception as exc:  # never into the ToolNode: it would end the run
            raise ToolException(unforeseen(exc, tool=self.name, router=self.router)) from exc
        return self._check(query, result)


class RoutedWebSearch(_RoutedSearch):
    """`web_search` served over a [`Router`][searchfuse.Router]'s whole chain.

    ```python
    from searchfuse import Router
    from searchfuse.integrations.langchain import RoutedWebSearch

    search = RoutedWebSearch(router=Router.from_config("config/keys.json"), max_results=3)
    ```

    The provider-neutral sibling of
    [`RoutedTavilySearch`][searchfuse.integrations.langchain.RoutedTavilySearch]: its
    arguments ([`WebSearchInput`][searchfuse.integrations.langchain.WebSearchInput]) are
    what every provider can honour, and whichever provider serves, the content is in
    Tavily's shape. Instance settings override the model's arguments.
    """

    name: str = WEB_SEARCH_NAME
    description: str = WEB_SEARCH_DESCRIPTION
    args_schema: Annotated[ArgsSchema | None, SkipValidation()] = WebSearchInput

    #: Overrides the model's `topic`.
    topic: Literal["general", "news"] | None = None
    #: Overrides the model's `time_range`.
    time_range: Literal["day", "week", "month", "year"] | None = None
    #: Overrides the model's `include_domains`.
    include_domains: list[str] | None = None
    #: Overrides the model's `exclude_domains`.
    exclude_domains: list[str] | None = None

    def _params(self, model_args: dict[str, Any]) -> dict[str, Any]:
        names = ("topic", "time_range", "include_domains", "exclude_domains")
        params = {k: model_args.get(k) for k in names}
        params.update({k: getattr(self, k) for k in names if getattr(self, k) not in (None, [])})
        params = {k: v for k, v in params.items() if v not in (None, [])}
        params["max_results"] = self.max_results if self.max_results is not None else 5
        return params


class RoutedTavilySearch(_RoutedSearch):
    """`tavily_search` served by a [`Router`][searchfuse.Router]: a drop-in for `TavilySearch`.

    ```python
    from searchfuse import Router
    from searchfuse.integrations.langchain import RoutedTavilySearch

    search = RoutedTavilySearch(router=Router.from_config("config/keys.json"), max_results=3)
    ```

    Same name (`tavily_search`) and arguments
    ([`TavilySearchInput`][searchfuse.integrations.langchain.TavilySearchInput]) as
    `langchain_tavily.TavilySearch`, and the same content: Tavily's JSON as a dict. What
    searchfuse adds (which masked key served it, or that a fallback did) is the tool message's
    `artifact`, never model-visible content. Instance settings (`max_results`, `topic`,
    `include_answer`...) override the model's arguments, as in
    `TavilySearch`. Without `router` the keys come from the environment
    ([`Router.from_env`][searchfuse.Router.from_env]).

    The router picks the key with the most quota left and skips cooling,
    invalid and exhausted ones. A 429 stops the search (no other key is
    tried) and every search is refused until the cooldown ends; refusals
    and errors become an error tool message with a model-facing text, never
    an exception. Combine it with
    [`SearchFuseMiddleware`][searchfuse.integrations.langchain.SearchFuseMiddleware] (or
    `guard_tool`) for the per-reply limit and the cache.
    """

    name: str = "tavily_search"
    description: str = TAVILY_SEARCH_DESCRIPTION
    args_schema: Annotated[ArgsSchema | None, SkipValidation()] = TavilySearchInput
    #: Overrides the model's `topic`.
    topic: Literal["general", "news", "finance"] | None = None
    #: Overrides the model's `search_depth`.
    search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] | None = None
    #: Overrides the model's `include_domains`.
    include_domains: list[str] | None = None
    #: Overrides the model's `exclude_domains`.
    exclude_domains: list[str] | None = None
    #: Overrides the model's `include_images`.
    include_images: bool | None = None
    #: Overrides the model's `time_range`.
    time_range: Literal["day", "week", "month", "year"] | None = None
    #: Ask Tavily for a short answer (`True`, `"basic"`, `"advanced"`).
    include_answer: bool | Literal["basic", "advanced"] | None = None
    #: Ask for each result's cleaned page content (`True`, `"markdown"`, `"text"`).
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
