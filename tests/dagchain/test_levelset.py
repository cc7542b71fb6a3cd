"""Level sets and their order (PROTOCOL.md §5, L1-L3), including both required vectors."""

import sys
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagchain.levelset import compute_level_set
from dagchain.types import NULL_ID, BlockId

Links = tuple[BlockId, BlockId, BlockId]


def bid(name: int | str) -> BlockId:
    """A readable 32-byte id for a test block name."""
    return BlockId(str(name).encode().rjust(32, b"."))


def names(ids: Iterable[BlockId]) -> list[str]:
    return [i.lstrip(b".").decode() for i in ids]


def make_links_of(table: dict[BlockId, Links]) -> Callable[[BlockId], Links]:
    return table.__getitem__


def reference_level_set(
    pivot: BlockId, links_of: Callable[[BlockId], Links], in_earlier: Callable[[BlockId], bool]
) -> list[BlockId]:
    """The §5 pseudo-code verbatim (re-scans the links of the top block every step)."""
    out: list[BlockId] = []
    done: set[BlockId] = set()
    stack = [pivot]
    while stack:
        b = stack[-1]
        for p in links_of(b):
            if p not in done and not in_earlier(p):
                stack.append(p)
                break
        else:
            stack.pop()
            done.add(b)
            out.append(b)
    return out


# --- §5 required test vector: 10 blocks 0..9 ------------------------------------------------------

_OUTSIDE = (bid("x-ms"), bid("x-prev"), bid("x-tip"))
"""Targets of "every other link": blocks outside 0..9, in an earlier level set."""
_TEN_MILESTONE = {0: 2, 1: 5, 2: 5, 3: 8, 5: 8, 7: 5, 9: 5}
_TEN_PREVIOUS = {0: 1, 1: 7, 2: 4, 3: 5, 7: 4, 9: 1}
_TEN_TIP = {0: 3, 1: 6, 2: 6, 3: 6, 7: 8, 9: 3}
_TEN_IDS = frozenset(bid(i) for i in range(10))


def _ten_block_links() -> dict[BlockId, Links]:
    table: dict[BlockId, Links] = {}
    for i in range(10):
        links = (_TEN_MILESTONE.get(i), _TEN_PREVIOUS.get(i), _TEN_TIP.get(i))
        table[bid(i)] = (
            bid(links[0]) if links[0] is not None else _OUTSIDE[0],
            bid(links[1]) if links[1] is not None else _OUTSIDE[1],
            bid(links[2]) if links[2] is not None else _OUTSIDE[2],
        )
    return table


@pytest.mark.parametrize(
    ("pivot", "expected", "pending"),
    [
        (0, ["8", "5", "4", "6", "2", "7", "1", "3", "0"], {"9"}),
        (9, ["8", "5", "4", "7", "6", "1", "3", "9"], {"0", "2"}),
    ],
)
def test_l1_l2_ten_block_vector(pivot: int, expected: list[str], pending: set[str]) -> None:
    """L1/L2 §5 required vector: the order and the blocks left pending, for pivots 0 and 9."""
    order = compute_level_set(
        bid(pivot), make_links_of(_ten_block_links()), lambda b: b not in _TEN_IDS
    )
    assert names(order) == expected
    assert set(names(_TEN_IDS)) - set(names(order)) == pending


# --- §5 required fork vector: blocks 1..10 over genesis G -----------------------------------------

_FORK_LINKS: dict[int, tuple[int | str, int | str, int | str]] = {
    1: ("G", "G", "G"),
    2: ("G", "G", 1),
    3: ("G", 1, 2),
    4: (3, 2, 3),
    5: (3, 3, 4),
    6: (3, "G", 2),
    7: (3, 6, 1),
    8: (7, 4, 5),
    9: (7, 7, 8),
    10: (5, 5, 6),
}


def _fork_links() -> dict[BlockId, Links]:
    table: dict[BlockId, Links] = {bid("G"): (NULL_ID, NULL_ID, NULL_ID)}
    for block, (ms, prev, tip) in _FORK_LINKS.items():
        table[bid(block)] = (bid(ms), bid(prev), bid(tip))
    return table


def level_sets_along(chain: list[str | int], table: dict[BlockId, Links]) -> list[list[str]]:
    """LS of each milestone after genesis, with per-chain membership (L1: earlier milestones)."""
    ordered: set[BlockId] = {bid(chain[0])}  # LS(genesis) = {genesis}
    result = []
    for milestone in chain[1:]:
        level_set = compute_level_set(bid(milestone), make_links_of(table), ordered.__contains__)
        ordered.update(level_set)
        result.append(names(level_set))
    return result


