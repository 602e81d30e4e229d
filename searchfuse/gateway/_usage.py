"""`GET /usage` for the pool: Tavily's shape, the totals of every key the gateway serves with.

Read from the router's state (what `searchfuse status` shows); no request
goes upstream, so a client polling `/usage` never spends Tavily's ten
`/usage` calls per ten minutes. Keys of one account share its plan, so an
account's plan is counted once. Tavily's sections count Tavily's credits, so
only Tavily's keys are in them: another provider of the chain spends in its own
unit (Exa's dollars, Brave's requests), which no client would read as credits
(`searchfuse status` shows every provider's).

With spend budgets, `"searchfuse": {"budgets": [...]}` follows Tavily's two
sections: each budget's limit and, for the service and for the caller's own
user (`X-Human-Id`, else its token's name) and conversation (`X-Session-Id`),
what is used and left. Tavily's clients read their two sections and ignore it;
nothing about other callers is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searchfuse.router import BudgetStatus, KeyStatus

__all__ = ["pool_usage"]


def _total(values: Sequence[float | None]) -> float | None:
    """The sum, or `None` when any part is unknown (or unlimited)."""
    if not values or any(v is None for v in values):
        return None
    return _number(sum(v for v in values if v is not None))


def _number(value: float) -> float:
    return int(value) if float(value).is_integer() else value


#: The provider whose keys `/usage` totals: its sections are in Tavily's credits.
TAVILY = "tavily"

#: What a budget row says to a client: its own use, never other callers'.
_BUDGET_FIELDS = ("budget", "per", "unit", "period", "limit", "used", "left", "resets_at")


def pool_usage(
    records: Sequence[KeyStatus], budgets: Sequence[BudgetStatus] = ()
) -> dict[str, Any]:
    """Tavily's `/usage` answer for the pool whose keys are `records`, and the
    `budgets` as the caller may see them.

    `limit` and `plan_limit` are `null` when any key's (or account's) is
    unlimited or not yet known, as Tavily writes an unlimited one; a budget's
    `used` and `left` are `null` for a user or conversation the caller did not name.
    """
    records = [r for r in records if r.provider == TAVILY]
    accounts: dict[str, dict[str, float | None]] = {}
    for r in records:
        account = accounts.setdefault(
            r.account or r.fingerprint, {"usage": None, "limit": r.plan_limit, "local": 0.0}
        )
        if r.plan_usage is not None:
            account["usage"] = max(account["usage"] or 0.0, r.plan_usage)
        if r.plan_limit is not None:
            account["limit"] = r.plan_limit
        account["local"] = (account["local"] or 0.0) + r.local_credits
    plan_usage = sum((a["usage"] or 0.0) + (a["local"] or 0.0) for a in accounts.values())
    usage: dict[str, Any] = {
        "key": {
            "usage": _number(sum((r.key_usage or 0.0) + r.local_credits for r in records)),
            "limit": _total([r.key_limit for r in records]),
            "search_usage": _number(sum(r.search_usage or 0.0 for r in records)),
        },
        "account": {
            "current_plan": f"searchfuse pool of {len(records)} key(s)",
            "plan_usage": _number(plan_usage),
            "plan_limit": _total([a["limit"] for a in accounts.values()]),
            # The router's state does not keep pay-as-you-go figures.
            "paygo_usage": None,
            "paygo_limit": None,
        },
    }
    if budgets:
        rows = [row.to_dict() for row in budgets]
        usage["searchfuse"] = {"budgets": [{f: row[f] for f in _BUDGET_FIELDS} for row in rows]}
    return usage
