"""A repository's settings: text values by key, and the remotes it knows (names and URLs), in its store."""

from __future__ import annotations

import json
import os
from typing import Final

from ..errors import DamagedData, InvalidInput, UnknownRef, UnknownSetting, shown
from ..store.base import TransactionalStore

__all__ = ["Config", "check_remote_name"]

_REMOTE_NAMES: Final = "remote.names"


class Config:
    """A repository's settings: text values by key, stored in the store with everything else.

    Remotes are settings too (``remote.<name>.url``, listed under ``remote.names``); `remote_add`,
    `remote_remove` and `remotes` keep the list and the URLs in step.
    """

    def __init__(self, store: TransactionalStore) -> None:
        self._store = store

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of `key`, or `default` when unset."""
        with self._store.transaction() as txn:
            raw = txn.get_config(key)
        return default if raw is None else _text(key, raw)

    def set(self, key: str, value: str | None) -> None:
        """Set `key` to a text value; None unsets it."""
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"config value for {shown(key)} must be text, not {type(value).__name__}")
        with self._store.transaction(write=True) as txn:
            txn.set_config(key, None if value is None else value.encode("utf-8"))

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise UnknownSetting(f"config key {shown(key)} is not set")
        return value

    def __setitem__(self, key: str, value: str) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        self.set(key, None)

    # -- remotes -------------------------------------------------------------------------------------
    def remote_add(self, name: str, url: str) -> None:
        """Record a remote (`InvalidInput` if the name is taken or unusable).

        A URL without a scheme is a local path: it is stored absolute, so the remote is reached the same
        way from any directory.
        """
        check_remote_name(name)
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"remote {shown(name)} needs a non-empty URL")
        if "://" not in url:
            url = os.path.abspath(os.path.expanduser(url))
        with self._store.transaction(write=True) as txn:
            names = _names(txn.get_config(_REMOTE_NAMES))
            if name in names:
                raise InvalidInput(f"remote {shown(name)} already exists; remove it first or choose another name")
            txn.set_config(_REMOTE_NAMES, json.dumps(sorted([*names, name])).encode())
            txn.set_config(f"remote.{name}.url", url.encode("utf-8"))

    def remote_remove(self, name: str) -> None:
        """Forget a remote (its remote-tracking refs stay until deleted); `UnknownRef` if there is none."""
        with self._store.transaction(write=True) as txn:
            names = _names(txn.get_config(_REMOTE_NAMES))
            if name not in names:
                raise UnknownRef(f"no remote named {shown(name)}; list them with `ctxstore remote`")
            txn.set_config(_REMOTE_NAMES, json.dumps([n for n in names if n != name]).encode())
            txn.set_config(f"remote.{name}.url", None)

    def remotes(self) -> dict[str, str]:
        """Remote names to URLs, sorted by name."""
        with self._store.transaction() as txn:
            out = {}
            for name in _names(txn.get_config(_REMOTE_NAMES)):
                key = f"remote.{name}.url"
                url = txn.get_config(key)
                if url is not None:
                    out[name] = _text(key, url)
            return out


def _text(key: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DamagedData(f"config value {shown(key)} is not UTF-8 text; set it again with "
                          "`ctxstore config`") from None


def _names(raw: bytes | None) -> list[str]:
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except ValueError:  # also a UnicodeDecodeError
        value = None
    if not isinstance(value, list):
        raise DamagedData("the remote list in the repository config is damaged; fix it with "
                          "`ctxstore config`")
    return [n for n in value if isinstance(n, str)]


def check_remote_name(name: str) -> None:
    """`InvalidInput` unless `name` can name a remote: printable text without '/', '.', ':', '\\' or spaces,
    not starting with '-'. `remote add` and every fetch, pull and push check this one rule."""
    if (not isinstance(name, str) or not name or name.startswith("-")
            or any(c in "/.\\:" or c.isspace() or not c.isprintable() for c in name)):
        raise InvalidInput(f"invalid remote name {shown(name)}: use letters, digits, '-' and '_'")
