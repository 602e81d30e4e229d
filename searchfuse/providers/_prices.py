"""List prices of every provider, dated and sourced, and how a price is overridden.

A budget in `usd` turns a request's cost into dollars through these figures;
a budget in `credits` counts the provider's own unit (a Tavily or Serper
credit; one per request for a provider that has no credits). Prices change:
`Router(prices={"tavily": 0.0075})` (USD per unit, per provider) and
`keys[].price` (per key, in keys.json) replace them, for a plan cheaper
than the list or a contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from searchfuse._spend import finite
from searchfuse._wire import figure

__all__ = [
    "LIST_PRICES",
    "MAX_STATED_USD",
    "PRICES_AS_OF",
    "ListPrice",
    "check_price",
    "check_prices",
    "key_price",
    "price_of",
    "stated_usd",
]

#: When the figures below were read from their sources.
PRICES_AS_OF = "2026-12-01"
#: No single request costs more dollars than this; an answer stating more is not
#: believed (a garbled figure must not spend a whole budget at once).
MAX_STATED_USD = 5.0


@dataclass(frozen=True)
class ListPrice:
    """USD per `unit` for one provider and request kind, with where it was read."""

    usd: float
    #: `"credit"` (the answer says how many), or `"request"` (one per request).
    unit: str
    source: str


_TAVILY = "https://docs.tavily.com/documentation/api-credits (pay-as-you-go)"

#: By provider, then request kind (`"search"`, or an endpoint's name).
LIST_PRICES: Mapping[str, Mapping[str, ListPrice]] = {
    "tavily": {
        # A basic search is one credit, an advanced one two; the others by the page.
        kind: ListPrice(0.008, "credit", _TAVILY)
        for kind in ("search", "extract", "crawl", "map")
    },
    "exa": {
        "search": ListPrice(0.007, "request", "https://exa.ai/pricing (search, up to 10 results)"),
    },
    "brave": {
        "search": ListPrice(0.005, "request", "https://brave.com/search/api/ (search plan)"),
    },
    "serper": {
        "search": ListPrice(0.001, "credit", "https://serper.dev/ (50,000 credits for 50 USD)"),
    },
    "searxng": {
        "search": ListPrice(0.0, "request", "self-hosted: no charge per request"),
    },
}


def check_price(value: object, where: str) -> float:
    """A price in USD per unit: a finite number >= 0 (not a bool); else a
    ValueError naming `where` and the fix."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{where} must be a price in USD per unit (a number such as 0.008), "
            f"not {type(value).__name__}"
        )
    if not finite(value) or value < 0:
        raise ValueError(
            f"{where} must be a finite price of 0 or more in USD per unit (such as 0.008), "
            f"not {value!r}"
        )
    return float(value)


def key_price(value: Any, source: str, where: str) -> float | None:
    """`keys[].price` in a keys file: `None`, or a price (else a ConfigError naming it)."""
    from searchfuse.errors import ConfigError

    if value is None:
        return None
    try:
        return check_price(value, where)
    except (TypeError, ValueError):
        raise ConfigError(
            source,
            where,
            f"expected a price in USD per credit (a finite number of 0 or more), got {value!r}",
            "write the price your plan charges, such as 0.0075, or remove the field "
            "for the list price",
        ) from None


def stated_usd(data: Mapping[str, Any] | None) -> float | None:
    """The dollars an answer says it cost (Exa's `costDollars.total`), when plausible:
    a number from 0 to `MAX_STATED_USD` (not a bool, a string, or an integer too
    large for a float). Else `None`, and the price it was expected to cost stands."""
    cost = data.get("costDollars") if isinstance(data, Mapping) else None
    total = figure(cost.get("total")) if isinstance(cost, Mapping) else None
    return total if total is not None and total <= MAX_STATED_USD else None


def check_prices(prices: Mapping[str, Any] | None) -> dict[str, float]:
    """`Router(prices=...)`: provider name -> USD per unit, each checked."""
    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise TypeError(
            'prices must map provider names to USD per unit, such as {"tavily": 0.008}, '
            f"not {type(prices).__name__}"
        )
    out = {}
    for name, value in prices.items():
        if name not in LIST_PRICES:
            known = ", ".join(sorted(LIST_PRICES))
            raise ValueError(f"prices names an unknown provider {name!r} (known: {known})")
        out[name] = check_price(value, f"prices[{name!r}]")
    return out


def price_of(
    provider: str,
    kind: str,
    overrides: Mapping[str, float],
    key_price: float | None = None,
) -> tuple[float, bool]:
    """USD per unit of a `kind` request to `provider`, and whether the provider counts
    in credits (else one unit per request). The key's own price wins, then the
    router's override, then the list."""
    prices = LIST_PRICES.get(provider, {})
    listed = prices.get(kind) or prices.get("search")
    per_credit = listed is not None and listed.unit == "credit"
    if key_price is not None:
        return key_price, per_credit
    if provider in overrides:
        return overrides[provider], per_credit
    return (listed.usd if listed is not None else 0.0), per_credit
