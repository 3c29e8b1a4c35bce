"""Repository: init/open, fast-forward commits and rebase, refs, diff, fsck, gc, stats, config."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CountingStore, msg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import CommitResult, Repository
from ctxstore.errors import (
    InvalidInput,
    InvalidRefName,
    MissingObject,
    NonFastForward,
    NotARepository,
    RepositoryExists,
    UnknownRef,
    UnknownRevision,
)
from ctxstore.format.codec import encode
from ctxstore.format.objects import SeqNode, encode_object, parse_object
from ctxstore.format.seq import LEAF_TARGET
from ctxstore.history.message_history import MessageHistory
from ctxstore.ids import from_hex, object_id, to_hex
from ctxstore.store.memory import MemoryStore


@pytest.fixture(params=["memory", "lmdb"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    if request.param == "memory":
        r = Repository.memory()
    else:
        r = Repository.init(tmp_path / "repo", durable=False)
    with r:
        yield r


# -- lifecycle -------------------------------------------------------------------------------------------

def test_init_refuses_an_existing_repository(tmp_path: Path) -> None:
    Repository.init(tmp_path / "r", durable=False).close()
    with pytest.raises(RepositoryExists):
        Repository.init(tmp_path / "r")


def test_open_without_a_repository_is_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(NotARepository):
        Repository.open(tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError):  # NotARepository is also a FileNotFoundError
        Repository.open(tmp_path / "plain")


def test_a_repository_of_an_earlier_format_is_refused_naming_it(tmp_path: Path) -> None:
    """Format 6 keeps leaf packs in pieces; a repository of format 5 (each pack whole) is refused on open,
    not read as damaged."""
    Repository.init(tmp_path / "r", durable=False).close()
    assert (tmp_path / "r" / "format").read_text() == "ctxstore repository 7\n"
    (tmp_path / "r" / "format").write_text("ctxstore repository 5\n")
    with pytest.raises(NotARepository, match="format 'ctxstore repository 5'"):
        Repository.open(tmp_path / "r")


def test_open_with_create_makes_a_repository_once_and_then_opens_it(tmp_path: Path) -> None:
    made = Repository.open(tmp_path / "r", create=True)
    made.append("main", [msg("kept")])
    made.close()
    again = Repository.open(tmp_path / "r", create=True)  # opens, does not make a new one
    assert [m["content"] for m in again.history("main").render()] == ["kept"]
    again.close()
    with pytest.raises(NotARepository):
        Repository.open(tmp_path / "absent", create=True, readonly=True)  # a reader never makes one


def test_reopened_repository_keeps_refs_and_histories(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        repo.commit("main", repo.history("main").extend([msg("a"), msg("b", "assistant")]))
    with Repository.open(tmp_path / "r") as repo:
        assert repo.history("main").render() == [msg("a"), msg("b", "assistant")]
        assert list(repo.refs()) == ["refs/heads/main"]


# -- commit -------------------------------------------------------------------------------------------------

def test_unborn_ref_gives_an_empty_history(repo: Repository) -> None:
    history = repo.history("support/42")
    assert history.size == 0 and history.render() == []
    assert repo.head("support/42") is None


def test_commit_moves_the_ref_and_writes_only_missing_objects(repo: Repository) -> None:
    first = repo.history("main").append(msg("hello"))
    assert repo.commit("main", first) == CommitResult("refs/heads/main", None, first.revision_id)
    held = set(repo.store)
    second = repo.history("main").append(msg("again"))
    made = {oid for oid, _ in second.workspace.pending()}
    assert repo.commit("main", second) == CommitResult("refs/heads/main", first.revision_id, second.revision_id)
    assert repo.head("main") == second.revision_id
    # One entry and one revision, whose spine holds the rewritten leaf, and the nodes the append closed
    # (the first leaf, when it ended at a cut, in 1 of 32): what the history made is stored, and only
    # that is new.
    assert set(repo.store) == held | made
    kinds = Counter(type(parse_object(repo.store.get(oid))).__name__ for oid in made - held)
    assert kinds["Entry"] == kinds["Revision"] == 1 and set(kinds) <= {"Entry", "Revision", "SeqNode"}
    assert second.workspace.pending() == []


def test_commit_of_a_long_uncommitted_lineage_fast_forwards(repo: Repository) -> None:
    # More new revisions than the in-transaction walk looks at: the commit walks the lineage once
    # outside the transaction and then lands, rather than retrying until it gives up.
    repo.commit("main", repo.history("main").append(msg("base")))
    history = repo.history("main")
    for i in range(600):
        history = history.append(msg(f"m{i}"))
    repo.commit("main", history)
    assert repo.head("main") == history.revision_id
    assert repo.history("main").size == 601


def test_commit_of_a_stale_history_raises_and_writes_nothing(repo: Repository) -> None:
    repo.commit("main", repo.history("main").append(msg("base")))
    base = repo.head("main")
    a = repo.history("main").append(msg("from a"))
    b = repo.history("main").append(msg("from b"))
    repo.commit("main", a)
    before = len(repo.store)
    with pytest.raises(NonFastForward) as err:
        repo.commit("main", b)
    assert err.value.current == a.revision_id and err.value.expected == base
    assert a.revision_id[:12] in str(err.value) and base is not None and base[:12] in str(err.value)
    assert len(repo.store) == before
    assert repo.head("main") == a.revision_id


def test_rebase_keeps_both_writers_messages(repo: Repository) -> None:
    repo.commit("main", repo.history("main").append(msg("base")))
    a = repo.history("main").append(msg("a1")).append(msg("a2"))
    b = repo.history("main").append(msg("b1"))
    repo.commit("main", a)
    rebased = repo.rebase(b, onto="main")
    repo.commit("main", rebased)
    assert repo.history("main").render() == [msg("base"), msg("a1"), msg("a2"), msg("b1")]
    assert repo.fsck().ok


def test_force_moves_the_ref_and_keeps_the_old_head_in_the_reflog(repo: Repository) -> None:
    repo.commit("main", repo.history("main").append(msg("one")))
    old = repo.head("main")
    other = MessageHistory().append(msg("unrelated"))
    with pytest.raises(NonFastForward):
        repo.commit("main", other)
    repo.commit("main", other, force=True)
    assert repo.head("main") == other.revision_id
    log = repo.reflog("main")
    assert old is not None and log[0].old == old and log[0].new == other.revision_id
    assert repo.fsck().ok and repo.fsck().reachable >= 1


def test_unborn_ref_accepts_any_history(repo: Repository) -> None:
    history = MessageHistory().extend([msg("x"), msg("y")])
    repo.commit("imported", history)
    assert repo.history("imported").render() == [msg("x"), msg("y")]


def test_commit_refuses_a_history_whose_objects_are_elsewhere(repo: Repository) -> None:
    elsewhere = Repository.memory()
    elsewhere.commit("main", elsewhere.history("main").append(msg("far away")))
    foreign = elsewhere.history("main").append(msg("more"))
    before = len(repo.store)
    with pytest.raises(MissingObject):
        repo.commit("main", foreign)
    assert len(repo.store) == before and repo.refs() == {}


def test_commit_many_moves_every_ref_or_none(repo: Repository) -> None:
    repo.commit("b", repo.history("b").append(msg("b0")))
    a = repo.history("a").append(msg("a"))
    stale = MessageHistory().append(msg("not b's descendant"))
    with pytest.raises(NonFastForward):
        repo.commit_many({"a": a, "b": stale})
    assert repo.head("a") is None
    fork = repo.history("b").fork()
    assert repo.commit_many({"a": a, "c": fork}) == [CommitResult("refs/heads/a", None, a.revision_id),
                                                      CommitResult("refs/heads/c", None, fork.revision_id)]
    assert set(repo.refs()) == {"refs/heads/a", "refs/heads/b", "refs/heads/c"}


def test_append_rebases_until_it_lands(repo: Repository) -> None:
    first = repo.append("main", [msg("one")])
    assert first.ref == "refs/heads/main" and first.old is None and repo.head("main") == first.new
    second = repo.append("main", [msg("two"), msg("three")])
    assert second.old == first.new and repo.head("main") == second.new
    assert [m["content"] for m in repo.history("main").render()] == ["one", "two", "three"]


# -- refs ---------------------------------------------------------------------------------------------

def test_refs_prefix_delete_and_reflog_of_a_deleted_ref(repo: Repository) -> None:
    h = repo.history("support/1").append(msg("s"))
    repo.commit("support/1", h)
    repo.commit("support/2", h.fork())
    repo.commit("main", h.fork())
    assert set(repo.refs("support/")) == {"refs/heads/support/1", "refs/heads/support/2"}
    assert repo.delete_ref("support/1") == "refs/heads/support/1"
    assert "refs/heads/support/1" not in repo.refs()
    assert repo.reflog("refs/heads/support/1")[0].new is None
    with pytest.raises(UnknownRef):
        repo.delete_ref("support/1")


def test_invalid_ref_names_are_refused(repo: Repository) -> None:
    for bad in ("a..b", "x/", "has space", "ctl\x01"):
        with pytest.raises(InvalidRefName):
            repo.history(bad)
        with pytest.raises(InvalidRefName):
            repo.commit(bad, MessageHistory())
    assert repo.refs() == {}


def test_resolve_names_revisions_prefixes_and_ancestors(repo: Repository) -> None:
    h1 = repo.history("main").append(msg("1"))
    h2 = h1.append(msg("2"))
    repo.commit("main", h2)
    assert repo.resolve("main") == h2.revision_id
    assert repo.resolve("refs/heads/main") == h2.revision_id
    assert repo.resolve(h1.revision_id) == h1.revision_id
    assert repo.resolve(h2.revision_id[:16]) == h2.revision_id
    assert repo.resolve("main~1") == h1.revision_id
    with pytest.raises(UnknownRevision):
        repo.resolve("main~9")
    with pytest.raises(UnknownRevision):
        repo.resolve("nope")
    assert repo.history(h1.revision_id).render() == [msg("1")]


def test_rename_and_set_ref(repo: Repository) -> None:
    h = repo.history("main").append(msg("x"))
    repo.commit("main", h)
    repo.set_ref("fork", "main", create_only=True)
    with pytest.raises(NonFastForward):
        repo.set_ref("fork", "main", create_only=True)
    assert repo.rename_ref("fork", "renamed") == "refs/heads/renamed"
    assert repo.refs() == {"refs/heads/main": h.revision_id, "refs/heads/renamed": h.revision_id}


# -- diff -------------------------------------------------------------------------------------------------

def test_diff_reports_added_removed_and_moved(repo: Repository) -> None:
    entries = [{"id": f"e{i}", "message": msg(str(i))} for i in range(6)]
    base = repo.history("main").extend(entries)
    repo.commit("main", base)
    changed = base.edit([{"op": "remove", "id": "e1"}, {"op": "move", "ids": ["e4"], "before": "e0"}])
    changed = changed.append({"id": "new", "message": msg("n")})
    repo.commit("other", changed)
    d = repo.diff("main", "other")
    assert d.added == ["new"] and d.removed == ["e1"] and d.moved == ["e4"]
    assert not repo.diff("main", "main")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keep=st.lists(st.booleans(), min_size=60, max_size=200), extra=st.integers(0, 40))
def test_diff_matches_the_set_difference(keep: list[bool], extra: int) -> None:
    """Added and removed are exactly the ids one side has and the other lacks, in the new side's order."""
    repo = Repository.memory()
    ids = [f"e{i}" for i in range(len(keep))]
    a = repo.history("a").extend([{"id": i, "message": msg(i)} for i in ids])
    kept = [i for i, k in zip(ids, keep, strict=True) if k]
    b = a.with_view(kept).extend([{"id": f"x{j}", "message": msg(f"x{j}")} for j in range(extra)])
    repo.commit_many({"a": a, "b": b})
    d = repo.diff("a", "b")
    assert d.removed == [i for i in ids if i not in kept]
    assert d.added == [f"x{j}" for j in range(extra)]
    assert d.moved == []


