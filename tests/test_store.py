"""The store conformance suite (`ctxstore.store.testing`), run for every backend ctxstore ships."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxstore.errors import StoreError
from ctxstore.store import LmdbStore, MemoryStore, TransactionalStore
from ctxstore.store.testing import FakeClock, StoreConformance, make_object


class TestMemoryStore(StoreConformance):
    """The in-memory twin."""

    @pytest.fixture
    def store(self, clock: FakeClock) -> Iterator[TransactionalStore]:
        store = MemoryStore(clock=clock)
        yield store
        store.close()


class TestLmdbStore(StoreConformance):
    """The LMDB store, with a small map so that growing it is part of every run."""

    @pytest.fixture
    def store(self, clock: FakeClock, tmp_path: Path) -> Iterator[TransactionalStore]:
        store = LmdbStore(tmp_path / "db", map_size=1 << 20, durable=False, clock=clock)
        yield store
        store.close()


def test_a_memory_store_closed_drops_what_it_held() -> None:
    store = MemoryStore()
    store.put_many([make_object(1)])
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get(make_object(1)[0])
