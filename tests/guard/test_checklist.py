"""Local-lookup-first: a checklist answer ends the call before any search."""

from __future__ import annotations

import logging
import os

import pytest

from searchfuse.errors import RateLimited, TurnLimitReached
from searchfuse.guard import Call, FileLookup, MappingLookup, guard, turn
from searchfuse.testing import FakeClock
from tests.guard.helpers import Backend, http_error

NOTES = """\
# Tavily notes

Development keys allow 100 requests per minute; production keys allow 1000.
Both limits apply per key.

A basic search costs 1 credit and an advanced search costs 2 credits.
"""


def guarded(backend: Backend, clock: FakeClock, checklist: list, **options: object):
    @guard(clock=clock, checklist=checklist, **options)  # type: ignore[call-overload]
    def web_search(query: str, max_results: int = 5) -> object:
        return backend.search(query)

    return web_search


# -- in the guard ---------------------------------------------------------------------


def test_a_checklist_answer_never_reaches_the_backend(backend, clock):
    facts = MappingLookup({"Tavily dev key rate limit": "100 requests per minute"})
    web_search = guarded(backend, clock, [facts])

    assert web_search("tavily  DEV key rate limit") == "100 requests per minute"

    assert backend.queries == []
    assert web_search.guard_state().checklist_answers == 1


def test_a_checklist_answer_spends_no_turn_budget_and_works_in_a_cooldown(backend, clock):
    facts = MappingLookup({"known": "from memory"})
    web_search = guarded(backend, clock, [facts])

    with turn():
        web_search("a")
        assert web_search("known") == "from memory"
        with pytest.raises(TurnLimitReached):
            web_search("b")
    backend.fail_next(http_error(429, "60"))
    clock.advance(10)
    with pytest.raises(RateLimited):
        web_search("c")
    assert web_search("known") == "from memory"

    assert backend.queries == ["a", "c"]


def test_hooks_run_in_order_and_the_first_answer_wins(backend, clock):
    asked: list[str] = []

    def first(query: str, call: Call) -> None:
        asked.append("first")

    def second(query: str, call: Call) -> str:
        asked.append("second")
        return "second's answer"

    def third(query: str, call: Call) -> str:
        asked.append("third")
        return "third's answer"

    web_search = guarded(backend, clock, [first, second, third])

    assert web_search("q") == "second's answer"
    assert asked == ["first", "second"]


def test_a_hook_sees_the_query_and_the_other_arguments(backend, clock):
    seen: list[Call] = []

    def spy(query: str, call: Call) -> None:
        seen.append(call)

    web_search = guarded(backend, clock, [spy])
    web_search("Q", max_results=3)

    assert seen[0].query == "Q"
    assert seen[0].params == {"max_results": 3}
    assert seen[0].tool.endswith("web_search")


def test_a_hook_that_raises_is_logged_and_skipped(backend, clock, caplog):
    def broken(query: str, call: Call) -> str:
        raise RuntimeError("index is corrupt")

    web_search = guarded(backend, clock, [broken])

    with caplog.at_level(logging.WARNING, logger="searchfuse.guard"):
        result = web_search("q")

    assert result["query"] == "q"
    assert backend.queries == ["q"]
    assert "raised; skipped" in caplog.text
    assert "index is corrupt" in caplog.text


def test_a_falsy_answer_other_than_none_is_an_answer(backend, clock):
    web_search = guarded(backend, clock, [lambda query, call: ""])

    assert web_search("q") == ""
    assert backend.queries == []


async def test_async_tools_accept_async_hooks(backend, clock):
    async def remembered(query: str, call: Call) -> str | None:
        return "remembered" if query == "known" else None

    @guard(clock=clock, checklist=[remembered, MappingLookup({"other": "mapped"})])
    async def web_search(query: str) -> object:
        return await backend.asearch(query)

    assert await web_search("known") == "remembered"
    assert await web_search("other") == "mapped"
    assert (await web_search("new"))["query"] == "new"
    assert backend.queries == ["new"]


async def test_an_async_hook_that_raises_is_skipped(backend, clock, caplog):
    async def broken(query: str, call: Call) -> str:
        raise RuntimeError("boom")

    @guard(clock=clock, checklist=[broken])
    async def web_search(query: str) -> object:
        return await backend.asearch(query)

    with caplog.at_level(logging.WARNING, logger="searchfuse.guard"):
        assert (await web_search("q"))["query"] == "q"
    assert "boom" in caplog.text


def test_a_sync_tool_skips_an_async_hook_with_a_warning(backend, clock, caplog):
    async def remembered(query: str, call: Call) -> str:
        return "remembered"

    web_search = guarded(backend, clock, [remembered])

    with caplog.at_level(logging.WARNING, logger="searchfuse.guard"):
        assert web_search("q")["query"] == "q"
    assert "is async but the tool is sync" in caplog.text


# -- MappingLookup --------------------------------------------------------------------