# -- fsck and gc --------------------------------------------------------------------------------------

def test_fsck_is_clean_on_a_sound_repository(repo: Repository) -> None:
    h = repo.history("main").extend([msg(str(i)) for i in range(50)])
    repo.commit("main", h)
    report = repo.fsck()
    assert report.ok and report.objects == len(repo.store) and report.refs == 1
    assert report.unreachable == 0


def test_fsck_detects_a_corrupted_object(repo: Repository) -> None:
    h = repo.history("main").append(msg("precious"))
    repo.commit("main", h)
    [(_, entry_oid)] = [(e.id, oid) for e, oid in _entry_oids(repo, h)]
    repo.store.delete_many([entry_oid])
    repo.store.put_many([(entry_oid, encode({"type": "blob", "data": "tampered"}))])
    report = repo.fsck()
    assert not report.ok
    assert any("corrupt" in p for p in report.problems)


def test_fsck_detects_a_sequence_node_not_chunked_by_the_rule(repo: Repository) -> None:
    repo.commit("main", repo.history("main").append(msg("fine")))
    assert repo.fsck().ok
    n = 0
    while True:  # an item that is a cut, placed first in a leaf of two: the leaf should have ended there
        cut = object_id(encode({"n": n}))
        if int.from_bytes(cut[:4], "big") < 2**32 // LEAF_TARGET:
            break
        n += 1
    node, data = encode_object(SeqNode(0, [["a", cut], ["b", None]]))
    repo.store.put_many([(node, data)])
    report = repo.fsck()
    assert any("not chunked by the rule" in p and to_hex(node) in p for p in report.problems)


