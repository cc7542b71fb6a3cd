"""Level sets and their order: the post-order DFS of PROTOCOL.md §5 (L1, L2, L3)."""

from collections.abc import Callable

from dagchain.types import BlockId

__all__ = ["compute_level_set"]


def compute_level_set(
    pivot: BlockId,
    links_of: Callable[[BlockId], tuple[BlockId, ...]],
    in_earlier: Callable[[BlockId], bool],
) -> list[BlockId]:
    """The level set of milestone ``pivot`` in L2 order (L1, L2).

    An iterative post-order depth-first search from ``pivot``: at each block it descends into the
    first parent that is neither already emitted nor ``in_earlier``, trying the links in the order
    milestone → previous → tip links in ascending order (v2: 1..``max_tip_links`` of them),
    and emits the block when no such parent is left. The result
    therefore ends with ``pivot`` and lists every block after its in-set parents. Concatenating
    the level sets of a milestone chain by increasing height gives the total order of L3.

    The search keeps, per stacked block, the index of the next link to try, so each link is
    tested once; this is equivalent to re-scanning from the milestone link as in the §5
    pseudo-code, because a link once skipped stays emitted or in an earlier level set. No
    recursion is used, so level sets of any size (10^4 blocks and more) are fine.

    Args:
        pivot: The milestone M whose level set is wanted. It is never tested with ``in_earlier``.
        links_of: Returns ``(milestone_link, previous_link, *tip_links)`` of an accepted block
            (``Block.links``; the tips ascending, as §2.2 stores them).
        in_earlier: True iff the block lies in a level set of an earlier milestone of chain(M)
            (per chain membership, §5 fork vector; never a global "already ordered" flag).

    Returns:
        LS(M) in L2 order, ``pivot`` last.

    Note:
        The caller guarantees that the DAG is acyclic and fully accepted below ``pivot`` (every
        link reached resolves through ``links_of``), and that genesis is ``in_earlier`` for every
        pivot above genesis, so the null links of genesis are never followed. The degenerate case
        LS(genesis) = [genesis] (L1) is the caller's business: do not call this with genesis.
    """
    out: list[BlockId] = []
    emit = out.append
    done: set[BlockId] = set()
    mark_done = done.add
    blocks: list[BlockId] = [pivot]
    links: list[tuple[BlockId, ...]] = [links_of(pivot)]
    cursors: list[int] = [0]
    push_block = blocks.append
    push_links = links.append
    push_cursor = cursors.append
    while blocks:
        parents = links[-1]
        i = cursors[-1]
        n = len(parents)
        while i < n:
            parent = parents[i]
            i += 1
            if parent not in done and not in_earlier(parent):
                cursors[-1] = i
                push_block(parent)
                push_links(links_of(parent))
                push_cursor(0)
                break
        else:
            block = blocks.pop()
            links.pop()
            cursors.pop()
            mark_done(block)
            emit(block)
    return out