def test_mapping_lookup_matches_normalised_queries():
    lookup = MappingLookup({"  Tavily RATE limit ": "100/min", "credits": {"basic": 1}})

    assert lookup("tavily rate limit") == "100/min"
    assert lookup("CREDITS") == {"basic": 1}
    assert lookup("tavily rate limits") is None
    assert repr(lookup) == "<MappingLookup 2 answers>"


def test_mapping_lookup_takes_a_custom_normaliser():
    lookup = MappingLookup({"what is tavily?": "a search API"}, normalize=lambda q: q.strip("?"))

    assert lookup("what is tavily") == "a search API"


# -- FileLookup -----------------------------------------------------------------------


def test_file_lookup_answers_from_a_paragraph_that_has_every_query_word(tmp_path):
    (tmp_path / "tavily.md").write_text(NOTES)
    lookup = FileLookup(tmp_path)

    answer = lookup("What does an advanced search cost?")

    assert isinstance(answer, str)
    assert "no web search was made" in answer
    assert "advanced search costs 2 credits" in answer
    assert "tavily.md" in answer
    assert "100 requests per minute" not in answer  # only the matching paragraph
    assert lookup("bing search cost") is None  # "bing" is nowhere
    assert lookup("what is the") is None  # nothing but stopwords


def test_file_lookup_min_coverage_allows_partial_matches(tmp_path):
    (tmp_path / "tavily.md").write_text(NOTES)

    assert FileLookup(tmp_path)("production key limit europe") is None
    answer = FileLookup(tmp_path, min_coverage=0.75)("production key limit europe")
    assert "production keys allow 1000" in answer


def test_file_lookup_searches_directories_for_text_files_only(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "faq.txt").write_text("The fuse trips on the first 429.")
    (tmp_path / "data.json").write_text('{"fuse": "trips on the first 429"}')
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe fuse 429 \xff")
    single = tmp_path / "single.log"
    single.write_text("fuse trips 429 in a log file")

    answer = FileLookup(tmp_path)("fuse 429")
    assert "faq.txt" in answer
    assert "data.json" not in answer
    assert "single.log" not in answer
    assert "single.log" in FileLookup(single)("fuse 429")  # a file named directly is read
    assert FileLookup(tmp_path / "missing")("fuse") is None


def test_file_lookup_rereads_a_file_that_changed(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("The cooldown is 60 seconds.")
    lookup = FileLookup(notes)
    assert "60 seconds" in lookup("cooldown")

    notes.write_text("The cooldown is now 30 seconds long.")
    stat = notes.stat()
    os.utime(notes, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    assert "30 seconds" in lookup("cooldown")


def test_file_lookup_keeps_the_answer_short(tmp_path):
    paragraphs = [f"Paragraph {i} mentions quota." + " filler" * 50 for i in range(10)]
    (tmp_path / "long.md").write_text("\n\n".join(paragraphs))

    answer = FileLookup(tmp_path, max_chars=800)("quota")

    assert answer.count("mentions quota") == 2


def test_file_lookup_render_shapes_the_answer(tmp_path):
    (tmp_path / "tavily.md").write_text(NOTES)

    def as_tavily_json(query, passages):
        results = [{"title": p.path.name, "content": p.text, "score": p.score} for p in passages]
        return {"query": query, "answer": passages[0].text, "results": results}

    answer = FileLookup(tmp_path, render=as_tavily_json)("basic search credit")

    assert answer["results"][0]["title"] == "tavily.md"
    assert answer["results"][0]["score"] == 1.0


def test_file_lookup_as_a_checklist_hook(tmp_path, backend, clock):
    (tmp_path / "tavily.md").write_text(NOTES)
    web_search = guarded(backend, clock, [FileLookup(tmp_path)])

    assert "1000" in web_search("production keys requests per minute")
    assert web_search("latest tavily pricing")["query"] == "latest tavily pricing"
    assert backend.queries == ["latest tavily pricing"]


def test_file_lookup_rejects_nonsense_settings(tmp_path):
    with pytest.raises(ValueError):
        FileLookup(tmp_path, min_coverage=0)
    with pytest.raises(ValueError):
        FileLookup(tmp_path, max_chars=0)


def test_a_note_with_a_byte_that_is_not_utf8_still_answers_and_says_so(
    tmp_path, backend, clock, caplog
):
    note = tmp_path / "tavily.md"
    note.write_bytes(
        b"# Tavily \xff notes\n\nAn advanced search costs 2 credits, caf\xe9 prices aside.\n"
    )
    notes = FileLookup(tmp_path)

    @guard(clock=clock, checklist=[notes])
    def web_search(query: str) -> str:
        return str(backend.search(query))

    with caplog.at_level(logging.WARNING, logger="searchfuse.guard"):
        answer = web_search("advanced search cost")
        web_search("advanced search credits")  # read once: said once

    assert "An advanced search costs 2 credits" in answer
    assert backend.queries == []  # answered locally: no search spent
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "tavily.md is not valid utf-8" in warnings[0]