def test_fsck_detects_a_missing_reachable_object(repo: Repository) -> None:
    h = repo.history("main").append(msg("precious"))
    repo.commit("main", h)
    [(_, entry_oid)] = [(e.id, oid) for e, oid in _entry_oids(repo, h)]
    repo.store.delete_many([entry_oid])
    report = repo.fsck()
    assert any("missing" in p for p in report.problems)


def _entry_oids(repo: Repository, history: MessageHistory) -> list[tuple[Any, bytes]]:
    from ctxstore.format import seq

    ws = history.workspace
    rev = ws.revision(from_hex(history.revision_id))
    return [(ws.entry(oid), oid) for _, oid in seq.iter_items(rev.seq, ws.node) if oid is not None]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


def test_gc_deletes_only_old_unreachable_objects() -> None:
    clock = Clock()
    repo = Repository(MemoryStore(clock=clock), clock=clock)
    repo.commit("main", repo.history("main").append(msg("kept")))
    gone = repo.history("gone").append(msg("only in a deleted ref"))
    repo.commit("gone", gone)
    repo.delete_ref("gone")
    old = [encode({"type": "blob", "data": f"old {i}"}) for i in range(3)]
    repo.store.put_many([(object_id(d), d) for d in old])
    clock.now += 3_600_000
    young = encode({"type": "blob", "data": "young"})
    repo.store.put_many([(object_id(young), young)])
    clock.now += 1000
    report = repo.gc(grace=60)
    assert report.kept_young == 1 and report.bytes > 0
    assert all(not repo.store.has(object_id(d)) for d in old)
    assert repo.store.has(object_id(young))
    # The deleted ref's reflog records are older than the grace: dropped, and what only they reached is
    # deleted too (its revision and entry, at least); everything main reaches survives.
    assert report.reflog_entries_expired == 2 and report.deleted >= 3 + 2
    assert not repo.store.has(from_hex(gone.revision_id))
    assert repo.history("main").render() == [msg("kept")]
    assert repo.fsck().ok


