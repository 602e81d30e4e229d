"""The `Provider` protocol: what the router needs to know of a search API, and nothing else.

The router drives a provider; it never branches on a provider's name. A
provider builds a request from a checked body, reads an answer into an
outcome of the reaction table (with its Retry-After), normalises a result
into Tavily's shape, says what a request costs in its own unit, gives each
key's request rate, and may offer a free probe of a key. What an answer's
headers say of the key beyond the answer itself (Brave's per-second and
per-month figures) comes back from `observe`; a parameter the provider cannot
honour is an [`Unsupported`][searchfuse.errors.Unsupported] from `check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from searchfuse._answers import Outcome

__all__ = ["Answer", "Classified", "Figures", "Observed", "Provider", "Rate", "Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request, without its key: the provider's `headers(key)` add that."""

    method: str
    path: str
    #: A JSON body (a `JSONBody` is sent as the text it was encoded to once).
    body: Mapping[str, Any] | None = None
    #: Query parameters (for APIs searched with `GET`).
    params: Mapping[str, str] | None = None


class Answer(Protocol):
    """What a provider reads of an answer: its status, headers and body."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


@dataclass(frozen=True)
class Classified:
    """An answer reduced to what the reaction table needs."""

    outcome: Outcome
    #: The HTTP status, `None` for a timeout or a connection error.
    status: int | None
    #: The provider's error text, one short line (`""` for a success).
    detail: str
    #: Seconds the server asked to wait (parsed and floored, not clamped), or `None`.
    retry_after: float | None
    #: What the same answer may mean instead, when the provider does not say
    #: which: a Serper 429 is a rate limit *or* credits run out
    #: (`outcome=RATE_LIMITED`, `alternative=EXHAUSTED`). `None`: unambiguous.
    alternative: Outcome | None = None
    #: With `outcome=EXHAUSTED`: when the quota comes back (epoch seconds), where the
    #: provider says (Brave's month ends on its own cycle, `X-RateLimit-Reset`).
    #: `None`: when a probe shows headroom or the calendar month rolls.
    until: float | None = None


@dataclass(frozen=True)
class Rate:
    """A key's request rate: at most `requests` in any `window` seconds."""

    requests: int
    window: float


@dataclass(frozen=True)
class Figures:
    """What a free probe tells of a key and its account (`None`: not said)."""

    key_usage: float | None = None
    key_limit: float | None = None
    search_usage: float | None = None
    current_plan: str | None = None
    plan_usage: float | None = None
    plan_limit: float | None = None
    paygo_usage: float | None = None
    paygo_limit: float | None = None


@dataclass(frozen=True)
class Observed:
    """What an answer's headers say of its key, whatever the answer was.

    Brave sends its per-second and per-month figures on every answer; the
    router corrects the key's pace from `rate` and its month from `figures`
    (`key_limit` / `key_usage`), and treats the key as out of quota until
    `exhausted_until` (epoch seconds) when the month's remainder is 0.
    """

    rate: Rate | None = None
    figures: Figures | None = None
    exhausted_until: float | None = None


@runtime_checkable
class Provider(Protocol):
    """A search API the router drives (Tavily is the first).

    Attributes:
        name: the provider's name in configuration (`"tavily"`).
        title: its name in messages (`"Tavily"`).
        default_base_url: its public address.
        base_url_env: the environment variable that overrides the address.
        endpoints: the paths a router may `POST` to (the first is the search).
        probe_rate: how often the free probe may be asked per key (`None`: no probe).
        unit: what `cost` counts (`"credits"`, `"usd"`, `"requests"`).
        key_is_url: `True` when a "key" is the address of an instance (SearXNG):
            requests go to that URL and carry no credential.
    """

    name: str
    title: str
    default_base_url: str
    base_url_env: str
    endpoints: tuple[str, ...]
    probe_rate: Rate | None
    unit: str
    key_is_url: bool

    def headers(self, key: str) -> Mapping[str, str]:
        """The headers that carry `key` (the provider's auth scheme)."""
        ...

    def check(self, endpoint: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """`body` checked and ready to send (a `BadRequest` with `sent=False` for
        what the provider would refuse); done once, before any key is granted."""
        ...

    def build(self, endpoint: str, body: Mapping[str, Any]) -> Request:
        """The request for a checked `body`."""
        ...

    def classify(self, answer: Answer, now: float) -> Classified:
        """The reaction-table row for `answer`, with its Retry-After."""
        ...

    def normalize(
        self, endpoint: str, data: dict[str, Any], body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """A successful answer in Tavily's result shape (`body`: the checked request,
        for what the provider applies locally, such as a result count)."""
        ...

    def cost(self, endpoint: str, body: Mapping[str, Any], data: dict[str, Any] | None) -> float:
        """What the request costs in the provider's unit: expected (`data=None`),
        or as the answer says (its own figure when plausible)."""
        ...

    def rate(self, key: str) -> Rate:
        """The request rate the provider publishes for `key`."""
        ...

    def probe(self) -> Request | None:
        """The free request that checks a key (`None`: every request costs)."""
        ...

    def figures(self, answer: Answer) -> Figures | None:
        """What a probe's successful answer says of the key (`None`: unreadable)."""
        ...

    def observe(self, answer: Answer, now: float) -> Observed | None:
        """What any answer's headers say of the key (`None`: nothing)."""
        ...
