"""The CLI on a chain: status grouped by provider, test-keys probing only where it is free."""

from __future__ import annotations

from pathlib import Path

import pytest

from searchfuse.cli import main
from searchfuse.testing import FakeTavily

from .scripted import isolate_cli

TAVILY_KEY = "tvly-dev-test0001"
EXA_KEY = "0a1b2c3d-0000-4000-8000-00000000e5a1"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_cli(tmp_path, monkeypatch)
    return tmp_path


def test_status_and_test_keys_on_a_chain(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeTavily(keys=[TAVILY_KEY])
    with fake.serve() as url:
        monkeypatch.setenv("TAVILY_API_KEYS", TAVILY_KEY)
        monkeypatch.setenv("EXA_API_KEYS", EXA_KEY)
        monkeypatch.setenv("TAVILY_BASE_URL", url)
        monkeypatch.setenv("EXA_BASE_URL", "http://127.0.0.1:9")  # nothing may reach it
        assert main(["status"]) == 0
        out, _ = capsys.readouterr()
        code = main(["test-keys"])
        probed, _ = capsys.readouterr()
    assert out.index("tavily\n") < out.index("exa\n")
    assert out.split("exa\n")[1].splitlines()[0].split()[:2] == ["KEY", "ACCOUNT"]
    assert code == 0  # the key that could be checked answered; Exa's was not checked
    assert "tavily  tvly-dev-…0001  ok" in probed
    assert "exa  …e5a1  not probed: a probe costs a search" in probed
    assert [r.path for r in fake.requests] == ["/usage"]
    for text in (out, probed):
        assert TAVILY_KEY not in text and EXA_KEY not in text


def test_init_writes_an_example_that_shows_a_chain(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    example = (isolated / "config" / "keys.json").read_text()
    assert '"providers": ["tavily", "exa", "searxng"]' in example
    assert main(["status"]) == 2  # the placeholders must be replaced first
    assert "placeholder" in capsys.readouterr().err
