"""Near-duplicate queries: a cache key that forgives how a question is worded, never what it asks.

`guard(cache_match="near")` keys the cache by [`near_key`][searchfuse.guard.near_key]
instead of [`search_key`][searchfuse.guard.search_key]: a query that differs from an
answered one only in case, punctuation, word order, stop words or plural endings is
answered from the cache. Agents repeat themselves in exactly these ways ("tavily rate
limits" / "Rate limits of Tavily?"), and an agent told in text not to repeat a query
repeats it anyway; a cache hit costs nothing and needs no obedience.

What it never forgives, because it changes the answer: numbers, versions and years
(`3.11` / `3.12`) and the order numbers come in ("born 1990 died 2020"), names (a
capitalised word keeps its plural ending), negation (`not`, `no`, `without`, `-term`,
`isn't`), quoted phrases (kept whole, in order, and apart from the unquoted words,
in any language's quotation marks: `"..."`, `«...»`, `„...“`, `「...」`), symbols
(`>` / `<`, `$` / `€`, `*` / `/` between numbers, one emoji or another: punctuation
is forgiven, a symbol is not), exponents (`10²` is `10^2`, never `102`), and which
side of a relation a word is on: a word after `from`, `to`, `in`, `for`, `than`,
`with`, `>`... (or `ohne`, `sans`, `sin`, `без`... in other languages) stays bound to
it, so "flights from paris to london" and "flights from london to paris" stay two
queries. A query with nothing left to forgive (only stop words, marks or spaces)
meets only itself.

Like `search_key`, it is a plain function, replaceable by your own
(`guard(cache_key=...)`); [`near_query`][searchfuse.guard.near_query] is the query
part alone. Measured on a labelled set of duplicates and look-alikes in
`docs/benchmarks.md`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Mapping
from typing import Any

from searchfuse.guard.cache import search_key_of

__all__ = ["BINDING_WORDS", "STOP_WORDS", "near_key", "near_key_of", "near_query"]


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Words that say nothing a search engine would answer differently without them.
STOP_WORDS = _set(
    "the an is are be been being am do does of and or vs versus please what me my you your"
)
#: Words that are stop words only where an article or a pronoun can stand: first, or
#: after another stop or binding word ("what is a vpn", "how do i"), never after a
#: word they may name a kind of ("vitamin a", "plan a", "world war i", "type i").
_SOMETIMES_STOP = frozenset(("a", "i"))
#: Words whose meaning depends on the word after them: negation, and the relations
#: whose sides must not swap. Each is kept joined to the next word that is no stop word.
BINDING_WORDS = _set(
    "not no without never non except excluding minus nor from to into onto in on at "
    "for with by than before after since until between against per over under"
    # The same in the languages agents are most often asked in (German, French, Spanish,
    # Italian, Portuguese, Dutch, Russian, Polish): "ohne Zucker mit Milch" is not "mit
    # Zucker ohne Milch". Only words that are no English word of another meaning.
    " nicht kein keine keinen keinem keiner keines ohne mit von nach aus bis gegen seit"
    " ne pas sans avec vers pour avant après depuis contre jamais aucun aucune à"
    " sin con desde hasta hacia contra nunca ningún ninguna sino"
    " senza verso contro mai nessun nessuna"
    " não sem com até"
    " niet geen zonder met naar sinds tegen nooit"
    " не нет без ни с со из в во к ко от до для против после перед"
    " nie bez przez"
)
_CONTRACTIONS = {
    "can't": "can not",
    "won't": "will not",
    "shan't": "shall not",
    "cannot": "can not",
}
#: Words that end in `s` but are not plurals, or whose singular is another word.
_KEEP_S = _set(
    "news series species always perhaps various its his hers yes this thus whereas "
    "physics mathematics economics politics ethics statistics analytics gas bus lens "
    "chaos canvas atlas alias bias ios macos windows mars kudos plus minus lens aws "
    "dns gps css sms https tennis christmas glasses arms goods clothes customs manners "
    "spirits minutes savings remains grounds means quarters headquarters jeans pants "
    "shorts scissors thanks odds ashes premises outskirts"
)
#: Names that end in `s` (Adams is not two Adams): a name is never made singular.
_NAMES_S = _set(
    "adams jones williams roberts peters edwards hastings james charles andrews richards "
    "simmons stevens phillips collins evans jenkins hopkins watkins perkins matthews "
    "michaels daniels samuels reynolds rogers sanders saunders sellers walters waters "
    "powers owens myers meyers hughes hayes banks brooks burns fields gates hills holmes "
    "howells jacobs lyons mills moss nichols rhodes ross sims stokes woods wells dickens "
    "cummings gibbs higgs bates coates dawkins dickins emmons fuchs kings mathews sands "
    "venus texas kansas arkansas athens paris brussels wales los angeles las vegas memphis "
    "marcus nicholas douglas lucas thomas elias jesus moses achilles hercules hermes "
    "mercedes lexus barnes noble sachs lehman"
)

# A quoted phrase, in the marks languages quote with: "...", “...”, „...“, «...»,
# »...«, 「...」, 『...』; an unclosed quote runs to the end.
_PHRASE = re.compile(
    r'["\u201c\u201d\u201e]([^"\u201c\u201d\u201e]*)(?:["\u201c\u201d]|$)'
    r"|\u00ab([^\u00bb]*)(?:\u00bb|$)"
    r"|\u00bb([^\u00ab]*)(?:\u00ab|$)"
    r"|\u300c([^\u300d]*)(?:\u300d|$)"
    r"|\u300e([^\u300f]*)(?:\u300f|$)"
)
# Superscripts (an exponent: 10², x⁻¹), which NFKC would make plain digits of the number
# before them ("10²" would meet "102"): written as what they mean, "^2", first.
_SUPERSCRIPT = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u207e]+")
# A word: letters and digits, with the marks that make versions, languages, sites,
# sums and grades (3.11, c++, c#, .net, node.js, gpt-4o, site:github.com, $100, 50%,
# 1,000, A+, C-).
_WORD = re.compile(
    r"[-+]?[$€£¥@#.]?[\w](?:[\w'’+#]|[.\-/:@](?=\w)|,(?=\d{3}))*(?:[+#%]|-(?!\w))*",
)
#: ASCII symbols that say something (`>`, `=`, `$`, an operator between numbers: `5 * 3`
#: is not `5 / 3`)...: the backtick only quotes code.
_ASCII_SYMBOLS = frozenset("$%*+/<=>^|~")
#: A number's place among the query's numbers: `#0=1990` (no word can be written so).
_NUMBER_AT = "#{}={}"
#: The key of a query with nothing left to forgive: its text (no word starts so).
_NOTHING = "\x00"


def _symbol(char: str) -> bool:
    """Whether `char` is a symbol (Unicode's S categories: math, currency, emoji...)."""
    if char < "\x80":
        return char in _ASCII_SYMBOLS
    return unicodedata.category(char)[0] == "S"


def _tokens(text: str) -> list[str]:
    """`text` as words and, between them, the symbols (each on its own), in order."""
    out: list[str] = []
    end = 0
    for match in _WORD.finditer(text):
        out += [c for c in text[end : match.start()] if _symbol(c)]
        out.append(match.group())
        end = match.end()
    out += [c for c in text[end:] if _symbol(c)]
    return out


def _words(text: str) -> list[str]:
    """`text` as words and symbols, in order: apostrophes unified, possessives and
    contractions undone (`tavily's` -> `tavily`, `isn't` -> `is not`)."""
    out: list[str] = []
    for word in _tokens(text):
        word = word.replace("’", "'")
        if word in _CONTRACTIONS:
            out += _CONTRACTIONS[word].split()
        elif word.endswith("n't") and len(word) > 3:
            out += [word[:-3], "not"]
        elif word.endswith("'s"):
            out.append(word[:-2])
        else:
            out.append(word)
    return [w for w in out if w]


def _singular(word: str) -> str:
    """`word` without a plural ending, when it surely is one: letters only (a word
    with digits or marks is a version, "1990s"), no name ("Jones", "Adams") and no
    word whose plural means something else ("glasses", "news"). Whatever its case:
    "Kubernetes" and "kubernetes" must meet."""
    if (
        len(word) < 4
        or not word.isalpha()
        or word in _KEEP_S
        or word in _NAMES_S
        or not word.endswith("s")
        or word.endswith(("ss", "us", "is", "'s"))
    ):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    return word[:-1]


def near_query(query: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The part of [`near_key`][searchfuse.guard.near_key] that reads the query: its
    words, sorted, and its quoted phrases, each in order.

    `near_query("What are Tavily's rate limits?") == near_query("tavily rate limit")`;
    `near_query("python 3.11") != near_query("python 3.12")`.
    """
    text = _SUPERSCRIPT.sub(_exponent, query)
    text = unicodedata.normalize("NFKC", text)
    quoted = ("".join(groups) for groups in _PHRASE.findall(text))
    phrases = tuple(sorted(tuple(w.casefold() for w in _words(p)) for p in quoted if p.strip()))
    plain = _PHRASE.sub(" ", text)
    originals = _words(plain)
    words: list[str] = []
    bound = ""  # binding words waiting for their word
    after_stop = True
    for i, original in enumerate(originals):
        word = original.casefold()
        if word == "how" and i + 1 < len(originals) and originals[i + 1].casefold() == "to":
            originals[i + 1] = "do"  # "how to install x" asks what "install x" asks
            continue
        if word.startswith("-") and len(word) > 1 and word[1].isalpha():
            bound, word = bound + "not:", word[1:]  # -term: the search operator for "without"
        elif word.startswith("+") and len(word) > 1 and word[1].isalpha():
            word = word[1:]  # +term: the search operator for "with", which a word says
        if word in STOP_WORDS or (word in _SOMETIMES_STOP and after_stop):
            after_stop = True
            continue
        if word in BINDING_WORDS or (len(word) == 1 and _symbol(word)):
            bound += word + ":"  # a symbol too: "> 100" is not "< 100"
            after_stop = True
            continue
        words.append(bound + _singular(word))
        bound, after_stop = "", False
    if bound:
        words.append(bound)
    if not words and not phrases:
        return (_NOTHING + " ".join(text.casefold().split()),), ()
    return tuple(sorted(_numbered(words))), phrases


def _exponent(match: re.Match[str]) -> str:
    return "^" + unicodedata.normalize("NFKC", match.group())


def _numbered(words: list[str]) -> list[str]:
    """`words` with each number marked by its place among the numbers, when there
    are several: word order is forgiven, but "born 1990 died 2020" is not "born 2020
    died 1990", nor "4,5" "5,4"."""
    numbers = [i for i, word in enumerate(words) if any(c.isdigit() for c in word)]
    if len(numbers) < 2:
        return words
    out = list(words)
    for place, i in enumerate(numbers):
        out[i] = _NUMBER_AT.format(place, words[i])
    return out


def near_key(query: str, /, **params: Any) -> Hashable:
    """A cache key under which near-duplicate queries meet (see the module docstring):
    [`near_query`][searchfuse.guard.near_query] plus the other arguments, as
    [`search_key`][searchfuse.guard.search_key] has them.

    `near_key("Rate limits of Tavily?", max_results=5) == near_key("tavily rate limit",
    max_results=5)`; a different `max_results` is a different key.
    """
    return near_key_of(query, params)


def near_key_of(query: str, params: Mapping[str, Any]) -> Hashable:
    """[`near_key`][searchfuse.guard.near_key] with the arguments as a mapping."""
    rest: tuple[Any, ...] = search_key_of("", params)  # type: ignore[assignment]
    return ("near", near_query(query), rest[1:])
