"""``dagchain-node``: command line, datadir lock, API token, logging, event loop (INTERFACES.md).

User errors (bad flags, bad config, a datadir in use, a port taken, a database of another network)
print one line to stderr and exit 2, never a traceback. SIGINT/SIGTERM stop the node cleanly with
exit status 0. This is the only module that imports uvloop.
"""

import argparse
import asyncio
import fcntl
import gc
import json
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Any, NoReturn

from dagchain.errors import StorageError
from node.config import ConfigError, NodeConfig, load_config
from node.daemon import StartupError, run_node

__all__ = ["main"]

EXIT_OK = 0
EXIT_USER_ERROR = 2
LOCK_FILE_NAME = ".lock"
TOKEN_FILE_NAME = "api.token"
log = logging.getLogger("dagchain.node")
GC_THRESHOLDS = (10_000, 10, 10)
"""A young collection every 10,000 net allocations instead of CPython's 700 (the other two numbers
are CPython's), so full collections over the chain and the pool come 14 times less often: with
700, a 3-node devnet at about 1,400 tx/s spent 7-10 % of each node's CPU in the collector, half of
it in full collections of 70-90 ms each (bench/tps.py). Cycles are freed later, not kept."""


def package_version() -> str:
    """The installed dagchain version (``0+unknown`` when run from an uninstalled tree)."""
    try:
        return version("dagchain")
    except PackageNotFoundError:
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``dagchain-node`` parser with its ``start`` subcommand."""
    parser = _Parser(prog="dagchain-node", description="dagchain full node")
    parser.add_argument("--version", action="version", version=f"dagchain {package_version()}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    start = sub.add_parser("start", help="run a full node in the foreground")
    start.add_argument(
        "--network",
        type=str.lower,
        choices=["mainnet", "testnet", "devnet"],
        default=None,
        help="parameter preset and genesis (default: mainnet)",
    )
    start.add_argument(
        "--datadir", type=Path, default=None, help="all state (default: ~/.dagchain/<network>)"
    )
    start.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="TOML with the same keys as the long options; flags override it "
        "(default: <datadir>/dagchain.toml if present)",
    )
    start.add_argument(
        "--p2p-host", default=None, metavar="HOST", help="P2P listener (default: 0.0.0.0)"
    )
    start.add_argument(
        "--p2p-port",
        type=int,
        default=None,
        metavar="PORT",
        help="default: mainnet 7707, testnet 17707, devnet 27707",
    )
    start.add_argument(
        "--api-host",
        default=None,
        metavar="HOST",
        help="HTTP API and explorer (default: 127.0.0.1)",
    )
    start.add_argument(
        "--api-port",
        type=int,
        default=None,
        metavar="PORT",
        help="default: mainnet 7708, testnet 17708, devnet 27708",
    )
    start.add_argument(
        "--peer",
        dest="peers",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help="peer to connect to; repeatable (default: none, no seeds are built in)",
    )
    _flag(start, "--no-discovery", "connect only to --peer entries, do not gossip addresses")
    start.add_argument(
        "--log-level",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        default=None,
        help="logging to stderr (default: info)",
    )
    start.add_argument(
        "--log-format",
        type=str.lower,
        choices=["text", "json"],
        default=None,
        help="text, or one JSON object per line (default: text)",
    )
    start.add_argument(
        "--max-inbound", type=int, default=None, metavar="N", help="default: by network"
    )
    start.add_argument(
        "--max-outbound", type=int, default=None, metavar="N", help="default: by network"
    )
    start.add_argument(
        "--api-body-limit",
        type=int,
        default=None,
        metavar="BYTES",
        help="larger request bodies get 413 (default: 1048576)",
    )
    start.add_argument(
        "--prune-depth",
        type=int,
        default=None,
        metavar="D",
        help="keep block bodies of the last D milestones only (D >= the network's punctuality: "
        "mainnet 100, devnet 20); headers, the ledger and recent undo records stay "
        "(default: off)",
    )
    _flag(start, "--in-memory", "keep the chain in memory (nothing survives a restart)")
    start.add_argument(
        "--no-p2p",
        dest="p2p",
        action="store_const",
        const=False,
        default=None,
        help="run without the peer-to-peer side (API only)",
    )
    return parser


def _flag(parser: argparse.ArgumentParser, name: str, text: str) -> None:
    # default None: "not given", so a config-file value is kept
    parser.add_argument(name, action="store_const", const=True, default=None, help=text)


def _fail(message: str) -> int:
    print(f"dagchain-node: error: {message}", file=sys.stderr)
    return EXIT_USER_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dagchain-node``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "start":
        return _fail("a command is required: dagchain-node start [options]")
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    try:
        config = load_config(flags, args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    setup_logging(config.log_level, config.log_format)
    try:
        lock = lock_datadir(config.data_path)
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        token = write_token(config.data_path)
        return _run(config, token)
    except (ConfigError, StartupError, StorageError) as exc:
        return _fail(str(exc))
    finally:
        lock.close()


def _run(config: NodeConfig, token: str) -> int:
    gc.set_threshold(*GC_THRESHOLDS)
    factory = _loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run_node(config, token, package_version()))
    log.info("stopped")
    return EXIT_OK


def _loop_factory() -> Any:
    try:
        import uvloop  # optional speed-up; the only importer (STYLE.md §1)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        return None
    return uvloop.new_event_loop


def lock_datadir(datadir: Path) -> IO[str]:
    """Create the datadir and hold an exclusive lock on it for the life of the process.

    Raises:
        ConfigError: the datadir cannot be created, or another node holds the lock.
    """
    try:
        datadir.mkdir(parents=True, exist_ok=True)
        handle = (datadir / LOCK_FILE_NAME).open("a+")
    except OSError as exc:
        raise ConfigError(f"cannot use datadir {datadir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"datadir {datadir} is in use by another dagchain-node (pid {holder})"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def write_token(datadir: Path) -> str:
    """Write a fresh random bearer token to ``<datadir>/api.token`` (mode 0600).

    Raises:
        ConfigError: the file cannot be written (a directory in its place, no permission).
    """
    token = secrets.token_hex(32)
    path = datadir / TOKEN_FILE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(token + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the API token {path}: {exc.strerror or exc}") from None
    return token


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


def setup_logging(level: str, fmt: str) -> None:
    """Log to stderr as text or one JSON object per line."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
