"""NodeConfig: the node's settings from a TOML file and command-line flags (flags win).

The TOML file holds the same keys as the long options (``p2p-port`` or ``p2p_port``; ``peer`` or
``peers``, one ``"HOST:PORT"`` or a list; ``no-p2p``; ``~`` expanded in ``datadir``). An unknown
key or a bad value is a :class:`ConfigError` with a one-line message naming the key, which
``dagchain-node`` turns into exit status 2.
"""

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from dagchain.params import ConsensusParams, get_params
from dagchain.pruning import check_prune_depth
from p2p.settings import P2PSettings

__all__ = ["CONFIG_FILE_NAME", "ConfigError", "NodeConfig", "load_config"]

CONFIG_FILE_NAME = "dagchain.toml"
DEFAULT_API_BODY_LIMIT = 1_048_576
"""Bytes: a hex-encoded maximal block (2 x 262,144) plus JSON framing fits."""
NETWORKS = ("mainnet", "testnet", "devnet")
_ALIASES = {"peer": "peers"}


class ConfigError(Exception):
    """A user error in flags or the config file (one line, no traceback)."""


class NodeConfig(BaseSettings):
    """Every setting of a node; ``None`` means "the network's default"."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    network: Literal["mainnet", "testnet", "devnet"] = "mainnet"
    datadir: Path | None = None
    p2p_host: str = "0.0.0.0"  # peers reach a node on every interface
    p2p_port: int | None = Field(default=None, ge=0, le=65535)
    api_host: str = "127.0.0.1"
    api_port: int | None = Field(default=None, ge=0, le=65535)
    peers: tuple[str, ...] = ()
    no_discovery: bool = False
    stale_relay_filter: bool = True
    """P14: drop relayed blocks whose milestone link is `punctuality` or more below our best."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    max_inbound: int | None = Field(default=None, ge=0)
    max_outbound: int | None = Field(default=None, ge=0)
    ban_duration_s: int | None = Field(default=None, ge=0)
    api_body_limit: int = Field(default=DEFAULT_API_BODY_LIMIT, ge=1024)
    in_memory: bool = False
    """Keep the chain in memory instead of LevelDB (tests, demos; nothing survives a restart)."""
    p2p: bool = True
    """Run the peer-to-peer side (off: an API-only node, e.g. a miner's private devnet)."""
    prune_depth: int | None = None
    """Keep block bodies of the last D milestones only (None: keep all; docs/node.md)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what load_config hands in: no environment variables, no dotenv (no hidden input).
        return (init_settings,)

    @field_validator("peers", mode="before")
    @classmethod
    def _one_peer(cls, value: Any) -> Any:
        # ``peer = "host:port"`` in the file, like one ``--peer``; a list for several
        return (value,) if isinstance(value, str) else value

    @field_validator("datadir", mode="before")
    @classmethod
    def _expand_home(cls, value: Any) -> Any:
        # ``~`` in the config file (or ``--datadir=~/x``, which no shell expands)
        return Path(value).expanduser() if isinstance(value, str | Path) else value

    @field_validator("peers")
    @classmethod
    def _check_peers(cls, peers: tuple[str, ...]) -> tuple[str, ...]:
        for peer in peers:
            parse_host_port(peer)
        return peers

    @field_validator("prune_depth")
    @classmethod
    def _check_prune_depth(cls, depth: int | None, info: ValidationInfo) -> int | None:
        if depth is not None:
            network = info.data.get("network", "mainnet")
            check_prune_depth(depth, get_params(network).punctuality)
        return depth

    @field_validator("log_level", "log_format", "network", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    # ------------------------------------------------------------------ resolved values
    @property
    def params(self) -> ConsensusParams:
        """The consensus parameters of the chosen network."""
        return get_params(self.network)

    @property
    def data_path(self) -> Path:
        """The datadir, defaulting to ``~/.dagchain/<network>``."""
        return self.datadir if self.datadir is not None else default_datadir(self.network)

    @property
    def resolved_p2p_port(self) -> int:
        """The P2P port (network default unless set)."""
        return self.params.p2p_port if self.p2p_port is None else self.p2p_port

    @property
    def resolved_api_port(self) -> int:
        """The API port (network default unless set)."""
        return self.params.rpc_port if self.api_port is None else self.api_port

    def resolved(self) -> "NodeConfig":
        """A copy with the network defaults filled in (datadir, ports)."""
        return self.model_copy(
            update={
                "datadir": self.data_path,
                "p2p_port": self.resolved_p2p_port,
                "api_port": self.resolved_api_port,
            }
        )

    @property
    def peer_addresses(self) -> list[tuple[str, int]]:
        """``peers`` as (host, port) pairs."""
        return [parse_host_port(p) for p in self.peers]

    def p2p_settings(self) -> P2PSettings:
        """The peer-to-peer settings (call on ``resolved()``: datadir and ports filled in)."""
        return P2PSettings.for_network(
            self.network,
            max_outbound=self.max_outbound,
            max_inbound=self.max_inbound,
            ban_duration_s=self.ban_duration_s,
            seeds=tuple(self.peer_addresses),
            discovery=not self.no_discovery,
            stale_relay_filter=self.stale_relay_filter,
            datadir=self.data_path,
            listen_port=self.resolved_p2p_port,
        )


def default_datadir(network: str) -> Path:
    """``~/.dagchain/<network>``."""
    return Path.home() / ".dagchain" / network


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:PORT``) as a pair.

    Raises:
        ValueError: not HOST:PORT with a port in 1..65535.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"peer {text!r} is not HOST:PORT")
    return host, int(port)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = TomlConfigSettingsSource(NodeConfig, toml_file=path)()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name == "no_p2p":  # the flag --no-p2p sets p2p = false
            if not isinstance(value, bool):
                raise ConfigError(f"bad value for {key}: not true or false (config file {path})")
            out["p2p"] = not value
            continue
        out[_ALIASES.get(name, name)] = value
    return out


def load_config(flags: dict[str, Any], config_file: Path | None = None) -> NodeConfig:
    """Merge the config file (explicit, or ``<datadir>/dagchain.toml`` if present) and flags.

    Args:
        flags: Options given on the command line (``None`` values are "not given").
        config_file: ``--config FILE``; it must exist if given.

    Raises:
        ConfigError: missing or unreadable file, bad TOML, unknown key or bad value.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    from_file: dict[str, Any] = {}
    if config_file is not None:
        if not config_file.is_file():
            raise ConfigError(f"config file {config_file} does not exist")
        from_file = _read_toml(config_file)
    else:
        network = str(given.get("network", "mainnet")).lower()
        datadir = given.get("datadir")
        base = Path(datadir).expanduser() if datadir is not None else default_datadir(network)
        candidate = base / CONFIG_FILE_NAME
        if candidate.is_file():
            config_file = candidate
            from_file = _read_toml(candidate)
    try:
        return NodeConfig(**{**from_file, **given})
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, config_file)) from None


def _one_line(exc: ValidationError, config_file: Path | None) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "config"
    where = f" (config file {config_file})" if config_file is not None else ""
    if err["type"] == "extra_forbidden":
        return f"unknown config key {key!r}{where}"
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"bad value for {key}: {message}{where}"
