"""``dagchain-miner``: mine a peer chain against a node, or ``benchmark`` its hash rate.

The command line of INTERFACES.md.

User errors (an unreachable node, a bad token, a bad address, bad flags) print one line to stderr
and exit 2, never a traceback.
"""

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from apiclient import ApiError, NodeApi, NodeUnreachable
from apiclient.core import Token
from dagchain.crypto import decode_address
from dagchain.errors import DagchainError
from dagchain.params import PRESETS, get_params
from miner.controller import Miner, MinerConfig, MinerError
from miner.pool import default_worker_kind, measure_hashrate
from miner.search import KERNEL, LANES, search_nonce_native, search_nonce_python

__all__ = ["main"]

EXIT_USER_ERROR = 2
log = logging.getLogger("dagchain.miner")


class _Parser(argparse.ArgumentParser):
    """Errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def build_mine_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dagchain-miner",
        description="Mine a peer chain against a dagchain node ('dagchain-miner benchmark "
        "--help' for the hash-rate benchmark).",
    )
    p.add_argument("--node", required=True, help="node API URL, e.g. http://127.0.0.1:27708")
    p.add_argument("--address", required=True, help="payout address (bech32m) for redemptions")
    p.add_argument("--threads", type=_positive_int, default=1, help="hashing workers")
    p.add_argument("--token-file", type=Path, help="default ~/.dagchain/<network>/api.token")
    p.add_argument("--datadir", type=Path, help="default ~/.dagchain/miner-<network>")
    p.add_argument("--blocks", type=_positive_int, help="exit 0 after N accepted blocks")
    p.add_argument("--redeem-every", type=_positive_int, default=10, help="blocks per redemption")
    p.add_argument("--rate", type=_positive_float, default=4.0, help="max blocks per second")
    p.add_argument("--status-interval", type=_positive_float, default=10.0, help="seconds")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def build_benchmark_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dagchain-miner benchmark", description="Hash rate with no node.")
    p.add_argument("--threads", type=_positive_int, default=1, help="hashing workers")
    p.add_argument("--seconds", type=_positive_float, default=5.0, help="measuring time")
    p.add_argument("--workers", choices=["thread", "process"], help="default: by kernel")
    p.add_argument(
        "--kernel", choices=["c", "python"], help="default: the active one (" + KERNEL + ")"
    )
    return p


def benchmark(argv: Sequence[str]) -> int:
    args = build_benchmark_parser().parse_args(argv)
    kernel = args.kernel or KERNEL
    if kernel == "c" and KERNEL != "c":
        _fail("the C kernel was not built (no C compiler at install time)")
    search = search_nonce_native if kernel == "c" else search_nonce_python
    kind = args.workers or default_worker_kind(releases_gil=kernel == "c")
    lanes = f" ({LANES})" if kernel == "c" else ""
    print(f"kernel: {kernel}{lanes}  workers: {args.threads} x {kind}  seconds: {args.seconds:g}")
    rate = measure_hashrate(args.threads, args.seconds, kind=kind, search=search)
    print(f"hashrate_hs: {rate:.0f}")
    return 0


def _dagchain_home() -> Path:
    return Path(os.path.expanduser("~")) / ".dagchain"


def _fail(message: str) -> NoReturn:
    print(f"dagchain-miner: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USER_ERROR)


async def _node_network(api: NodeApi) -> str:
    """The node's network name from ``GET /v1/status`` (no token needed)."""
    url = api.url + "/v1/status"
    try:
        body = await api.status()
    except NodeUnreachable as exc:
        raise MinerError(f"cannot reach the node at {api.url}: {exc.message}") from exc
    except ApiError as exc:
        if exc.code == "bad-json":
            raise MinerError(f"{url} did not answer JSON; is this a dagchain node?") from exc
        if exc.code == "bad-answer":
            raise MinerError(f"{url} is not a node's status ({exc.message})") from exc
        raise MinerError(f"{url} answered {exc.status}; is this a dagchain node?") from exc
    return body.network


def _check_address_shape(text: str) -> None:
    """Refuse an ``--address`` that is no network's address before the node is asked: with the
    node down too, its error would hide the typo. Which network it must be of is the node's
    to say (checked after ``GET /v1/status``)."""
    first: DagchainError | None = None
    for params in PRESETS.values():
        try:
            decode_address(params.hrp, text)
            return
        except DagchainError as exc:
            if first is None or text.startswith(params.hrp + "1"):
                first = exc
    prefixes = ", ".join(f"{p.hrp}1..." for p in PRESETS.values())
    raise MinerError(f"bad --address {text!r}: not an address of any network ({prefixes}): {first}")


async def _mine(args: argparse.Namespace) -> int:
    _check_address_shape(args.address)
    async with NodeApi(args.node, timeout_s=30) as api:
        network = await _node_network(api)
        try:
            params = get_params(network)
        except KeyError as exc:
            raise MinerError(str(exc)) from exc
        try:
            payout = decode_address(params.hrp, args.address)
        except DagchainError as exc:
            raise MinerError(
                f"bad --address {args.address!r} for {network} ({params.hrp}1...): {exc}"
            ) from exc
        home = _dagchain_home()
        token_file = args.token_file or home / network / "api.token"
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise MinerError(f"cannot read the API token from {token_file}: {exc}") from exc
        api.token = Token(token, token_file)
        cfg = MinerConfig(
            node=args.node,
            payout=payout,
            payout_text=args.address,
            token=token,
            datadir=args.datadir or home / f"miner-{network}",
            network=network,
            params=params,
            threads=args.threads,
            blocks=args.blocks,
            redeem_every=args.redeem_every,
            rate=args.rate,
            status_interval_s=args.status_interval,
            token_file=token_file,
        )
        miner = Miner(cfg, api, out=lambda line: print(line, flush=True))
        try:
            return await _run_until_signal(miner)
        except ApiError as exc:
            raise MinerError(f"lost the node at {args.node}: {exc}") from exc


async def _run_until_signal(miner: Miner) -> int:
    """Run the miner; SIGINT or SIGTERM stops it cleanly with exit status 0.

    The signal aborts the running nonce search (the hashing workers return within one chunk)
    and cancels the main loop; its state file was last written, atomically, when its last block
    was accepted, so a restart on the same datadir continues the same peer chain. The final
    statistics line is printed as after ``--blocks N``.
    """
    loop = asyncio.get_running_loop()
    run = asyncio.ensure_future(miner.run())
    received: list[str] = []

    def stop(name: str) -> None:
        if not received:
            miner.out(f"miner: {name} received, stopping")
        received.append(name)
        miner.abort.set()
        run.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop, sig.name)
    try:
        return await run
    except asyncio.CancelledError:
        if not received:
            raise
        miner.out(miner.stats.line())
        return 0
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["benchmark"]:
        return benchmark(argv[1:])
    args = build_mine_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return asyncio.run(_mine(args))
    except MinerError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
