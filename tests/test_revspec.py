"""The revision syntax (`ctxstore.repo.revspec`, `Repository.resolve`): names, ids, prefixes, ~N, ^, @{N}."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import InvalidInput, Repository, UnknownRevision
from ctxstore.repo.revspec import RevSpec, is_expression, parse

CHAIN = 8
"""Appends made to `main` in the shared repository (so main~0 .. main~CHAIN exist: +1 for the root)."""


def _chain_repo() -> tuple[Repository, list[str]]:
    """A repository whose main received CHAIN appends, and main's lineage newest first (root last)."""
    repo = Repository.memory()
    for n in range(CHAIN):
        repo.append("main", [{"role": "user", "content": f"message {n}"}])
    lineage = [rev.id for rev in repo.iter_revisions("main")]
    return repo, lineage


@pytest.fixture(scope="module")
def chain() -> tuple[Repository, list[str]]:
    return _chain_repo()


# -- the grammar alone ------------------------------------------------------------------------------------

steps = st.lists(st.sampled_from(["~", "^", "^1", "^0"]) | st.integers(0, 40).map(lambda n: f"~{n}"),
                 max_size=6)


@given(steps)
def test_parse_counts_every_step_as_its_parents(parts: list[str]) -> None:
    """~N adds N parents, ~ and ^ and ^1 one each, ^0 none, in any order and number."""
    expected = sum(1 if p in ("~", "^", "^1") else 0 if p == "^0" else int(p[1:]) for p in parts)
    assert parse("main" + "".join(parts)) == RevSpec("main", None, expected)


@given(st.integers(0, 10_000), steps)
def test_parse_reads_the_reflog_entry_before_the_steps(n: int, parts: list[str]) -> None:
    spec = parse(f"support/42@{{{n}}}" + "".join(parts))
    assert spec.base == "support/42" and spec.reflog == n


@pytest.mark.parametrize("spec, why", [
    ("~1", "names no ref or revision"),
    ("main~x", "cannot read"),
    ("main^2", "one parent"),
    ("main@{x}", "reflog entry number"),
    ("main@{1", "reflog entry number"),
    ("main@{-1}", "reflog entry number"),
    ("main~1@{1}", "cannot read"),
    ("main~\u0661", "cannot read"),  # an Arabic-Indic digit is not a count
    ("", "not a ref or revision"),
])
def test_malformed_specs_name_the_problem(spec: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        parse(spec)


def test_a_spec_with_no_base_is_shown_how_to_write_it_in_a_message_of_bounded_size() -> None:
    with pytest.raises(InvalidInput, match=r"write it as REF~1\^$"):
        parse("~1^")
    with pytest.raises(InvalidInput, match=r"write it as REF~N$") as long:
        parse("~" * 1_000_000)
    assert len(str(long.value)) < 300


def test_plain_names_and_ids_are_not_expressions() -> None:
    assert not is_expression("main") and not is_expression("refs/heads/a/b") and not is_expression("3f2a")
    assert is_expression("main~1") and is_expression("main^") and is_expression("main@{0}")


# -- against a repository ---------------------------------------------------------------------------------

@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, CHAIN))
def test_ref_tilde_n_is_n_parent_steps(chain: tuple[Repository, list[str]], n: int) -> None:
    repo, lineage = chain
    assert repo.resolve(f"main~{n}") == lineage[n]
    assert repo.resolve("main" + "^" * n) == lineage[n]
    # Steps compose: main~a~b is main~(a+b), whatever the split.
    for a in range(n + 1):
        assert repo.resolve(f"main~{a}~{n - a}") == lineage[n]


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, CHAIN - 1), back=st.integers(0, 3))
def test_reflog_at_n_is_the_nth_reflog_entry(chain: tuple[Repository, list[str]], n: int, back: int) -> None:
    """main@{N} is where main pointed N moves ago (entry N of its reflog, newest first)."""
    repo, lineage = chain
    entry = repo.reflog("main")[n]
    assert repo.resolve(f"main@{{{n}}}") == entry.new
    # Every append moved main one revision, so the reflog and the lineage agree here.
    assert entry.new == lineage[n]
    if n + back <= CHAIN:
        assert repo.resolve(f"main@{{{n}}}~{back}") == lineage[n + back]


def test_reflog_entries_after_a_reset_differ_from_parents() -> None:
    """After a forced move the reflog remembers where the ref was, which no parent step reaches."""
    repo, lineage = _chain_repo()
    repo.set_ref("main", lineage[3], message="reset")
    assert repo.resolve("main") == lineage[3]
    assert repo.resolve("main@{1}") == lineage[0]
    assert repo.resolve("main~1") == lineage[4]


def test_a_unique_prefix_and_a_full_id_resolve(chain: tuple[Repository, list[str]]) -> None:
    repo, lineage = chain
    target = lineage[2]
    for length in (12, 20, 64):
        assert repo.resolve(target[:length]) == target
        assert repo.resolve(target[:length] + "~1") == lineage[3]
    assert repo.resolve(target.upper()) == target


def test_walking_past_the_root_says_how_far_it_got(chain: tuple[Repository, list[str]]) -> None:
    repo, lineage = chain
    with pytest.raises(UnknownRevision, match=f"only {len(lineage) - 1} ancestor"):
        repo.resolve(f"main~{len(lineage)}")


def test_a_reflog_entry_past_the_end_is_unknown(chain: tuple[Repository, list[str]]) -> None:
    repo, _ = chain
    entries = len(repo.reflog("main"))
    with pytest.raises(UnknownRevision, match=f"only {entries} entries"):
        repo.resolve(f"main@{{{entries}}}")
    with pytest.raises(UnknownRevision, match="no reflog"):
        repo.resolve("nosuch@{0}")


def test_a_deleted_refs_reflog_still_resolves() -> None:
    repo, lineage = _chain_repo()
    repo.delete_ref("main")
    with pytest.raises(UnknownRevision, match="was deleted"):
        repo.resolve("refs/heads/main@{0}")
    assert repo.resolve("refs/heads/main@{1}") == lineage[0]


def test_an_ambiguous_prefix_lists_the_candidates() -> None:
    repo = Repository.memory()
    ids: list[str] = []
    n = 0
    while True:  # make revisions until two share their first four digits
        ids.append(repo.append(f"r{n}", [{"role": "user", "content": str(n)}]).new)
        n += 1
        by_prefix: dict[str, list[str]] = {}
        for rid in ids:
            by_prefix.setdefault(rid[:4], []).append(rid)
        shared = [p for p, rs in by_prefix.items() if len(rs) > 1]
        if shared:
            break
    with pytest.raises(UnknownRevision, match="ambiguous"):
        repo.resolve(shared[0])


def test_histories_read_through_the_syntax(chain: tuple[Repository, list[str]]) -> None:
    repo, _ = chain
    assert repo.history("main~2").size == CHAIN - 2
    assert repo.history("main@{1}").size == CHAIN - 1
    with pytest.raises(UnknownRevision):
        repo.history("nosuch~1")
