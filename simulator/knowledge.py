"""Who holds which block or tx: one index per item kind, shared by the whole simulated network.

A node "knows" an item once it was delivered to it (or, for a tx, once an accepted block carried
it). Instead of one set per node (N nodes x all items), the index keeps, for each item still
spreading, a bitmap of the nodes that know it (bit ``node & 7`` of byte ``node >> 3``: N/8
bytes, 1.25 KB at 10,000 nodes, where a Python set of those nodes took up to ~0.5 MB) and their
count, and moves an item to a single ``everywhere`` set once all N nodes know it. Memory is then
proportional to the items in flight, not to N x history. An item some node never learns (a tx a
full node refused, so never passed on) keeps its bitmap for the run: with sets this was what
held most of a 10,000-node Nakamoto run's memory (docs/experiments.md).

The flow's C kernel (``simulator/_flow.c``, ``knowledge_learn``) runs :meth:`Knowledge.learn`
on the same two dicts, step for step.
"""

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import final

_LearnEach = Callable[["Knowledge", int, Sequence[bytes]], None]
_BitOf = Callable[[dict[bytes, bytearray], set[bytes], int, int, bytes], bool]
_compiled_learn_each: _LearnEach | None
_compiled_bit_of: _BitOf | None
try:
    from simulator._flow import bit_of as _compiled_bit_of
    from simulator._flow import learn_each as _compiled_learn_each
except ImportError:  # pragma: no cover - built wherever a C compiler was at install time
    _compiled_learn_each = _compiled_bit_of = None
if os.environ.get("DAGCHAIN_FLOW_KERNEL", "c") == "python":
    _compiled_learn_each = _compiled_bit_of = None
COMPILED_LEARN_EACH: bool = _compiled_learn_each is not None
"""Whether :meth:`Knowledge.learn_each` and :meth:`Knowledge.knows_at`'s function run compiled
(simulator/_flow.c, as the flow's kernel: ``DAGCHAIN_FLOW_KERNEL=python`` turns all off)."""

_NODE_IDS: list[int] = []


def node_ids(nodes: int) -> list[int]:
    """One shared int object per node index (at least ``nodes`` of them).

    Node indices are set members and dict keys on the relay's hot path; a set lookup that finds
    the very object it looks for skips comparing two equal ints (two more memory reads, often
    cache misses at 10,000 nodes). The network's links and the nodes' ``index`` use these.
    """
    if len(_NODE_IDS) < nodes:
        _NODE_IDS.extend(range(len(_NODE_IDS), nodes))
    return _NODE_IDS


def has_bit(bits: bytearray, node: int) -> bool:
    """True if ``node``'s bit is set in a :attr:`Knowledge.holders` bitmap."""
    return bool(bits[node >> 3] >> (node & 7) & 1)


@final
class Knowledge:
    """``knows(node, key)``/``learn``/``forget`` over the ``nodes`` nodes ``first`` ... ``first +
    nodes - 1`` (the bitmaps span ids from 0: the relay-only nodes' index starts after the full
    nodes')."""

    __slots__ = ("_first", "_nodes", "_width", "counts", "everywhere", "holders", "payload")

    def __init__(self, nodes: int, first: int = 0) -> None:
        self._nodes = nodes
        self._first = first
        self._width = (first + nodes + 7) >> 3
        self.holders: dict[bytes, bytearray] = {}
        """Items known by some but not all nodes: a bitmap of the nodes that know them
        (:func:`has_bit`)."""
        self.counts: dict[bytes, int] = {}
        """For each key of :attr:`holders`, how many bits its bitmap has set."""
        self.everywhere: set[bytes] = set()
        """Items every node knows."""
        self.payload: dict[bytes, bytes] = {}
        """Item bytes, for nodes that keep none of their own (relay-only nodes answering a
        ``getdata``, ``network.relay = "node"``): one copy for the whole network."""

    def knows(self, node: int, key: bytes) -> bool:
        """True if ``node`` knows ``key``."""
        found = self.holders.get(key)
        if found is None:
            return key in self.everywhere
        return has_bit(found, node)

    def knows_at(self, node: int, compiled: bool = True) -> Callable[[bytes], bool]:
        """``key -> knows(node, key)`` for one node, bound once (a relay-only node's ``has_tx``,
        asked for every item of every ``inv``): compiled when built, unless ``compiled`` is
        False."""
        holders, everywhere, at, bit = self.holders, self.everywhere, node >> 3, 1 << (node & 7)
        if compiled and _compiled_bit_of is not None:
            return partial(_compiled_bit_of, holders, everywhere, at, bit)

        def knows(key: bytes) -> bool:
            found = holders.get(key)
            return key in everywhere if found is None else bool(found[at] & bit)

        return knows

    def learn(self, node: int, key: bytes) -> bool:
        """Record that ``node`` knows ``key``; False if it already did."""
        found = self.holders.get(key)
        at, bit = node >> 3, 1 << (node & 7)
        if found is None:
            if key in self.everywhere:
                return False
            found = self.holders[key] = bytearray(self._width)
            count = 1
        else:
            byte = found[at]
            if byte & bit:
                return False
            count = self.counts[key] + 1
        found[at] |= bit
        if count == self._nodes:
            del self.holders[key]
            del self.counts[key]
            self.everywhere.add(key)
        else:
            self.counts[key] = count
        return True

    def learn_each(self, node: int, keys: Sequence[bytes]) -> None:
        """:meth:`learn` for each of ``keys`` in turn (a block's txs at a node that took it);
        compiled when built (:data:`COMPILED_LEARN_EACH`), else :meth:`learn_each_python`."""
        if _compiled_learn_each is not None:
            _compiled_learn_each(self, node, keys)
        else:
            self.learn_each_python(node, keys)

    def learn_each_python(self, node: int, keys: Sequence[bytes]) -> None:
        """:meth:`learn_each` in Python (the compiled one does the same steps)."""
        holders, counts, everywhere, nodes = self.holders, self.counts, self.everywhere, self._nodes
        at, bit = node >> 3, 1 << (node & 7)
        for key in keys:
            found = holders.get(key)
            if found is None:
                if key in everywhere:
                    continue
                found = holders[key] = bytearray(self._width)
                count = 1
            else:
                byte = found[at]
                if byte & bit:
                    continue
                count = counts[key] + 1
            found[at] |= bit
            if count == nodes:
                del holders[key]
                del counts[key]
                everywhere.add(key)
            else:
                counts[key] = count

    def forget(self, node: int, key: bytes) -> None:
        """``node`` no longer knows ``key`` (a block to retry later)."""
        found = self.holders.get(key)
        if found is None:
            if key not in self.everywhere:
                return
            self.everywhere.discard(key)
            found = self.holders[key] = bytearray(self._width)
            for i in range(self._first, self._first + self._nodes):  # rare: no faster path
                found[i >> 3] |= 1 << (i & 7)
            self.counts[key] = self._nodes
        at, bit = node >> 3, 1 << (node & 7)
        if found[at] & bit:
            found[at] &= ~bit & 0xFF
            self.counts[key] -= 1
            if not self.counts[key]:
                del self.holders[key]
                del self.counts[key]

    def count(self, key: bytes) -> int:
        """How many nodes know ``key``."""
        found = self.counts.get(key)
        if found is None:
            return self._nodes if key in self.everywhere else 0
        return found

    def known_everywhere(self, key: bytes) -> bool:
        """True once every node knows ``key``."""
        return key in self.everywhere


__all__ = ["Knowledge", "has_bit", "node_ids"]
