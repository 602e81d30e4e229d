"""`guard(cache_match="near")`: a near-duplicate query is answered from the cache and
reaches no server; a look-alike whose numbers, names, negations or quoted phrases
differ always searches. Measured on the labelled set in `near_pairs.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchfuse import Router, guard, turn
from searchfuse.guard import near_key, near_query, search_key
from searchfuse.router.state import SqliteStore
from searchfuse.testing import FakeClock, FakeTavily

from .near_pairs import DISTINCT, DUPLICATES

KEY = "tvly-dev-test0001"


def searched(fake: FakeTavily) -> list[str]:
    """The queries that reached the simulated Tavily, in order."""
    return [r.body["query"] for r in fake.searches if isinstance(r.body, dict)]


#: The labelled set's recall as recorded in docs/benchmarks.md (bench_near.py).
RECORDED_RECALL = 0.95


def test_the_labelled_set_has_no_false_hit_and_its_recorded_recall() -> None:
    false_hits = [(a, b) for a, b in DISTINCT if near_query(a) == near_query(b)]
    assert false_hits == []
    found = sum(near_query(a) == near_query(b) for a, b in DUPLICATES)
    assert found / len(DUPLICATES) >= RECORDED_RECALL
    assert len(DUPLICATES) >= 90 and len(DISTINCT) >= 180


def test_the_set_is_no_easier_for_the_exact_key() -> None:
    """The baseline: the default key finds only the case-and-spacing duplicates."""
    exact = sum(search_key(a) == search_key(b) for a, b in DUPLICATES)
    assert exact < len(DUPLICATES) / 5


@pytest.fixture
def served(tmp_path: Path) -> tuple[FakeTavily, Router, FakeClock]:
    clock = FakeClock()
    fake = FakeTavily([KEY], clock=clock)
    router = Router([KEY], state=None, clock=clock, transport=fake.transport())
    return fake, router, clock


def test_a_near_duplicate_is_answered_from_the_cache_and_sends_nothing(
    served: tuple[FakeTavily, Router, FakeClock],
) -> None:
    fake, router, clock = served

    @guard(router=router, cache_match="near", per_turn=1, clock=clock)
    def web_search(query: str, max_results: int = 5) -> dict:
        raise AssertionError("delegated to the router")

    with turn():
        first = web_search("What are Tavily's rate limits?")
        # Free: within the same turn, a second search would be refused.
        again = web_search("tavily rate limit")
        also = web_search("Rate limits of Tavily")
    assert searched(fake) == ["What are Tavily's rate limits?"]
    assert again == first == also
    with turn():
        web_search("tavily rate limits", max_results=3)  # other arguments: a search
    with turn():
        web_search("python 3.12 release")
    with turn():
        web_search("python 3.11 release")  # a version apart: never the same answer
    with turn():
        web_search('"rate limits" tavily')  # a quoted phrase: searched
    assert searched(fake) == [
        "What are Tavily's rate limits?",
        "tavily rate limits",
        "python 3.12 release",
        "python 3.11 release",
        '"rate limits" tavily',
    ]


def test_a_near_duplicate_is_shared_through_the_store(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = FakeTavily([KEY], clock=clock)
    path = tmp_path / "searchfuse.db"

    def web_search_tool() -> object:
        router = Router([KEY], state=SqliteStore(path), clock=clock, transport=fake.transport())

        @guard(router=router, cache="shared", cache_match="near", per_turn=None, clock=clock)
        def web_search(query: str) -> dict:
            raise AssertionError("delegated to the router")

        return web_search

    here, elsewhere = web_search_tool(), web_search_tool()  # two processes, one store
    here("Best flights from Paris to London")  # type: ignore[operator]
    elsewhere("flight from paris to london best?")  # type: ignore[operator]
    elsewhere("best flights from London to Paris")  # type: ignore[operator]
    assert searched(fake) == [
        "Best flights from Paris to London",
        "best flights from London to Paris",
    ]


async def test_an_async_tool_matches_near_duplicates_too(
    served: tuple[FakeTavily, Router, FakeClock],
) -> None:
    fake, _, clock = served
    router = Router([KEY], state=None, clock=clock, async_transport=fake.transport())

    @guard(router=router, cache_match="near", per_turn=None, clock=clock)
    async def web_search(query: str) -> dict:
        raise AssertionError("delegated to the router")

    first = await web_search("Side effects of ibuprofen")
    assert await web_search("ibuprofen side effect") == first
    await web_search("side effects of not taking ibuprofen")
    assert searched(fake) == ["Side effects of ibuprofen", "side effects of not taking ibuprofen"]


def test_near_key_is_a_replaceable_key_function() -> None:
    assert near_key("Tavily limits?", max_results=5) == near_key("limit tavily", max_results=5)
    assert near_key("tavily limits", max_results=5) != near_key("tavily limits", max_results=3)
    assert near_key("tavily limits") != search_key("tavily limits")
    calls: list[str] = []

    @guard(cache_key=near_key, per_turn=None)
    def web_search(query: str) -> str:
        calls.append(query)
        return query

    web_search("Docker images")
    web_search("docker image")
    assert calls == ["Docker images"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cache_match": "fuzzy"}, 'cache_match must be "exact" or "near"'),
        ({"cache_match": True}, 'cache_match must be "exact" or "near"'),
        ({"cache_match": "near", "cache_key": search_key}, None),
        ({"cache_match": "near", "cache_key": lambda q, **p: q}, "not both"),
    ],
)
def test_a_bad_cache_match_is_refused_when_the_tool_is_made(
    options: dict[str, object], says: str | None
) -> None:
    def web_search(query: str) -> str:
        return query

    if says is None:
        guard(web_search, **options)  # type: ignore[call-overload]
        return
    with pytest.raises(ValueError, match=says):
        guard(web_search, **options)  # type: ignore[call-overload]


# Look-alikes outside the labelled set's ASCII: what Unicode's compatibility forms and
# other languages' quotation marks write differently must not meet either.
@pytest.mark.parametrize(
    ("first", "second"),
    [
        # A superscript is an exponent, not another digit of the number.
        ("10² metres", "102 metres"),
        ("2⁵ combinations", "25 combinations"),
        ("x² derivative", "x2 derivative"),
        ("10⁻³ mol", "10-3 mol"),
        # Quoted phrases in the marks other languages quote with stay whole and in order.
        ("«new york» pizza", "«york new» pizza"),
        ("„new york“ pizza", "„york new“ pizza"),
        ("»new york« pizza", "»york new« pizza"),
        ("「東京 大学」 入試", "「大学 東京」 入試"),
        ("『東京 大学』 入試", "『大学 東京』 入試"),
        ("«new york» pizza", "new york pizza"),
        # An operator between spaced numbers is no punctuation to forgive.
        ("5 * 3", "5 / 3"),
        ("10 / 2", "10 2"),
        ("7 % 3", "7 3"),
    ],
)
def test_look_alikes_written_in_other_marks_stay_apart(first: str, second: str) -> None:
    assert near_query(first) != near_query(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("10^2 metres", "10² metres"),
        ("«New York» pizza", "« new york » pizza"),
        ("ｐｙｔｈｏｎ ３.１１", "python 3.11"),
        ("CO₂ emissions", "CO2 emissions"),
    ],
)
def test_the_same_query_in_other_marks_still_meets(first: str, second: str) -> None:
    assert near_query(first) == near_query(second)


def test_a_superscripted_look_alike_searches(fake_tavily: FakeTavily, tavily_server: str) -> None:
    with Router([KEY], base_url=tavily_server) as router:
        web_search = guard(router.search, cache_match="near", per_turn=None)
        web_search("10² metres in feet")
        web_search("102 metres in feet")
    assert searched(fake_tavily) == ["10² metres in feet", "102 metres in feet"]


# Negations and relations are bound to their word in the languages agents are asked in,
# not in English alone: the same words on the other side are the opposite question.
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Kuchen ohne Zucker mit Milch", "Kuchen mit Zucker ohne Milch"),
        ("Flüge von Berlin nach Paris", "Flüge von Paris nach Berlin"),
        ("ist nicht sicher gegen Viren", "ist sicher nicht gegen Viren"),
        ("Rezept kein Ei", "Rezept Ei"),
        ("gâteau sans sucre avec lait", "gâteau avec sucre sans lait"),
        ("vols de paris à londres", "vols de londres à paris"),
        ("ce n'est pas sûr", "ce est sûr"),
        ("pastel sin azúcar con leche", "pastel con azúcar sin leche"),
        ("vuelos desde madrid hasta paris", "vuelos desde paris hasta madrid"),
        ("torta senza glutine con latte", "torta con glutine senza latte"),
        ("bolo sem açúcar com leite", "bolo com açúcar sem leite"),
        ("taart zonder suiker met melk", "taart met suiker zonder melk"),
        ("торт без сахара с молоком", "торт с сахаром без молока"),
        ("рейсы из москвы в киев", "рейсы из киева в москву"),
        ("ciasto bez cukru", "ciasto cukru"),
    ],
)
def test_negations_and_relations_in_other_languages_stay_apart(first: str, second: str) -> None:
    assert near_query(first) != near_query(second)


def test_other_languages_still_forgive_case_and_word_order() -> None:
    assert near_query("Kuchen ohne Zucker") == near_query("kuchen OHNE zucker")
    assert near_query("vols pas chers paris") == near_query("paris vols pas chers")
