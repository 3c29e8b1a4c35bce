"""fsck, gc and reflog expiry against damage and purges: what issue 12 found (defects 5, 6, 10)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxstore import Repository
from ctxstore.cli import cli
from ctxstore.errors import DamagedData, UnknownRef
from ctxstore.format.objects import Entry, parse_object
from ctxstore.refs import ReflogRecord
from ctxstore.store.records import REFS

SECRET = "the launch code is 0451-ZEBRA"


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _store_holds(path: Path, needle: bytes) -> bool:
    """Whether any stored object's canonical bytes contain `needle` (the LMDB file itself may keep freed
    pages until reused, so the check is on what the store gives back)."""
    with Repository.open(path) as repo:
        return any(needle in repo.store.get(oid) for oid in repo.store)


def _damage_one_reflog_record(repo: Repository, ref: str) -> None:
    """Replace the oldest record of `ref`'s reflog with bytes that do not decode, keeping the others."""
    with repo.store.transaction(write=True) as txn:
        records = txn.reflog(ref)
        txn.delete_reflog(ref)
        txn.append_reflog(ref, b"\xa1\x63bad\x18")  # a truncated map: not a reflog record
        for record in reversed(records[:-1]):
            txn.append_reflog(ref, record)


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    Repository.init(path).close()
    return path


def test_fsck_reports_a_ref_that_names_an_entry_not_a_revision(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("hello")])
        entry = next(oid for oid in repo.store if isinstance(parse_object(repo.store.get(oid)), Entry))
        # The facade moves refs only to revisions, so the damage is written below it.
        with repo.store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/bad", entry)
        report = repo.fsck()
    assert not report.ok
    assert any("ref refs/heads/bad names" in p and "which is an entry, not a revision" in p
               for p in report.problems)


def test_fsck_reports_a_reflog_record_that_names_a_non_revision(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("hello")])
        node = next(oid for oid in repo.store if isinstance(parse_object(repo.store.get(oid)), Entry))
        with repo.store.transaction(write=True) as txn:
            txn.append_reflog("refs/heads/main", ReflogRecord(None, node, 1, "forged").encode())
        report = repo.fsck()
    assert any("reflog of refs/heads/main" in p and "not a revision" in p for p in report.problems)


def test_a_damaged_reflog_record_is_reported_by_fsck_with_exit_6_and_stops_gc(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        for text in ("one", "two", "three"):
            repo.append("main", [_user(text)])
        _damage_one_reflog_record(repo, "refs/heads/main")
        report = repo.fsck()
        assert [p for p in report.problems if "damaged" in p] == [
            "reflog of refs/heads/main: record 2 (0 is the newest) is damaged; `ctxstore fsck --repair` "
            "drops it and keeps the rest"]
        with pytest.raises(DamagedData, match="reflog record is damaged"):
            repo.gc(grace=0)
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "fsck"])
    assert result.exit_code == 6
    assert "fsck --repair" in result.stderr


def test_fsck_repair_drops_only_the_damaged_reflog_record(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        for text in ("one", "two", "three"):
            repo.append("main", [_user(text)])
        before = repo.reflog("main")
        _damage_one_reflog_record(repo, "refs/heads/main")
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "fsck", "--repair"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["repaired"] == [
        "dropped 1 damaged or dangling record(s) from the reflog of refs/heads/main"]
    with Repository.open(repo_path) as repo:
        assert repo.reflog("main") == before[:-1]  # the two newest moves, in order
        assert repo.fsck().ok and repo.fsck(repair=True).repaired == []
        assert repo.gc(grace=0).deleted == 0  # gc works again; the head's objects all stay
        assert [m["content"] for m in repo.history("main").render()] == ["one", "two", "three"]


def test_deleting_a_branch_then_gc_prune_now_removes_its_messages(repo_path: Path) -> None:
    """A conversation one must not keep: `branch -d` and `gc --prune=now` purge its bytes from the store."""
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("keep me")])
        repo.append("secret", [_user(SECRET)])
    assert _store_holds(repo_path, SECRET.encode())
    runner = CliRunner()
    assert runner.invoke(cli, ["--repo", str(repo_path), "branch", "-d", "secret"]).exit_code == 0
    kept = runner.invoke(cli, ["--repo", str(repo_path), "gc"])  # default grace: the reflog still holds it
    assert kept.exit_code == 0 and json.loads(kept.stdout)["deleted"] == 0
    result = runner.invoke(cli, ["--repo", str(repo_path), "gc", "--prune=now"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["deleted"] > 0 and out["reflogEntriesExpired"] == 2  # its creation and deletion
    assert not _store_holds(repo_path, SECRET.encode())
    with Repository.open(repo_path) as repo:
        assert repo.fsck().ok
        assert [m["content"] for m in repo.history("main").render()] == ["keep me"]


def test_reflog_expire_now_then_gc_purges_an_old_revision_of_a_live_ref(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("hello")])
        base = repo.head("main")
        repo.append("main", [_user(SECRET)])
        assert base is not None
        repo.set_ref("main", base, message="reset away from the secret")
        assert repo.gc(grace=0).deleted == 0  # main's reflog still reaches the secret
    assert _store_holds(repo_path, SECRET.encode())
    runner = CliRunner()
    result = runner.invoke(cli, ["--repo", str(repo_path), "reflog", "expire", "--expire=now", "main"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"expired": {"refs/heads/main": 3}}
    assert runner.invoke(cli, ["--repo", str(repo_path), "gc", "--prune=now"]).exit_code == 0
    assert not _store_holds(repo_path, SECRET.encode())
    with Repository.open(repo_path) as repo:
        assert repo.fsck().ok
        assert [m["content"] for m in repo.history("main").render()] == ["hello"]
        assert repo.reflog("main") == []


def test_reflog_expire_keeps_records_younger_than_the_duration(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("a")])
        repo.append("main", [_user("b")])
        moves = len(repo.reflog("main"))
        time.sleep(0.01)
        assert repo.expire_reflogs("main", older_than=3600) == {}
        assert len(repo.reflog("main")) == moves
        assert repo.expire_reflogs(older_than=0) == {"refs/heads/main": moves}
        assert repo.reflog("main") == [] and repo.fsck().ok


def test_reflog_expire_needs_a_ref_or_all_and_knows_unknown_refs(repo_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--repo", str(repo_path), "reflog", "expire"]).exit_code == 2
    with Repository.open(repo_path) as repo, pytest.raises(UnknownRef):
        repo.expire_reflogs("nothing-here")
    bad = runner.invoke(cli, ["--repo", str(repo_path), "reflog", "expire", "--expire=soon", "--all"])
    assert bad.exit_code == 2 and "not a duration" in bad.output


def test_reflog_show_is_still_the_default_subcommand(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("a")])
        repo.append("main", [_user("b")])
    runner = CliRunner()
    plain = runner.invoke(cli, ["--repo", str(repo_path), "reflog", "-n", "1", "main"])
    shown = runner.invoke(cli, ["--repo", str(repo_path), "reflog", "show", "main", "-n", "1"])
    assert plain.exit_code == shown.exit_code == 0
    assert plain.stdout == shown.stdout and len(json.loads(plain.stdout)) == 1



def test_fsck_repair_drops_a_reflog_record_that_names_a_missing_object(repo_path: Path) -> None:
    """A readable record naming an object the store lacks can restore nothing: fsck reports it (exit 6)
    and --repair drops it, keeping the other records."""
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("one")])
        before = repo.reflog("main")
        with repo.store.transaction(write=True) as txn:
            txn.append_reflog("refs/heads/main", ReflogRecord(None, b"\x07" * 32, 1, "dangling").encode())
        assert any("missing" in p for p in repo.fsck().problems)
    assert CliRunner().invoke(cli, ["--repo", str(repo_path), "fsck"]).exit_code == 6
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "fsck", "--repair"])
    assert result.exit_code == 0, result.output
    with Repository.open(repo_path) as repo:
        assert repo.reflog("main") == before and repo.fsck().ok


