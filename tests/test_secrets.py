"""Keys are shown masked or fingerprinted, never raw."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from searchfuse._secrets import fingerprint, mask, redact


def test_mask_keeps_prefix_and_last_four() -> None:
    assert mask("tvly-dev-test0001") == "tvly-dev-…0001"
    assert mask("tvly-abcdefgh1234") == "tvly-…1234"


def test_short_keys_show_only_a_fingerprint() -> None:
    assert mask("tvly-abc") == f"key#{fingerprint('tvly-abc')[:8]}"


def test_fingerprint_is_stable_and_short() -> None:
    assert fingerprint("tvly-dev-test0001") == fingerprint("tvly-dev-test0001")
    assert len(fingerprint("tvly-dev-test0001")) == 12
    assert fingerprint("tvly-dev-test0001") != fingerprint("tvly-dev-test0002")


def test_redact_removes_known_and_unknown_keys() -> None:
    text = (
        "key tvly-dev-test0001 failed; also tvly-prod-zzzzzzzz9999; "
        "Authorization: Bearer abcdefghijkl"
    )
    out = redact(text, ["tvly-dev-test0001"])
    assert "tvly-dev-test0001" not in out and "tvly-dev-…0001" in out
    assert "zzzzzzzz9999" not in out
    assert "abcdefghijkl" not in out


PREFIXED = ["tvly-dev-test0001", "tvly-dev-test0001extra9", "tvly-dev-test0001extra9more7"]


def test_redact_holds_for_keys_that_are_prefixes_of_each_other() -> None:
    for order in (PREFIXED, PREFIXED[::-1], [PREFIXED[1], PREFIXED[0], PREFIXED[2]]):
        text = " | ".join(f"key={k};" for k in PREFIXED)
        out = redact(text, order)
        assert "extra9" not in out and "more7" not in out and "test0001" not in out
        assert out == " | ".join(f"key={mask(k)};" for k in PREFIXED)


def _one_pattern(text: str, keys: list[str]) -> str:
    """The reference: one regular expression of every key, longest first."""
    import re

    from searchfuse._secrets import mask

    known = sorted({k for k in keys if k}, key=len, reverse=True)
    if not known:
        return text
    return re.compile("|".join(re.escape(k) for k in known)).sub(lambda m: mask(m.group(0)), text)


_KEY = st.text(alphabet=st.sampled_from("abcXY-_09 ,'\"k"), min_size=1, max_size=12)


@given(
    keys=st.lists(_KEY, min_size=1, max_size=6),
    parts=st.lists(st.one_of(_KEY, st.sampled_from([" ", ", ", '"', "x"])), max_size=12),
)
def test_known_keys_mask_exactly_what_one_pattern_of_every_key_masks(
    keys: list[str], parts: list[str]
) -> None:
    from searchfuse._secrets import KnownKeys

    text = "".join(parts + keys[:2])
    assert KnownKeys(keys).mask_in(text) == _one_pattern(text, keys)


def test_known_keys_find_a_key_glued_to_punctuation_and_to_another_key() -> None:
    from searchfuse._secrets import KnownKeys, redact

    a, b = "tvly-dev-test0001", "tvly-dev-test0001extra"
    text = f'error: "{a}",{b};{a}{a} Bearer abcdefghijk'
    shown = redact(text, KnownKeys([a, b]))
    assert a not in shown and "test0001extra" not in shown
    assert shown.count("tvly-dev-…0001") == 3 and "tvly-dev-…xtra" in shown
    assert "[redacted]" in shown
