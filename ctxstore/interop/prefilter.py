"""What an entry's stored bytes must hold for a search pattern to match it: the test `grep` makes before
it decodes an entry.

Most entries of a search match nothing, and decoding one costs far more than looking for a substring in
its bytes. An entry's canonical CBOR holds every string of the entry (its texts, tool names, metadata
keys and values) as UTF-8, as it is. So when every match of a pattern contains a literal (`required_literal`:
a plain string, or a run of plain characters a regular expression cannot match without), an entry whose
bytes lack that literal cannot match, and is skipped unread (`Prefilter.may_match`).

Three things can put a match where the bytes do not show it, and each is allowed for:

- **blobs**: content stored apart from the entry (large blocks) is referenced by a 32-byte id; an entry
  whose bytes could hold one (the CBOR head of a 32-byte string) is always decoded;
- **metadata as JSON**: a search reads an entry's meta as `json.dumps` text, whose numbers, `true`,
  `false`, `null`, separators and escapes (``\\n``, ``\\u0001``) are not in the CBOR bytes. A literal that
  could fall on those is not used on an entry that has meta, and one that may begin inside an escape is
  looked for without the escape's part (`_meta_cores`);
- **case**: with `ignore_case`, bytes and literal are compared lowercased (ASCII), and an entry holding
  one of the four non-ASCII letters that Python's case-insensitive match takes for an ASCII one (U+0130,
  U+0131, U+017F, U+212A) is decoded; a non-ASCII literal is not used.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Final

__all__ = ["Prefilter", "required_literal"]

_BLOB_HEAD: Final = b"\x58\x20"
"""The CBOR head of a 32-byte byte string: how an entry refers to a blob."""
_SEPARATOR: Final = b"\xff"
"""Put between entries searched together: never in UTF-8 text, so nothing looked for spans two entries."""
_META_KEY: Final = b"\x64meta"
"""The CBOR text "meta", a key only an entry with metadata holds."""
_STRUCTURAL: Final = frozenset('"\\,:{}[]')
_NUMBER: Final = frozenset("0123456789+-.eE")
_KEYWORDS: Final = ("true", "false", "null", "Infinity", "-Infinity", "NaN")
_ESCAPES: Final = (*"nrtbf", *(f"u{c:04x}" for c in range(0x20) if chr(c) not in "\n\r\t\b\f"))
"""What follows the backslash of each escape `json.dumps` writes for a character of a string (the
escapes of a quote and a backslash hold a structural character, which rules a literal out anyway)."""
_FOLDS: Final = {"i": ("\u0130", "\u0131"), "k": ("\u212a",), "s": ("\u017f",)}
"""The non-ASCII letters a case-insensitive `re` match takes for an ASCII letter (checked against `re`)."""
_QUANTIFIERS: Final = frozenset("*?")


def required_literal(pattern: str, *, fixed: bool) -> str | None:
    """A string every match of `pattern` contains (the pattern itself when `fixed`), or None.

    For a regular expression: the longest run of plain characters at its top level, read until the first
    group, class or counted repetition (past those the reading would need the whole syntax). A pattern
    with an alternation, or one opening with inline flags, has none.
    """
    if fixed:
        return pattern or None
    if "|" in pattern:
        return None
    best, run = "", ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 >= len(pattern) or (pattern[i + 1].isascii() and pattern[i + 1].isalnum()):
                break  # \d, \b, \x41, \1, ...: a class, an anchor or a code the run cannot spell
            run += pattern[i + 1]
            i += 2
            continue
        if c == "{":
            run = run[:-1]  # a counted repetition ({0,3}) may leave the character before out
            break
        if c in "([":
            break
        if c in _QUANTIFIERS:
            run = run[:-1]  # the character before may be absent
            best, run = max(best, run, key=len), ""
        elif c in ".^$+":
            best, run = max(best, run, key=len), ""
        else:
            run += c
        i += 1
    best = max(best, run, key=len)
    return best or None


class Prefilter:
    """The bytes test for one literal: `may_match(data)` is False only when the entry cannot match."""

    __slots__ = ("_cores", "_folds", "_lower", "_needle", "_shortest")

    def __init__(self, literal: str, *, ignore_case: bool) -> None:
        if ignore_case and not literal.isascii():
            raise ValueError("a case-insensitive prefilter needs an ASCII literal")
        self._lower = ignore_case
        text = literal.lower() if ignore_case else literal
        self._needle = text.encode("utf-8")
        cores = _meta_cores(text)
        self._cores = [c.encode("utf-8") for c in cores] if cores is not None else None
        self._shortest = min(self._cores, key=len) if self._cores is not None else self._needle
        self._folds = tuple(f.encode("utf-8") for letter, found in _FOLDS.items() if ignore_case and letter in text
                            for f in found)

    @classmethod
    def of(cls, pattern: str, *, fixed: bool, ignore_case: bool) -> Prefilter | None:
        """The prefilter of a pattern, or None when no literal is sure to be in every match."""
        literal = required_literal(pattern, fixed=fixed)
        if literal is None or (ignore_case and not literal.isascii()):
            return None
        return cls(literal, ignore_case=ignore_case)

    def may_match(self, data: bytes) -> bool:
        """Whether an entry with these canonical bytes might match (False: it surely does not)."""
        haystack = data.lower() if self._lower else data
        if self._cores is not None and self._shortest not in haystack:
            # Nor is any longer string looked for (each holds the shortest): only a blob can hold a match.
            return _BLOB_HEAD in data or self._folded(data)
        if self._needle in haystack or _BLOB_HEAD in data or self._folded(data):
            return True
        if _META_KEY not in data:
            return False
        # Only the meta's JSON text can still hold a match.
        return self._cores is None or any(core in haystack for core in self._cores)

    def _folded(self, data: bytes) -> bool:
        return bool(self._folds) and any(f in data for f in self._folds)

    def may_match_many(self, datas: Sequence[bytes]) -> list[bool]:
        """`may_match` of each of many entries, decided by looking through all of them at once: the bytes
        are joined and each string looked for is found where it is, instead of asked of every entry."""
        if not datas:
            return []
        joined = _SEPARATOR.join(datas)
        starts = list(accumulate((len(d) + 1 for d in datas[:-1]), initial=0))
        out = [False] * len(datas)
        for needle in (_BLOB_HEAD, *self._folds, *((_META_KEY,) if self._cores is None else ())):
            for index in _holders(joined, needle, starts):
                out[index] = True
        haystack = joined.lower() if self._lower else joined
        for index in _holders(haystack, self._shortest, starts):
            if not out[index]:
                out[index] = self.may_match(datas[index])
        return out


def _holders(haystack: bytes, needle: bytes, starts: list[int]) -> Iterator[int]:
    """The indexes of the joined entries (starting at `starts`) that hold `needle`, each once."""
    at = haystack.find(needle)
    while at >= 0:
        index = bisect_right(starts, at) - 1
        yield index
        if index + 1 >= len(starts):
            return
        at = haystack.find(needle, starts[index + 1])


def _meta_cores(literal: str) -> list[str] | None:
    """The strings of which the raw bytes must hold one if `literal` occurs in an entry's meta as JSON text,
    or None when no such test is sure (the literal may fall on JSON syntax, a number or a keyword)."""
    if any(c in _STRUCTURAL or ord(c) < 0x20 for c in literal):
        return None  # only JSON syntax or an escape puts these in the text
    # Keywords are compared without case, so a case-insensitive search (whose literal is lowercased) is covered.
    folded = literal.lower()
    body = folded[1:] if folded.startswith(" ") else folded
    if not body or all(c in _NUMBER for c in body) or any(k.lower().startswith(body) for k in _KEYWORDS):
        return None  # may lie in a number or keyword (after the space of a separator)
    if not folded.startswith(" ") and any(folded in k.lower() for k in _KEYWORDS):
        return None
    if any(literal in escape for escape in _ESCAPES):
        return None  # the whole literal may lie inside an escape
    cores = [literal]
    for cut in range(1, min(5, len(literal) - 1) + 1):
        if any(escape.endswith(literal[:cut]) for escape in _ESCAPES):
            cores.append(literal[cut:])  # the literal may begin inside an escape such as \n or \u0001
    return cores