def test_fsck_reports_a_ref_whose_value_is_not_an_object_id(repo_path: Path) -> None:
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user("one")])
        env = repo.store.environment  # the LMDB environment: write a ref value no API would write
        repo.store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            txn.put(b"refs/heads/broken", b"\x01\x02\x03", db=env.dbs[REFS])
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "fsck"])
    assert result.exit_code == 6
    assert "refs/heads/broken holds 3 byte(s) that are not an object id" in result.stdout


@pytest.mark.parametrize("stored", ["whole", "delta"])
def test_a_corrupt_store_is_damage_for_render_and_a_path_clone(tmp_path: Path, stored: str) -> None:
    """A head revision whose stored bytes were changed on disk: render and clone exit 6 (damage) and say
    to run fsck, instead of calling the revision unknown (3) or the request bad (2) or failing as the
    storage engine (1). A revision is stored whole (a zstd frame, which the damage may make undecodable)
    or as a delta on its parent (whose check the damage breaks): the first has no parent; an append that
    closes no leaf is a delta, and whether one closes depends on the random entry ids, so the test
    appends until the head is stored as it wants."""
    from ctxstore.format.codec import ZSTD
    from ctxstore.store.records import HEAD_SIZE, OBJECTS, record_value
    from ctxstore.store.revisions import DELTA

    src = tmp_path / "src"
    with Repository.init(src) as repo:
        env = repo.store.environment

        def head_record() -> tuple[bytes, bytes]:
            head = bytes.fromhex(repo.head("main") or "")
            repo.store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
            with env.env.begin() as txn:
                return next((bytes(k), bytes(v)) for k, v in txn.cursor(db=env.dbs[OBJECTS])
                            if head.startswith(k))
        repo.append("main", [_user("message 0 " * 20)])
        for i in range(1, 200):
            if stored == "whole" or record_value(head_record()[1])[0] == DELTA:
                break
            repo.append("main", [_user(f"message {i} " * 20)])
        key, value = head_record()
        assert (record_value(value)[0] == DELTA) == (stored == "delta")
        damaged = bytearray(value)
        if stored == "whole":  # the zstd frame's magic number: a frame no decoder takes
            assert value[HEAD_SIZE] == ZSTD and value[HEAD_SIZE + 1:HEAD_SIZE + 5] == b"\x28\xb5\x2f\xfd"
            damaged[HEAD_SIZE + 2] ^= 0xFF
        else:  # the delta record's check
            damaged[-3] ^= 0xFF
        repo.store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            txn.put(key, bytes(damaged), db=env.dbs[OBJECTS])
    for args in (["--repo", str(src), "render", "main"], ["clone", str(src), str(tmp_path / "dst")]):
        # A new process: this one may hold the revision decoded from before the damage.
        result = subprocess.run([sys.executable, "-m", "ctxstore.cli", *args], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 6, (args, result.stdout, result.stderr)
        assert "fsck" in result.stderr and "Traceback" not in result.stderr