def test_gc_keeps_what_a_deleted_refs_young_reflog_reaches(repo: Repository) -> None:
    """Within the grace period a deleted ref's reflog still protects its conversation."""
    gone = repo.history("gone").append(msg("only in a deleted ref"))
    repo.commit("gone", gone)
    repo.delete_ref("gone")
    report = repo.gc(grace=3600)
    assert report.deleted == 0 and report.reflog_entries_expired == 0
    assert repo.history(gone.revision_id).render() == [msg("only in a deleted ref")]


def test_gc_with_grace_keeps_young_unreachable_objects(repo: Repository) -> None:
    repo.commit("main", repo.history("main").append(msg("x")))
    data = encode({"type": "blob", "data": "dangling"})
    repo.store.put_many([(object_id(data), data)])
    report = repo.gc(grace=3600)
    assert report.deleted == 0 and report.kept_young == 1
    assert repo.store.has(object_id(data))
    assert repo.gc(grace=0).deleted == 1
    assert repo.fsck().ok and repo.history("main").render() == [msg("x")]


def test_gc_refuses_a_negative_grace(repo: Repository) -> None:
    with pytest.raises(InvalidInput):
        repo.gc(grace=-1)


# -- stats, config, remotes -----------------------------------------------------------------------

def test_stats_count_sharing_between_forks(repo: Repository) -> None:
    h = repo.history("main").extend([msg("x" * 200 + str(i)) for i in range(100)])
    repo.commit("main", h)
    one = repo.stats().logical_bytes
    for n in range(5):
        repo.commit(f"fork/{n}", h.fork().append(msg(f"fork {n}")))
    s = repo.stats()
    assert s.refs == 6 and s.objects == len(repo.store)
    # Each fork's view counts in full, though the store holds the shared entries once (each revision
    # holds its own spine, so revision bytes are not what is shared).
    kinds = Counter(type(parse_object(repo.store.get(oid))).__name__ for oid in repo.store)
    assert kinds["Entry"] == 100 + 5
    assert s.logical_bytes > 6 * one
    assert s.saved_bytes == s.logical_bytes - s.stored_bytes > 0


