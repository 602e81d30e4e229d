"""Spend control: `Budget` (how much, of what, whose, how often) and `spend_scope`
(whose spend a call is).

```python
router = Router.from_env(budgets=[
    Budget(10, unit="searches", per="conversation"),
    Budget(200, unit="credits", per="router", period="day"),
])
with spend_scope(user="alice", conversation="c-42"):
    router.search("...")
```

A `per="conversation"` or `per="user"` budget counts only the calls made
inside a `spend_scope` that names one; the integrations name the
conversation themselves (LangChain's thread, Hermes' session, the MCP
session, an OpenAI Agents or Pydantic AI run, a smolagents task).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, get_args

from searchfuse._format import amount

__all__ = [
    "DEFAULT_FORGET_AFTER",
    "Budget",
    "Per",
    "Period",
    "SpendScope",
    "Unit",
    "conversation_scope",
    "current_spend",
    "finite",
    "spend_scope",
]

Unit = Literal["searches", "credits", "usd"]
Per = Literal["conversation", "user", "router"]
Period = Literal["day", "month"]

_UNITS: tuple[str, ...] = get_args(Unit)
_PERS: tuple[str, ...] = get_args(Per)
_PERIODS: tuple[str, ...] = get_args(Period)
#: Longer spender names are cut (and told apart by a hash) in the store.
MAX_ID = 200
#: Seconds a spender of a budget without a period may go without searching (or
#: being refused) before its tally is forgotten: 30 days.
DEFAULT_FORGET_AFTER = 30 * 86400.0


def finite(value: float) -> bool:
    """`math.isfinite`, False for an int too large for a float (not an OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _choice(name: str, value: object, choices: tuple[str, ...], none: bool = False) -> None:
    if (value is None and none) or (isinstance(value, str) and value in choices):
        return
    allowed = " | ".join(repr(c) for c in choices) + (" | None" if none else "")
    raise ValueError(f"Budget({name}={value!r}): {name} must be one of {allowed}")


@dataclass(frozen=True)
class Budget:
    """At most `limit` of `unit` for each `per` (whose spend) in each `period`.

    Args:
        limit: how much may be spent (a finite number >= 0; a bool is refused).
        unit: `"searches"` (searches the provider served), `"credits"` (the
            provider's own unit: one per request where it has none) or `"usd"`
            (the credits times their price, see `Router(prices=...)`).
        per: `"conversation"`, `"user"` (as named by `spend_scope`) or
            `"router"` (every caller of every process sharing the store).
        period: `None` (never resets), `"day"` or `"month"` (UTC, on the
            router's clock).
        forget_after: for a `per="conversation"` or `"user"` budget without a
            period, the seconds a spender may go without a search before the store
            forgets what it spent (default 30 days; `None`: never, and the store
            keeps one row per spender for ever). Every search and every refusal
            starts the time again, so a conversation that goes on is never given a
            new budget. A budget with a period is forgotten when its period ends.
    """

    limit: float
    unit: Unit = "searches"
    per: Per = "conversation"
    period: Period | None = None
    forget_after: float | None = DEFAULT_FORGET_AFTER

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise TypeError(
                f"Budget(limit={limit!r}): the limit must be a number (such as 10), "
                f"not {type(limit).__name__}"
            )
        if not finite(limit) or limit < 0:
            raise ValueError(
                f"Budget(limit={limit!r}): the limit must be a finite number of 0 or more"
            )
        _choice("unit", self.unit, _UNITS)
        _choice("per", self.per, _PERS)
        _choice("period", self.period, _PERIODS, none=True)
        after = self.forget_after
        if after is not None and (
            isinstance(after, bool)
            or not isinstance(after, int | float)
            or not finite(after)
            or after <= 0
        ):
            raise ValueError(
                f"Budget(forget_after={after!r}): forget_after must be a finite number of "
                "seconds above 0, or None to keep every spender's tally for ever"
            )

    def describe(self) -> str:
        """`"10 searches per conversation"`, `"20 usd per router a month"`."""
        every = {None: "", "day": " a day", "month": " a month"}[self.period]
        return f"{amount(self.limit)} {self.unit} per {self.per}{every}"

    @classmethod
    def parse(cls, text: str) -> Budget:
        """The budget `text` describes, in `describe`'s words: `"10 searches per
        conversation"`, `"200 credits per router a day"`, `"20 usd per router a month"`
        (what `SEARCHFUSE_BUDGETS` holds, comma-separated). `ValueError` says what
        is wrong and how to write it."""
        shown = text.strip()
        words = [w if i == 0 else w.lower() for i, w in enumerate(text.split())]
        period = None
        if len(words) == 6 and words[4] == "a" and words[5] in _PERIODS:
            period, words = words[5], words[:4]
        if len(words) != 4 or words[2] != "per":
            raise ValueError(
                f"{shown!r} is not a budget: write LIMIT UNIT per WHOSE [a day | a month], "
                'such as "10 searches per conversation" or "200 credits per router a day"'
            )
        try:
            limit = float(words[0])
        except ValueError:
            raise ValueError(f"{shown!r}: the limit {words[0]!r} is not a number") from None
        if not finite(limit) or limit < 0:
            raise ValueError(
                f"{shown!r}: the limit {words[0]!r} must be a finite number of 0 or more"
            )
        try:
            return cls(int(limit) if limit.is_integer() else limit, words[1], words[3], period)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"{shown!r}: {exc}") from None


