"""What the simulated Exa, Brave and Serper share: a table of keys, each with its pace
and its balance, and the pages a search finds.

Each key has a request rate (at most `rate` requests in any `window`
seconds, a sliding window like the real APIs') and a balance in the
provider's unit (Exa's dollars, Serper's credits, Brave's requests a month;
`None`: unlimited). The pages are deterministic: the same query finds the
same pages at every provider, so a test can tell which provider served by
the shape of the answer, not by its content.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote

import httpx

from searchfuse._secrets import fingerprint, mask
from searchfuse.testing._simulator import Simulator, sliding_window

__all__ = ["KeyedSimulator", "Page", "pages"]

#: The domains a search finds pages on, unless it names its own.
DOMAINS = ("example.com", "example.org", "example.net", "docs.example.com", "news.example.org")
_WHITESPACE = re.compile(r"\s+")
_SITE = re.compile(r"(-?)site:(\S+)")


@dataclass(eq=False)
class _Key:
    """One key's state. The raw key lives only in the simulator's key table."""

    fingerprint: str
    masked: str
    rate: int
    window: float
    balance: float | None
    spent: float = 0.0
    revoked: bool = False
    times: deque[float] = field(default_factory=deque)


@dataclass(frozen=True)
class Page:
    """One page a search found."""

    title: str
    url: str
    text: str
    score: float
    domain: str


def digest(*parts: object) -> str:
    """A stable hex digest of `parts`."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def normalised(query: str) -> str:
    """Case-folded, whitespace-collapsed, without `site:` operators."""
    return _WHITESPACE.sub(" ", _SITE.sub("", query)).strip().casefold()


def site_operators(query: str) -> tuple[list[str], list[str]]:
    """The domains `query` asks for with `site:` and leaves out with `-site:`."""
    include = [d for sign, d in _SITE.findall(query) if not sign]
    exclude = [d for sign, d in _SITE.findall(query) if sign]
    return [d.strip("()") for d in include], [d.strip("()") for d in exclude]


def pages(
    query: str, count: int, include: Iterable[str] = (), exclude: Iterable[str] = ()
) -> list[Page]:
    """`count` deterministic pages for `query`, on `include`'s domains if given, never
    on `exclude`'s."""
    words = normalised(query)
    left_out = set(exclude)
    domains = [d for d in (list(include) or DOMAINS) if d not in left_out] or ["example.edu"]
    slug = quote("-".join(words.split())[:60], safe="-")
    found = []
    for i in range(count):
        ref = digest(words, i)
        domain = domains[(int(ref[:4], 16) + i) % len(domains)]
        found.append(
            Page(
                title=f"{words} - result {i + 1}",
                url=f"https://{domain}/{slug}/{ref[:10]}",
                text=f"Simulated page {i + 1} about '{words}' (ref {ref[:10]}).",
                score=round(0.98 - 0.04 * i - int(ref[4:6], 16) / 255 * 0.03, 4),
                domain=domain,
            )
        )
    return found


class KeyedSimulator(Simulator):
    """A simulated API whose requests carry a key: the key table and its rules.

    Subclasses set `header` (the header that carries the key), `default_rate`
    and `default_window` (a new key's pace) and `default_balance`.
    """

    header = "x-api-key"
    default_rate = 10
    default_window = 1.0
    default_balance: float | None = None

    def __init__(
        self,
        keys: Iterable[str] = (),
        *,
        clock: Callable[[], float] | None = None,
        sleeper: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(clock=clock, sleeper=sleeper)
        self._keys: dict[str, _Key] = {}
        for key in keys:
            self.add_key(key)

    def add_key(
        self,
        key: str,
        *,
        rate: int | None = None,
        window: float | None = None,
        balance: float | Literal["default"] | None = "default",
    ) -> None:
        """Accept `key`: at most `rate` requests in any `window` seconds (the
        provider's default pace unless given), with `balance` to spend in the
        provider's unit (`None`: unlimited; left out: the provider's default)."""
        if not key or key != key.strip() or any(c.isspace() for c in key):
            raise ValueError("a key must be a non-empty string without whitespace")
        with self._lock:
            if key in self._keys:
                raise ValueError(f"key {mask(key)} already exists")
            self._keys[key] = _Key(
                fingerprint=fingerprint(key),
                masked=mask(key),
                rate=self.default_rate if rate is None else rate,
                window=self.default_window if window is None else window,
                balance=self.default_balance if balance == "default" else balance,
            )

    @property
    def keys(self) -> list[str]:
        """The keys this simulator accepts (revoked ones included), in the order added."""
        with self._lock:
            return list(self._keys)

    def _key(self, key: str) -> _Key:
        try:
            return self._keys[key]
        except KeyError:
            raise KeyError(f"unknown key {mask(key)}") from None

    def revoke(self, key: str) -> None:
        """Refuse `key` from now on, as a deleted key is refused (until `restore`)."""
        with self._lock:
            self._key(key).revoked = True

    def restore(self, key: str) -> None:
        """Accept a revoked `key` again."""
        with self._lock:
            self._key(key).revoked = False

    def set_rate(self, key: str, rate: int, window: float | None = None) -> None:
        """Set `key`'s pace: at most `rate` requests in any `window` seconds."""
        with self._lock:
            state = self._key(key)
            state.rate = rate
            state.window = state.window if window is None else window

    def set_balance(self, key: str, balance: float | None) -> None:
        """Set what `key` has left to spend (`None`: unlimited; 0: spent)."""
        with self._lock:
            self._key(key).balance = balance
            self._key(key).spent = 0.0

    def set_spent(self, key: str, spent: float) -> None:
        """Set what `key` has spent of its balance (Brave: requests this month)."""
        with self._lock:
            self._key(key).spent = spent

    def spent(self, key: str) -> float:
        """What `key` has spent, in the provider's unit."""
        with self._lock:
            return self._key(key).spent

    def _key_of(self, request: httpx.Request) -> str | None:
        value = request.headers.get(self.header, "").strip()
        return value or None

    def _known(self, key: str | None) -> _Key | None:
        """The key's state when it is known and not revoked."""
        state = self._keys.get(key) if key else None
        return None if state is None or state.revoked else state

    def _admit(self, state: _Key, now: float) -> float | None:
        """Count a request in the key's window (`None`), or the seconds until it fits."""
        return sliding_window(state.times, state.rate, state.window, now)

    def _affords(self, state: _Key, cost: float) -> bool:
        """Whether the key's balance covers `cost`."""
        return state.balance is None or state.spent + cost <= state.balance + 1e-9

    def __repr__(self) -> str:
        with self._lock:
            keys = [state.masked for state in self._keys.values()]
            return f"{type(self).__name__}(keys={keys}, requests={len(self._records)})"
