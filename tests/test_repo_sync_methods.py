"""Repository.pack / unpack / changes_since, and ctxstore.clone / fetch / pull / push over them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ctxstore import BadPack, NonFastForward, Repository, clone, fetch, pull, push


def _repo(path: Path, *texts: str) -> Repository:
    repo = Repository.init(path)
    for text in texts:
        repo.append("main", [{"role": "user", "content": text}])
    return repo


def test_changes_since_is_a_pack_that_unpacks_to_the_same_view(tmp_path: Path):
    """A pack of main since a base, applied where the base is, reproduces main."""
    src = _repo(tmp_path / "src", "one", "two")
    base = src.resolve("main")
    src.append("main", [{"role": "assistant", "content": "three"}])
    dst = Repository.init(tmp_path / "dst")
    dst.unpack(io.BytesIO(b"".join(src.pack("main"))), {"refs/heads/main": (None, base)})
    dst.unpack(src.changes_since("main", base), {"refs/heads/main": (base, src.resolve("main"))})
    assert dst.history("main").render() == src.history("main").render()
    assert dst.fsck().ok


def test_unpack_of_a_corrupt_pack_changes_nothing(tmp_path: Path):
    """A flipped byte is refused with BadPack and the refs stay as they were."""
    src = _repo(tmp_path / "src", "one")
    data = bytearray(b"".join(src.pack("main")))
    data[len(data) // 2] ^= 0xFF
    dst = _repo(tmp_path / "dst", "mine")
    before = dst.refs()
    with pytest.raises(BadPack):
        dst.unpack(io.BytesIO(bytes(data)), {"refs/heads/other": (None, src.resolve("main"))})
    assert dst.refs() == before


def test_clone_pull_push_through_the_top_level_functions(tmp_path: Path):
    """clone records origin; pull fast-forwards; a divergent push is refused until pull --rebase."""
    hub = _repo(tmp_path / "hub", "hello")
    hub.close()
    mine = clone(str(tmp_path / "hub"), tmp_path / "mine")
    theirs = clone(str(tmp_path / "hub"), tmp_path / "theirs")
    assert mine.remotes() == {"origin": str(tmp_path / "hub")}
    theirs.append("main", [{"role": "user", "content": "from theirs"}])
    push(theirs, "origin", ["main"])
    mine.append("main", [{"role": "user", "content": "from mine"}])
    with pytest.raises(NonFastForward):
        push(mine, "origin", ["main"])
    pull(mine, "origin", "main", rebase=True)
    push(mine, "origin", ["main"])
    pull(theirs, "origin", "main")
    contents = [m["content"] for m in theirs.history("main").render()]
    assert contents == ["hello", "from theirs", "from mine"]
    fetch(mine, "origin")
    assert mine.refs()["refs/remotes/origin/main"] == mine.refs()["refs/heads/main"]
