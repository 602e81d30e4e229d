"""Local-lookup-first: answer from what the agent already has before searching.

`guard(checklist=[...])` takes hooks `(query, call) -> answer | None`. They
run in order before anything else; the first that returns something other
than `None` ends the call with that answer: no search, no turn budget, and
it works during a cooldown. A hook that raises is logged and skipped: a
broken lookup must never cost the agent its search.

Two small built-ins:

- [`MappingLookup`][searchfuse.MappingLookup] answers from a mapping of query to answer
  (matched after [`normalize_query`][searchfuse.guard.normalize_query]);
- [`FileLookup`][searchfuse.FileLookup] answers from local text files whose paragraphs
  contain the query's words.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchfuse.guard.cache import normalize_query
from searchfuse.guard.calls import Call

__all__ = ["FileLookup", "Lookup", "MappingLookup", "Passage", "aconsult", "consult"]

logger = logging.getLogger("searchfuse.guard")

#: A checklist hook: `(query, call) -> answer | None`. In an async guarded
#: tool the hook may also be a coroutine function.
Lookup = Callable[[str, Call], Any]


def consult(hooks: Sequence[Lookup], call: Call) -> Any | None:
    """The first answer a hook gives for `call`, or `None`. Hooks that raise are skipped."""
    for hook in hooks:
        try:
            answer = hook(call.query, call)
        except Exception:
            logger.warning("checklist hook %r raised; skipped", hook, exc_info=True)
            continue
        if inspect.isawaitable(answer):
            # A coroutine hook cannot run in a synchronous tool; say so once per call.
            if inspect.iscoroutine(answer):
                answer.close()
            logger.warning("checklist hook %r is async but the tool is sync; skipped", hook)
            continue
        if answer is not None:
            return answer
    return None


async def aconsult(hooks: Sequence[Lookup], call: Call) -> Any | None:
    """Async twin of `consult`: hooks may be plain or coroutine functions."""
    for hook in hooks:
        try:
            answer = hook(call.query, call)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            logger.warning("checklist hook %r raised; skipped", hook, exc_info=True)
            continue
        if answer is not None:
            return answer
    return None


class MappingLookup:
    """Answers queries from a mapping of query to answer.

    Queries are matched after normalisation (case-folded, whitespace
    collapsed, trimmed), so `"Tavily  RATE limit"` finds the answer stored
    under `"tavily rate limit"`. The mapping is read once, when the lookup
    is made; answers are returned exactly as stored, so store them in the
    shape the tool returns (a string for a tool that returns text, a dict
    for one that returns Tavily's JSON):

    ```python
    facts = MappingLookup({"tavily rate limit": "100 requests/min per dev key"})

    @guard(checklist=[facts])
    def web_search(query: str) -> str: ...
    ```
    """

    def __init__(
        self,
        answers: Mapping[str, Any],
        *,
        normalize: Callable[[str], str] = normalize_query,
    ) -> None:
        self._normalize = normalize
        self._answers = {normalize(query): answer for query, answer in answers.items()}

    def __repr__(self) -> str:
        return f"<MappingLookup {len(self._answers)} answers>"

    def __call__(self, query: str, call: Call | None = None) -> Any | None:
        """The stored answer for `query`, or `None`."""
        return self._answers.get(self._normalize(query))


@dataclass(frozen=True, slots=True)
class Passage:
    """A paragraph of a local file that matched a query, with the share of query words it has."""

    path: Path
    text: str
    score: float


# Words too common to say whether a paragraph is about the query.
_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "did", "do",
        "does", "for", "from", "has", "have", "how", "i", "in", "is", "it", "its", "me",
        "my", "of", "on", "or", "should", "that", "the", "their", "there", "these", "this",
        "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will",
        "with", "would", "you", "your",
    }
)  # fmt: skip
_WORD = re.compile(r"\w+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _stem(word: str) -> str:
    """`"searches"` -> `"search"`, `"keys"` -> `"key"`: plurals match their singular."""
    if len(word) <= 3:
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _words(text: str) -> list[str]:
    return [_stem(word.casefold()) for word in _WORD.findall(text)]


def _terms(query: str) -> list[str]:
    """The words of `query` that say what it is about, without duplicates."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.casefold()):
        if len(word) > 1 and word not in _STOPWORDS:
            seen[_stem(word)] = None
    return list(seen)


class FileLookup:
    """Answers queries from local text files whose paragraphs contain the query's words.

    `paths` are files or directories; directories are searched recursively
    for files ending in one of `suffixes`. Each file is split into
    paragraphs (blocks separated by blank lines). A paragraph matches when
    it contains at least `min_coverage` of the query's significant words
    (case-insensitive, plurals matching their singular; stopwords such as
    "what" and "the" do not count); `1.0`, the default, means all of them.
    The best paragraphs, up to `max_chars` characters in all, make the
    answer.

    The default answer is text that names its sources and says that no web
    search was made; pass `render(query, passages)` to shape it otherwise,
    for example as Tavily's JSON for a tool that returns that. Files are
    re-read only when their modification time or size changes:

    ```python
    notes = FileLookup("notes/", "docs/faq.md")

    @guard(checklist=[notes])
    def web_search(query: str) -> str: ...
    ```
    """

    def __init__(
        self,
        *paths: str | os.PathLike[str],
        suffixes: Iterable[str] = (".md", ".txt", ".rst"),
        min_coverage: float = 1.0,
        max_chars: int = 2000,
        render: Callable[[str, list[Passage]], Any] | None = None,
        encoding: str = "utf-8",
    ) -> None:
        if not 0 < min_coverage <= 1:
            raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage!r}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be positive, got {max_chars!r}")
        self._paths = [Path(path) for path in paths]
        self._suffixes = tuple(suffix.lower() for suffix in suffixes)
        self._min_coverage = min_coverage
        self._max_chars = max_chars
        self._render = render if render is not None else _render_text
        self._encoding = encoding
        self._files: dict[Path, tuple[tuple[int, int], list[tuple[str, frozenset[str]]]]] = {}
        self._unreadable: set[Path] = set()

    def __repr__(self) -> str:
        shown = ", ".join(str(path) for path in self._paths)
        return f"<FileLookup {shown}>"

    def __call__(self, query: str, call: Call | None = None) -> Any | None:
        """An answer made of the paragraphs matching `query`, or `None`."""
        terms = _terms(query)
        if not terms:
            return None
        needed = self._min_coverage * len(terms)
        found: list[Passage] = []
        for path in self._iter_files():
            for text, words in self._paragraphs(path):
                hits = sum(1 for term in terms if term in words)
                if hits >= needed:
                    found.append(Passage(path, text, hits / len(terms)))
        if not found:
            return None
        found.sort(key=lambda passage: passage.score, reverse=True)  # stable: file order
        chosen: list[Passage] = []
        budget = self._max_chars
        for passage in found:
            if chosen and len(passage.text) > budget:
                break
            chosen.append(passage)
            budget -= len(passage.text)
        return self._render(query, chosen)

    def _iter_files(self) -> Iterable[Path]:
        for path in self._paths:
            if path.is_file():
                yield path
            elif path.is_dir():
                for child in sorted(path.rglob("*")):
                    if child.is_file() and child.suffix.lower() in self._suffixes:
                        yield child

    def _paragraphs(self, path: Path) -> list[tuple[str, frozenset[str]]]:
        try:
            stat = path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            cached = self._files.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            data = path.read_bytes()
        except OSError as exc:
            # Said once per file: a note that cannot be read costs the agent searches.
            if path not in self._unreadable:
                self._unreadable.add(path)
                logger.warning("file lookup: cannot read %s (%s); skipped", path, exc)
            return []
        self._unreadable.discard(path)
        try:
            text = data.decode(self._encoding)
        except UnicodeDecodeError as exc:
            # The readable text still answers; the bad bytes become U+FFFD.
            text = data.decode(self._encoding, errors="replace")
            logger.warning(
                "file lookup: %s is not valid %s (byte %d); read with the bad bytes replaced",
                path,
                self._encoding,
                exc.start,
            )
        paragraphs = [
            (block.strip(), frozenset(_words(block)))
            for block in _PARAGRAPH_BREAK.split(text)
            if block.strip()
        ]
        self._files[path] = (stamp, paragraphs)
        return paragraphs


def _render_text(query: str, passages: list[Passage]) -> str:
    """The default [`FileLookup`][searchfuse.FileLookup] answer: the passages, each under its file
    name."""
    parts = [f"Answer from local files (no web search was made) for: {query}"]
    for passage in passages:
        parts.append(f"[{passage.path}]\n{passage.text}")
    return "\n\n".join(parts)
