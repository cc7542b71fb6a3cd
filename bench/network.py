"""Network benchmark (docs/benchmarks.md, "Network"): real devnet daemons on 127.0.0.1.

Run: ``python bench/network.py [--ring 10] [--prop-blocks 30] [--sync-blocks 10000] [--txs 128]``.

Prints (1) block propagation delay across a ring of ``--ring`` nodes for blocks of ``--txs``
signed transactions: p50 and p90 of every node's arrival delay (the node's ``block`` event
``delay_ms``: its clock at acceptance minus the header timestamp, which is the submit time) and of
the delay until the last node has the block; (2) the initial sync rate of a fresh node downloading
``--sync-blocks`` full blocks from one peer (blocks/s, tx/s); (3) ``GET /v1/status`` requests per
second. Last line: ``sync_tx_per_s: <number>``.

Blocks are built here without a Chain replica (10,000 full blocks would cost the replica as much
signature work as the node): headers link the latest milestone, the miner's own previous block and
another chain's newest block; snapshots come from ``dagchain.retarget.compute_snapshot`` and
classification from the real PoW hash, so every block is valid. Transactions are unique signed
faucet transfers; whether they are VALID in the ledger does not matter to block acceptance.
"""

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from dagchain.blocks import Block, BlockHeader, compute_merkle_root, compute_tips_root, make_block
from dagchain.genesis import FAUCET_SECRET, genesis_block
from dagchain.params import DEVNET
from dagchain.pow import encode_compact
from dagchain.retarget import Snapshot, compute_snapshot, genesis_snapshot
from dagchain.transactions import Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import Address, BlockId, TxId
from tests.dagchain.builders import address_of_secret, grind, registration_tx, secret_of
from tests.functional.framework import NodeProcess, TestNetwork, wait_until

MINERS = 4
TX_POOL_CAP = 150_000
"""Above the core's 100,000-entry signature cache, so cycling the pool never hits the cache."""


class DagBuilder:
    """Valid devnet blocks in delivery order, without a Chain (see the module docstring)."""

    def __init__(self, txs_per_block: int, pool_size: int) -> None:
        self.params = DEVNET
        self.genesis = genesis_block(DEVNET)
        self.best: BlockId = self.genesis.id
        self.best_ts = self.genesis.header.timestamp_ms
        self.snapshots: dict[bytes, Snapshot] = {self.genesis.id: genesis_snapshot(DEVNET)}
        self.heads: dict[int, Block] = {}
        self.recent: list[Block] = []
        self.txs_per_block = txs_per_block
        self.pool = make_tx_pool(pool_size) if txs_per_block else []
        self._next_tx = 0
        self._turn = 0

    def next_block(self, timestamp_ms: int | None = None) -> Block:
        miner = self._turn % MINERS
        self._turn += 1
        head = self.heads.get(miner)
        body: list[Transaction] = []
        if head is None:
            body.append(registration_tx(address_of_secret(secret_of(500 + miner))))
        while len(body) < self.txs_per_block and self.pool:
            body.append(self.pool[self._next_tx % len(self.pool)])
            self._next_tx += 1
        previous = head.id if head is not None else self.genesis.id
        tip = next((b.id for b in reversed(self.recent) if b.id != previous), None)
        if tip is None:
            tip = self.genesis.id if previous == self.genesis.id else self.best
        snap = self.snapshots[self.best]
        ts = max(
            timestamp_ms if timestamp_ms is not None else int(time.time() * 1000) - 3_000,
            self.best_ts,
            head.header.timestamp_ms if head is not None else 0,
        )
        tips = [BlockId(tip)]
        header = BlockHeader(
            1,
            self.best,
            BlockId(previous),
            compute_tips_root(tips),
            compute_merkle_root(body),
            ts,
            encode_compact(snap.blk_target),
            int.from_bytes(os.urandom(6), "little"),
        )
        header = grind(header, snap.blk_target, None, snap.ms_target)
        block = make_block(header, tips, body)
        if int.from_bytes(block.id, "little") <= snap.ms_target:
            parent_is_genesis = self.best == self.genesis.id
            self.snapshots[block.id] = compute_snapshot(snap, parent_is_genesis, ts, DEVNET)
            self.best, self.best_ts = block.id, ts
        self.heads[miner] = block
        self.recent = [*self.recent[-7:], block]
        return block


def make_tx_pool(size: int) -> list[Transaction]:
    """Unique signed faucet transfers (distinct output amounts)."""
    genesis = genesis_block(DEVNET).id
    dest = Address(address_of_secret(secret_of(999)))
    return [
        sign_transaction(
            TxKind.TRANSFER,
            [(TxId(genesis), i % 64)],
            [TxOut(1 + i, dest)],
            [FAUCET_SECRET],
            DEVNET,
        )
        for i in range(size)
    ]


# ---------------------------------------------------------------------------- propagation
async def _collect_events(node: NodeProcess, sink: dict[tuple[int, str], int], stop: Any) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(node.url + "/v1/events") as ws,
    ):
        while not stop.is_set():
            try:
                msg = await asyncio.wait_for(ws.receive(), 0.5)
            except TimeoutError:
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                return
            data = msg.json()
            if data.get("type") == "block":
                sink[(node.index, data["hash"])] = int(data["delay_ms"])


async def _submit(session: aiohttp.ClientSession, node: NodeProcess, block: Block) -> None:
    headers = {"Authorization": f"Bearer {node.token}"}
    async with session.post(
        node.url + "/v1/mining/submit", json={"raw": block.raw.hex()}, headers=headers
    ) as resp:
        if resp.status not in (200, 202):
            raise RuntimeError(f"submit failed: {resp.status} {await resp.text()}")


