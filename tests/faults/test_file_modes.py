"""Every file searchfuse creates is private: state (JSON and SQLite, with its WAL and
index), the JSON store's lock and journal, keys-file backups and migrations, files set
aside, and the keys file `init` writes are mode 0600, folders it makes 0700 — under a
umask of 0, where nothing else would make them so. The published templates hold no
secret and are meant to be shared (0644).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from searchfuse import Router
from searchfuse.cli import main
from searchfuse.testing import FakeClock, FakeTavily

from ..conftest import leaks_in

K1, K2 = "tvly-dev-test0001", "tvly-dev-test0002"
#: Meant to be committed or shipped: the keys file's shape, placeholders for keys.
PUBLIC = {"keys.example.json", "keys.publish.json", ".gitignore"}


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


def test_every_file_searchfuse_creates_is_private(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    fake = FakeTavily((K1, K2), clock=clock)
    # `init`: the project, its keys file and state folder.
    assert main(["init", str(tmp_path)]) == 0
    keys = tmp_path / "config" / "keys.json"
    # A legacy keys file: backed up, then migrated.
    keys.write_text(json.dumps({"cooldown_minutes": 1, "keys": [K1, K2]}))
    keys.chmod(0o600)
    router = Router.from_config(keys, transport=fake.transport(), clock=clock)
    router.search("sqlite")  # state/searchfuse.db, its WAL and index
    state = tmp_path / "state"
    # The JSON store: a new file, and one another program made world-readable.
    Router([K1], state=state / "new.json", transport=fake.transport(), clock=clock).search("a")
    (state / "old.json").write_text(json.dumps({"month": "2026-01", "keys": {}}))
    (state / "old.json").chmod(0o666)
    Router([K1], state=state / "old.json", transport=fake.transport(), clock=clock).search("b")
    # Damaged state of its own, set aside: JSON and SQLite.
    (state / "torn.json").write_bytes(b'{"month": "2026-01", "keys": {')
    Router([K1], state=state / "torn.json", transport=fake.transport(), clock=clock).search("c")
    (state / "torn.db").write_bytes(b"SQLite format 3\x00" + b"searchfuse_meta" * 300)
    Router([K1], state=state / "torn.db", transport=fake.transport(), clock=clock).search("d")

    modes = _modes(tmp_path)
    names = {Path(name).name for name in modes}
    for expected in (
        "searchfuse.db-wal",
        "searchfuse.db-shm",
        "new.json.lock",
        "old.json.lock",
    ):
        assert expected in names, sorted(names)
    assert any(".bak." in n for n in names) and any(".corrupt." in n for n in names)
    assert sum(".corrupt." in n for n in names) >= 2
    wrong = {
        name: f"{mode:04o}"
        for name, mode in modes.items()
        if Path(name).name not in PUBLIC | {"config"}
        and mode != (0o700 if (tmp_path / name).is_dir() else 0o600)
    }
    assert wrong == {}
    # The keys file's folder may be listed, never written by others (they could
    # replace keys.json); what is shared holds no key.
    assert modes["config"] & 0o022 == 0
    for name in PUBLIC - {".gitignore"}:
        assert not leaks_in((tmp_path / "config" / name).read_text())