@dataclass(frozen=True)
class SpendScope:
    """Whose spend the calls inside a `spend_scope` are."""

    user: str | None = None
    conversation: str | None = None


_SCOPE: contextvars.ContextVar[SpendScope] = contextvars.ContextVar(
    "searchfuse_spend_scope",
    default=SpendScope(),  # noqa: B039 - frozen, never changed in place
)


def current_spend() -> SpendScope:
    """The `SpendScope` of the running code (empty outside any `spend_scope`)."""
    return _SCOPE.get()


def _spender(name: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(
            f"spend_scope({name}=...) takes a string id (or None), not {type(value).__name__}"
        )
    text = str(value)
    if not text.strip():
        raise ValueError(f"spend_scope({name}={value!r}): the id must not be blank")
    return text


class spend_scope:
    """Name the user and/or conversation whose spend the calls inside are.

    A contextvar scope: threads started with a copied context, asyncio tasks
    and executors that copy the context (LangChain's do) inherit it. A field
    left `None` keeps the enclosing scope's value, so an integration can name
    the conversation inside the application's `spend_scope(user=...)`.
    Works as `with spend_scope(...)` and `async with spend_scope(...)`.
    """

    def __init__(self, *, user: str | None = None, conversation: str | None = None) -> None:
        self.user = _spender("user", user)
        self.conversation = _spender("conversation", conversation)
        self._tokens: list[contextvars.Token[SpendScope]] = []

    def __enter__(self) -> SpendScope:
        outer = _SCOPE.get()
        scope = SpendScope(
            user=self.user if self.user is not None else outer.user,
            conversation=self.conversation if self.conversation is not None else outer.conversation,
        )
        self._tokens.append(_SCOPE.set(scope))
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _SCOPE.reset(self._tokens.pop())

    async def __aenter__(self) -> SpendScope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def conversation_scope(conversation: str | None) -> spend_scope | contextlib.nullcontext[None]:
    """What an integration enters around a call: `spend_scope(conversation=...)` naming
    the framework's own conversation (its run, task or session), or nothing when the
    framework gave none. An application's own `spend_scope(conversation=...)` around
    the call wins: the integration names a conversation only where none is named."""
    if conversation is None or current_spend().conversation is not None:
        return contextlib.nullcontext()
    return spend_scope(conversation=conversation)