@pytest.mark.parametrize(
    ("chain", "expected", "pending"),
    [
        (["G", 3, 5, 10], [["1", "2", "3"], ["4", "5"], ["6", "10"]], {"7", "8", "9"}),
        (["G", 3, 7, 9], [["1", "2", "3"], ["6", "7"], ["4", "5", "8", "9"]], {"10"}),
    ],
)
def test_l1_l2_fork_vector_per_chain_membership(
    chain: list[str | int], expected: list[list[str]], pending: set[str]
) -> None:
    """L1/L2 §5 required fork vector: level sets along each milestone branch; what stays
    pending."""
    level_sets = level_sets_along(chain, _fork_links())
    assert level_sets == expected
    in_some_set = {b for ls in level_sets for b in ls}
    assert {str(b) for b in range(1, 11)} - in_some_set == pending


def test_l1_fork_vector_global_flag_would_be_wrong() -> None:
    """L1: membership is per chain; a global "already ordered" set gives the wrong LS(7), LS(9)."""
    table = _fork_links()
    ordered = {bid("G")}
    for milestone in (3, 5, 10):
        ordered.update(compute_level_set(bid(milestone), table.__getitem__, ordered.__contains__))
    wrong = []
    for milestone in (7, 9):
        level_set = compute_level_set(bid(milestone), table.__getitem__, ordered.__contains__)
        ordered.update(level_set)
        wrong.append(names(level_set))
    assert wrong == [["7"], ["8", "9"]]
    assert level_sets_along(["G", 3, 7, 9], table)[1:] == [["6", "7"], ["4", "5", "8", "9"]]


# --- properties -----------------------------------------------------------------------------------


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[dict[BlockId, Links], BlockId, frozenset[BlockId]]:
    """Blocks 0..n-1; each link names an earlier block or genesis; some blocks are earlier-set."""
    n = draw(st.integers(min_value=1, max_value=40))
    table: dict[BlockId, Links] = {bid("G"): (NULL_ID, NULL_ID, NULL_ID)}
    for i in range(n):
        parent = st.one_of(st.just("G"), st.integers(0, i - 1)) if i else st.just("G")
        ms, prev, tip = draw(parent), draw(parent), draw(parent)
        table[bid(i)] = (bid(ms), bid(prev), bid(tip))
    earlier = draw(st.sets(st.integers(0, n - 2))) if n > 1 else set()
    return table, bid(n - 1), frozenset({bid("G"), *(bid(e) for e in earlier)})


@pytest.mark.property
@given(dag=random_dags())
def test_l2_order_is_topological_and_matches_pseudocode(
    dag: tuple[dict[BlockId, Links], BlockId, frozenset[BlockId]],
) -> None:
    """L1/L2: LS is the reachable not-earlier set, pivot last, every block after its in-set parents,
    and the order equals the §5 pseudo-code's."""
    table, pivot, earlier = dag
    order = compute_level_set(pivot, table.__getitem__, earlier.__contains__)
    assert order == reference_level_set(pivot, table.__getitem__, earlier.__contains__)
    assert order[-1] == pivot
    assert len(order) == len(set(order))
    reachable, frontier = {pivot}, [pivot]
    while frontier:
        for parent in table[frontier.pop()]:
            if parent not in earlier and parent not in reachable:
                reachable.add(parent)
                frontier.append(parent)
    assert set(order) == reachable
    position = {b: i for i, b in enumerate(order)}
    for block in order:
        for parent in table[block]:
            if parent in position:
                assert position[parent] < position[block]


def test_l2_long_chain_needs_no_recursion() -> None:
    """L2 at scale: a peer chain of 10^4 blocks in one level set (released stash, §5) is ordered
    oldest first without touching the recursion limit."""
    count = 10_000
    assert count > sys.getrecursionlimit()
    genesis = bid("G")
    table: dict[BlockId, Links] = {bid(0): (genesis, genesis, genesis)}
    for i in range(1, count):
        table[bid(i)] = (genesis, bid(i - 1), bid(i - 1))
    order = compute_level_set(bid(count - 1), table.__getitem__, lambda b: b == genesis)
    assert order == [bid(i) for i in range(count)]


def test_l1_pivot_alone_when_all_parents_are_earlier() -> None:
    """L1: a milestone whose links all point into earlier level sets is its own level set."""
    genesis = bid("G")
    order = compute_level_set(bid(1), {bid(1): (genesis,) * 3}.__getitem__, {genesis}.__contains__)
    assert order == [bid(1)]


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        (["G", 3, 5, 10], ["G", "1", "2", "3", "4", "5", "6", "10"]),
        (["G", 3, 7, 9], ["G", "1", "2", "3", "6", "7", "4", "5", "8", "9"]),
    ],
)
def test_l3_total_order_is_level_sets_by_height(
    chain: list[str | int], expected: list[str]
) -> None:
    """L3: the total order concatenates the level sets by height and respects every link."""
    table = _fork_links()
    total = ["G"] + [b for ls in level_sets_along(chain, table) for b in ls]
    assert total == expected
    position = {bid(b): i for i, b in enumerate(total)}
    for block in total[1:]:
        for parent in table[bid(block)]:
            assert position[parent] < position[bid(block)]
