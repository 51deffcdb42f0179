"""The bounded memo every cache of cluster-derived values is built on, and the extender's memo policy.

The policy (tests/tooling/test_memo_policy.py keeps it true):

- **Values derived from cluster objects** (device views, selector verdicts, CEL programs, flavor partitions:
  anything whose keys a cluster can multiply) live in a `BoundedMemo`, held by an owner the service can name
  (decisions/caches.py `DecisionCaches`, a QuotaContext) and exported in /metrics.
- **Pure parsers of a string** (a quantity, a semantic version, a regular expression, a CEL literal check) may use
  `functools.lru_cache` with an explicit `maxsize`: no cluster state, nothing to invalidate, bounded.
- **Values fixed for the process's life** (the installed client's models, the package version) may use
  `functools.cache`: their key space is closed; the test lists them.
- Two caches are neither, each with one entry or a bound of its own and a comment saying why: the quota context
  of the newest snapshot (service/quota_context_cache.py, rebuilt when its sources change) and the preemption
  oracle's holders per usage answer (service/view_builder.py `holder_memo`, cleared past MAX_HOLDER_MEMO).

Every BoundedMemo follows the same two rules, so a reader checks them once:

- **Eviction**: a memo holds at most `max_entries` values; a write that finds it full clears it wholesale first.
  Values are keyed by object identity (a Device, a NodeDevices list, a Node) that a watch event retires by
  replacing the object, so a wholesale clear is also how stale keys leave; it costs one recomputation of what
  is still live, and nothing per hit (an LRU would pay bookkeeping on every read of the hot path).
- **Locking**: reads take no lock (one dict lookup is atomic in CPython); writes and clears take the memo's own
  lock. Every value is a pure function of its key (or carries the versions it was computed at and is checked by
  the reader), so a lost race costs a duplicate computation, never a wrong answer.

Entries are grouped in tables, one per table key (a selector signature, an expression): the hot loops fetch
one table once per request and then pay one lookup per node, as upstream's allocator does with the caches its
plugin owns.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    __slots__ = ("_lock", "_size", "_tables", "clears", "max_entries", "name", "tables")

    def __init__(self, name: str, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("a memo must hold at least one entry")
        self.name = name
        self.max_entries = max_entries
        self.clears = 0
        self._tables: dict[Hashable, dict[K, V]] = {}
        # Read-only view for the hottest loops (selector verdicts per device): the same dict object for the
        # memo's whole life (a clear empties it in place), so a reader may keep it.
        self.tables: Mapping[Hashable, Mapping[K, V]] = self._tables
        self._size = 0
        self._lock = threading.Lock()

    def table(self, table_key: Hashable = None) -> Mapping[K, V]:
        """One table's entries, for a loop that looks up many keys of the same table (read-only)."""
        entries = self._tables.get(table_key)
        return entries if entries is not None else {}

    def get(self, key: K, table_key: Hashable = None) -> V | None:
        entries = self._tables.get(table_key)
        return entries.get(key) if entries is not None else None

    def put(self, key: K, value: V, table_key: Hashable = None) -> V:
        with self._lock:
            if self._size >= self.max_entries:
                self._tables.clear()
                self._size = 0
                self.clears += 1
            entries = self._tables.get(table_key)
            if entries is None:
                entries = self._tables[table_key] = {}
            if key not in entries:
                self._size += 1
            entries[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._size = 0

    def __len__(self) -> int:
        return self._size
