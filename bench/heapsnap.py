"""Python heap snapshots of a running process, by allocation site (issue 26: what grows?).

Run a module under ``tracemalloc``, a snapshot written every ``--every`` seconds and on SIGUSR1::

    python bench/heapsnap.py run --out DIR [--every 60] [--frames 1] -- node.cli start ...

(``DIR/snap-SSSSS.pickle``, SSSSS the seconds since start; ``DIR/traced.txt``: seconds, traced
bytes now and at peak). Then one line per allocation site across the snapshots, the sites that
grew most first (MiB at each snapshot, block count at the last)::

    python bench/heapsnap.py series DIR [--top 25]

``tracemalloc`` slows the process (the node about 1.5-2x) and its own tables add to its RSS,
so read RSS from an untraced run and the Python heap's composition from a traced one.
"""

import argparse
import os
import runpy
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

# Run as a script, this file's folder is sys.path[0]: the repository instead, for the module.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def run(out: Path, every: float, frames: int, argv: list[str]) -> None:
    """Run ``python -m argv[0] argv[1:]`` in this process with snapshots into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lock = threading.Lock()
    tracemalloc.start(frames)

    def dump() -> None:
        with lock:
            elapsed = int(time.monotonic() - start)
            tracemalloc.take_snapshot().dump(str(out / f"snap-{elapsed:05d}.pickle"))
            now, peak = tracemalloc.get_traced_memory()
            with (out / "traced.txt").open("a") as f:
                f.write(f"{elapsed} {now} {peak}\n")

    def on_signal(signum: int, frame: FrameType | None) -> None:
        dump()

    def periodic() -> None:
        while True:
            time.sleep(every)
            dump()

    signal.signal(signal.SIGUSR1, on_signal)
    threading.Thread(target=periodic, name="heapsnap", daemon=True).start()
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


def series(folder: Path, top: int) -> list[str]:
    """Lines: each site's traced MiB at every snapshot of ``folder``, largest growth first."""
    paths = sorted(folder.glob("snap-*.pickle"))
    if not paths:
        return [f"no snapshots in {folder}"]
    rows: list[dict[tuple[str, int], tuple[int, int]]] = []
    for path in paths:
        snap = tracemalloc.Snapshot.load(str(path))
        rows.append(
            {
                (s.traceback[0].filename, s.traceback[0].lineno): (s.size, s.count)
                for s in snap.statistics("lineno")
            }
        )
    first, last = rows[0], rows[-1]
    sites = sorted(last, key=lambda k: first.get(k, (0, 0))[0] - last[k][0])[:top]
    root = str(_HERE.parent) + os.sep
    stems = "".join(f"{p.stem[5:]:>8}" for p in paths)
    totals = "".join(f"{sum(v[0] for v in r.values()) / 2**20:8.1f}" for r in rows)
    lines = ["site".ljust(44) + stems + "  blocks (MiB per snapshot)", "total".ljust(44) + totals]
    for site in sites:
        name = f"{site[0].replace(root, '')}:{site[1]}"[-44:]
        sizes = "".join(f"{r.get(site, (0, 0))[0] / 2**20:8.2f}" for r in rows)
        lines.append(f"{name:44}{sizes}  {last[site][1]}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a module with snapshots")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--every", type=float, default=60.0, help="seconds between snapshots")
    r.add_argument("--frames", type=int, default=1, help="traceback depth (1: file:line)")
    r.add_argument("module", nargs=argparse.REMAINDER, help="-- MODULE ARGS...")
    s = sub.add_parser("series", help="allocation sites across the snapshots of a folder")
    s.add_argument("folder", type=Path)
    s.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.cmd == "series":
        print("\n".join(series(args.folder, args.top)))
        return 0
    module = list(args.module)
    if module[:1] == ["--"]:
        module = module[1:]
    if not module:
        parser.error("run: name a module after --")
    run(args.out, args.every, args.frames, module)
    return 0


if __name__ == "__main__":
    sys.exit(main())
