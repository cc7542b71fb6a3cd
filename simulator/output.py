"""Run outputs: manifest.json, metrics.json, blocks.csv (plots come from plots.py)."""

import csv
import dataclasses
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from simulator.scenario import Scenario, write_json
from simulator.simulation import RunResult

BLOCK_COLUMNS = (
    "block_id",
    "miner",
    "created_s",
    "is_milestone",
    "on_best_chain",
    "ls_height",
    "ms_link_height",
    "txs",
    "bytes",
    "reached",
    "of_nodes",
    "prop_p50_s",
    "prop_p90_s",
    "prop_max_s",
)


def code_version() -> str:
    """``git describe`` of the source tree, or the package version outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=5,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("dagchain")
        except PackageNotFoundError:
            return "unknown"


def write_outputs(
    out: Path, scenario: Scenario, result: RunResult, resources: dict[str, Any] | None = None
) -> None:
    """Write manifest.json, metrics.json and blocks.csv into ``out`` (created if needed).

    ``resources``: what the run cost (:func:`simulator.cli.run_resources`), added to the manifest.
    """
    out.mkdir(parents=True, exist_ok=True)
    params = scenario.to_params()
    manifest: dict[str, Any] = {
        "scenario": scenario.manifest_dict(),
        "seed": scenario.seed,
        "consensus_params": dataclasses.asdict(params),
        "code_version": code_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "wall_s": round(result.wall_s, 3),
        "events": result.events,
        "events_per_s": result.metrics.get("events_per_s", 0.0),
        **(resources or {}),
    }
    write_json(out / "manifest.json", manifest)
    write_json(out / "metrics.json", result.metrics)
    with (out / "blocks.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=BLOCK_COLUMNS)
        writer.writeheader()
        writer.writerows(result.blocks)


__all__ = ["BLOCK_COLUMNS", "code_version", "write_outputs"]
