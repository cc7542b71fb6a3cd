"""Who holds which block or tx: one index per item kind, shared by the whole simulated network.

A node "knows" an item once it was delivered to it (or, for a tx, once an accepted block carried
it). Instead of one set per node (N nodes x all items), the index keeps, for each item still
spreading, the set of nodes that know it, and moves an item to a single ``everywhere`` set once
all N nodes know it. Memory is then proportional to the items in flight, not to N x history,
and the relay loop tests a whole neighbour list against one set.
"""

from typing import final

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


@final
class Knowledge:
    """``knows(node, key)``/``learn``/``forget`` over ``nodes`` nodes."""

    __slots__ = ("_nodes", "everywhere", "holders", "payload")

    def __init__(self, nodes: int) -> None:
        self._nodes = nodes
        self.holders: dict[bytes, set[int]] = {}
        """Items known by some but not all nodes: the nodes that know them."""
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
        return node in found

    def learn(self, node: int, key: bytes) -> bool:
        """Record that ``node`` knows ``key``; False if it already did."""
        found = self.holders.get(key)
        if found is None:
            if key in self.everywhere:
                return False
            found = self.holders[key] = set()
        elif node in found:
            return False
        found.add(node)
        if len(found) == self._nodes:
            del self.holders[key]
            self.everywhere.add(key)
        return True

    def forget(self, node: int, key: bytes) -> None:
        """``node`` no longer knows ``key`` (a block to retry later)."""
        found = self.holders.get(key)
        if found is None:
            if key not in self.everywhere:
                return
            self.everywhere.discard(key)
            found = self.holders[key] = set(range(self._nodes))
        found.discard(node)

    def known_everywhere(self, key: bytes) -> bool:
        """True once every node knows ``key``."""
        return key in self.everywhere


__all__ = ["Knowledge", "node_ids"]