def test_config_and_remotes(repo: Repository) -> None:
    repo.config["user.name"] = "ada"
    assert repo.config.get("user.name") == "ada" and repo.config.get("unset", "d") == "d"
    repo.remote_add("origin", "http://127.0.0.1:9/repo")
    repo.remote_add("backup", "/srv/backup")
    assert repo.remotes() == {"backup": "/srv/backup", "origin": "http://127.0.0.1:9/repo"}
    with pytest.raises(InvalidInput):
        repo.remote_add("origin", "elsewhere")
    with pytest.raises(InvalidInput):
        repo.remote_add("bad/name", "x")
    repo.remote_remove("backup")
    assert repo.remotes() == {"origin": "http://127.0.0.1:9/repo"}
    with pytest.raises(UnknownRef):
        repo.remote_remove("backup")


# -- lazy loading -------------------------------------------------------------------------------------

def _reads_to_append(size: int) -> int:
    store = MemoryStore()
    builder = Repository(store)
    history = builder.history("main")
    for start in range(0, size, 20_000):
        history = history.extend([msg(f"m{i}") for i in range(start, min(size, start + 20_000))])
    builder.commit("main", history)
    counting = CountingStore(store)
    repo = Repository(counting)  # type: ignore[arg-type]
    loaded = repo.history("main")
    repo.commit("main", loaded.append(msg("one more")))
    assert repo.history("main").size == size + 1
    return counting.gets


def test_opening_a_large_conversation_and_appending_reads_only_the_head_revision() -> None:
    # The revision holds its tree's spine, which is all an append changes: no node, no entry is read
    # (the last read is the `size` check above, of the new head, which the commit wrote).
    assert _reads_to_append(100) == _reads_to_append(100_000) == 2


def _reads_to_rebase(revisions: int) -> int:
    store = MemoryStore()
    builder = Repository(store)
    for i in range(revisions):
        builder.append("main", [msg(f"m{i}")])
    counting = CountingStore(store)
    repo = Repository(counting)  # type: ignore[arg-type]
    mine = repo.history("main").append(msg("mine"))
    builder.append("main", [{"id": "theirs", "message": msg("theirs")}])  # another writer wins the race
    before = counting.gets
    result = repo.commit("main", mine, rebase=True)
    assert [m["content"] for m in repo.history(result.new).render()][-2:] == ["theirs", "mine"]
    return counting.gets - before


def test_a_rebase_reads_the_two_lineages_ends_not_the_whole_conversation() -> None:
    """A freshly loaded history that lost a race rebases reading what changed: a few objects whether the
    conversation has 50 revisions or 2,000 (appended ids are checked against the other side's new
    revisions only, since the common lineage was checked when they were made)."""
    # A few objects either way (how many depends on whether an append closes a chunk, which random entry
    # ids decide); walking the lineage would read over 2,000 at 2,000 revisions.
    small, large = _reads_to_rebase(50), _reads_to_rebase(2000)
    assert small < 20 and large < 20


