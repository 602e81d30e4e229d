"""Who a request comes from: the client (its token's name), the user and the conversation.

Tavily's clients name them already: tavily-python's `session_id=` and
`human_id=` send `X-Session-Id` and `X-Human-Id`. The conversation is the
session; the user is the human, else the client whose token was used. Spend
budgets count per user and per conversation, and the turn rule counts per
session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from searchfuse._spend import spend_scope

__all__ = ["MAX_ID_LENGTH", "BadHeader", "Caller", "caller_of", "spend_scope_for"]

SESSION_HEADER = "x-session-id"
HUMAN_HEADER = "x-human-id"
#: The longest session or human id accepted (they key budgets and turns, and reach logs).
MAX_ID_LENGTH = 256


class BadHeader(ValueError):
    """A header the gateway reads holds something it cannot use; the text is for the client."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The parties to one request, as far as the gateway knows them."""

    #: The name of the client token used, or `None` when no tokens are configured.
    client: str | None = None
    #: Whose spend it is: `X-Human-Id`, else the client's name.
    user: str | None = None
    #: The conversation: `X-Session-Id`.
    conversation: str | None = None

    @property
    def session(self) -> Hashable:
        """What one turn counts over: the client's conversation, else the client.

        Namespaced by client, so one client naming another's session id cannot
        spend that session's turn.
        """
        return (self.client, self.conversation)

    @property
    def spending_conversation(self) -> str | None:
        """The conversation budgets count: `X-Session-Id` within the client's own.

        Namespaced by client as the turn is: a client naming another client's
        session id spends from a conversation of its own, never from that one.
        (A user, `X-Human-Id`, is one person whichever client they come through.)
        """
        if self.conversation is None or self.client is None:
            return self.conversation
        return f"{self.client}/{self.conversation}"


def _header_id(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None or not value.strip():
        return None
    value = value.strip()
    if len(value) > MAX_ID_LENGTH or not value.isprintable():
        shown = "-".join(part.capitalize() for part in name.split("-"))
        raise BadHeader(f"{shown} must be at most {MAX_ID_LENGTH} printable characters.")
    return value


def caller_of(headers: Mapping[str, str], client: str | None) -> Caller:
    """The [`Caller`][searchfuse.gateway.Caller] of a request.

    `headers` are the request's (names in any case); `client` is its token's name.
    """
    conversation = _header_id(headers, SESSION_HEADER)
    human = _header_id(headers, HUMAN_HEADER)
    user = human if human is not None else client
    return Caller(client=client, user=user, conversation=conversation)


def spend_scope_for(caller: Caller) -> contextlib.AbstractContextManager[Any]:
    """The spend scope a request runs in: `spend_scope(user=, conversation=)` for the caller.

    Budgets per user count `X-Human-Id` (else the client token's name); budgets
    per conversation count `X-Session-Id` (within the client's own, see
    `Caller.spending_conversation`). A caller naming neither runs unscoped.
    """
    if caller.user is None and caller.conversation is None:
        return contextlib.nullcontext()
    return spend_scope(user=caller.user, conversation=caller.spending_conversation)