def start_ring(net: TestNetwork, ring: int) -> list[NodeProcess]:
    """``ring`` devnet daemons, node i dialing node i - 1 (node 0 the last), each with both
    ring neighbours connected."""
    nodes = [net.add_node(start=False) for _ in range(ring)]
    for i, node in enumerate(nodes):
        node.peers = [nodes[i - 1].p2p_address]  # node 0 dials the last: a ring
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        wait_until(node.is_up, 30, f"{node.name} up")
    for node in nodes:
        node.wait(lambda n: n.peer_count() >= 2, 30, "to have both ring neighbours")
    return nodes


async def propagate(
    nodes: list[NodeProcess], blocks: int, txs: int, spacing_s: float = 0.25
) -> dict[tuple[int, str], int]:
    """Submit ``blocks`` blocks of ``txs`` txs to ``nodes[0]``, one every ``spacing_s``; wait
    (at most 60 s) for every node's ``block`` event. Returns (node index, block hash) ->
    ``delay_ms`` (the node's clock at acceptance minus the submit time), node 0's included."""
    builder = DagBuilder(txs, max(blocks * txs, 1))
    sink: dict[tuple[int, str], int] = {}
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_collect_events(n, sink, stop)) for n in nodes]
    await asyncio.sleep(0.5)
    async with aiohttp.ClientSession() as session:
        for _ in range(blocks):
            # built at once and stamped with the submit time, so delay_ms is propagation
            block = builder.next_block(int(time.time() * 1000))
            await _submit(session, nodes[0], block)
            await asyncio.sleep(spacing_s)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(sink) < len(nodes) * blocks:  # noqa: ASYNC110 - polling a dict
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return sink


async def bench_propagation(
    net: TestNetwork, ring: int, blocks: int, txs: int
) -> tuple[list[int], list[int]]:
    nodes = start_ring(net, ring)
    sink = await propagate(nodes, blocks, txs)
    per_node = [d for (i, _), d in sink.items() if i != 0]
    worst: dict[str, int] = {}
    for (i, h), d in sink.items():
        if i != 0:
            worst[h] = max(worst.get(h, 0), d)
    for node in nodes:
        node.stop()
    return per_node, list(worst.values())


# ---------------------------------------------------------------------------- sync
async def _submit_all(node: NodeProcess, blocks: list[Block]) -> None:
    async with aiohttp.ClientSession() as session:
        for block in blocks:
            await _submit(session, node, block)


def bench_sync(net: TestNetwork, count: int, txs: int) -> dict[str, float]:
    pool = min(count * txs, TX_POOL_CAP)
    started = time.monotonic()
    builder = DagBuilder(txs, pool)
    blocks = [builder.next_block() for _ in range(count)]
    built_s = time.monotonic() - started
    source = net.add_node()
    started = time.monotonic()
    asyncio.run(_submit_all(source, blocks))
    ingest_s = time.monotonic() - started
    best = builder.best.hex()
    source.wait(lambda n: n.best()[0] == best, 60, "to reach the built best milestone")
    fresh = net.add_node([source])
    started = time.monotonic()
    fresh.wait(lambda n: n.status().blocks == count + 1, 3_600, "to download every block")
    sync_s = time.monotonic() - started
    total_txs = sum(len(b.txs) for b in blocks)
    return {
        "blocks": count,
        "txs": total_txs,
        "build_s": built_s,
        "ingest_blocks_per_s": count / ingest_s,
        "sync_s": sync_s,
        "sync_blocks_per_s": count / sync_s,
        "sync_tx_per_s": total_txs / sync_s,
    }


# ---------------------------------------------------------------------------- API
async def bench_status(node: NodeProcess, seconds: float, concurrency: int) -> float:
    done = 0
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with session.get(node.url + "/v1/status") as resp:
                await resp.read()
                done += 1

    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return done / (time.monotonic() - started)


def percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ring", type=int, default=10)
    parser.add_argument("--prop-blocks", type=int, default=30)
    parser.add_argument("--sync-blocks", type=int, default=10_000)
    parser.add_argument("--txs", type=int, default=128)
    parser.add_argument("--status-seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dagchain-bench-") as tmp:
        net = TestNetwork(Path(tmp))
        try:
            per_node, worst = asyncio.run(
                bench_propagation(net, args.ring, args.prop_blocks, args.txs)
            )
            print(
                f"propagation ({args.ring}-node ring, {args.txs}-tx blocks, "
                f"{args.prop_blocks} blocks): per-node p50 {percentile(per_node, 0.5):.0f} ms, "
                f"p90 {percentile(per_node, 0.9):.0f} ms; all nodes p50 "
                f"{percentile(worst, 0.5):.0f} ms, p90 {percentile(worst, 0.9):.0f} ms "
                f"({len(per_node)} arrivals)"
            )
            net.cleanup()
            net = TestNetwork(Path(tmp) / "sync")
            sync = bench_sync(net, args.sync_blocks, args.txs)
            print(
                f"sync: {sync['blocks']:.0f} blocks, {sync['txs']:.0f} txs in {sync['sync_s']:.1f}"
                f" s: {sync['sync_blocks_per_s']:.1f} blocks/s, {sync['sync_tx_per_s']:.0f} tx/s"
                f" (source ingest via API {sync['ingest_blocks_per_s']:.1f} blocks/s; built in "
                f"{sync['build_s']:.1f} s)"
            )
            rps = asyncio.run(bench_status(net.nodes[0], args.status_seconds, 16))
            print(f"api: GET /v1/status {rps:.0f} req/s (16 concurrent clients)")
            print(f"median per-node delay {statistics.median(per_node) if per_node else 0:.0f} ms")
            print(f"sync_tx_per_s: {sync['sync_tx_per_s']:.0f}")
        finally:
            net.cleanup()


if __name__ == "__main__":
    main()