def test_a_commit_stamps_what_it_writes_and_leaves_held_objects_of_a_foreign_history_alone() -> None:
    clock = Clock()
    repo = Repository(MemoryStore(clock=clock), clock=clock)
    outside = MessageHistory().extend([msg(f"m{i}") for i in range(20)])  # built over no store
    repo.commit("a", outside)
    first = {oid: repo.store.written_at(oid) for oid, _ in outside.workspace.pending()}
    assert set(first.values()) == {clock.now}
    clock.now += 5000
    more = outside.append(msg("one more"))
    repo.commit("b", more)  # its pending objects still include everything `outside` made
    assert all(repo.store.written_at(oid) == when for oid, when in first.items())
    fresh = [oid for oid, _ in more.workspace.pending() if oid not in first]
    assert fresh and all(repo.store.written_at(oid) == clock.now for oid in fresh)
    assert repo.fsck().ok
    # A history loaded here writes its new objects without looking them up; they are stamped too.
    clock.now += 5000
    local = repo.history("b").append(msg("local"))
    made = [oid for oid, _ in local.workspace.pending()]
    repo.commit("b", local)
    assert all(repo.store.written_at(oid) == clock.now for oid in made)
    assert repo.history("b").size == 22


# -- errors mean one thing each -------------------------------------------------------------------

def test_a_wrong_kind_of_object_where_a_node_belongs_is_damaged_data(repo: Repository) -> None:
    """diff over a tree whose node id names an entry reports damage (DamagedData), not a StoreError."""
    from ctxstore.errors import DamagedData, StoreError
    from ctxstore.format import seq

    entries = [{"id": f"e{i}", "message": msg(str(i) * 50)} for i in range(400)]
    base = repo.history("main").extend(entries)
    repo.commit("main", base)
    repo.commit("other", base.edit([{"op": "remove", "id": "e0"}]))  # rewrites the first subtree
    rev = parse_object(repo.store.get(from_hex(base.revision_id)))
    node_ids = [oid for oid, _ in seq.subtrees(rev.seq)]  # type: ignore[attr-defined]
    assert node_ids, "the view should have stored nodes left of its spine"
    [(_, entry_oid)] = _entry_oids(repo, repo.history("main"))[:1]
    repo.store.delete_many([node_ids[0]])
    repo.store.put_many([(node_ids[0], repo.store.get(entry_oid))])  # an entry's bytes under a node's id
    with pytest.raises(DamagedData) as info:
        repo.diff("main", "other")
    assert not isinstance(info.value, StoreError) and "fsck" in str(info.value)


def test_an_unset_config_key_is_unknown_setting_and_a_damaged_remote_list_is_damaged_data(
        repo: Repository) -> None:
    from ctxstore.errors import DamagedData, UnknownSetting

    with pytest.raises(UnknownSetting):
        repo.config["nothing.here"]
    with pytest.raises(KeyError):  # UnknownSetting is also a KeyError
        repo.config["nothing.here"]
    with repo.store.transaction(write=True) as txn:
        txn.set_config("remote.names", b"42")
    with pytest.raises(DamagedData):
        repo.remotes()


def test_append_that_keeps_losing_raises_ref_moved(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    """When another writer wins every race, append gives up with the retryable RefMoved."""
    from ctxstore.errors import RefMoved
    from ctxstore.repo import commit as commit_module

    repo.append("main", [msg("base")])
    real = commit_module.commit_many

    def racing(store: Any, lineage: Any, updates: Any, **kw: Any) -> Any:
        theirs = repo.history("main").append(msg("theirs"))
        real(store, lineage, {"main": theirs})  # another writer moves main first, every time
        return real(store, lineage, updates, **kw)

    monkeypatch.setattr(commit_module, "commit_many", racing)
    with pytest.raises(RefMoved):
        repo.append("main", [msg("mine")], retries=3)
    monkeypatch.undo()
    assert [m["content"] for m in repo.history("main").render()] == ["base"] + ["theirs"] * 3
