"""Print the docs/experiments.md "v2: freshness at scale" rows from run directories' metrics.json.

python experiments/v2_table.py out/v2/f01_k1 out/v2/f01_k8 ...
"""

import json
import sys
from pathlib import Path


def row(run: Path) -> str:
    m = json.loads((run / "metrics.json").read_text())
    man = json.loads((run / "manifest.json").read_text())
    half = m["offered_tps_second_half"]
    ratio = m["throughput_tps_second_half"] / half if half else 0.0
    network = man["scenario"]["network"]
    cells = [
        run.name,
        network["delay"],
        network.get("relay", "push-all"),
        str(m["best_height"]),
        f"{m['blocks']:,}",
        f"{100 * m['late_block_rate']:.2f} %",
        f"{100 * m['unrewarded_block_rate']:.2f} %",
        str(m["late_blocks_undecided"]),
        f"{m['offered_tps']:.1f}",
        f"{m['throughput_tps']:.1f}",
        f"{100 * ratio:.1f} %",
        f"{m['txs_lost']} ({m['txs_lost_refused_on_offer']})",
        f"{m['duplicate_tx_rate']:.4f}",
        f"{m['mempool_wait_s']['p50']:.1f}",
        f"{m['confirmation_latency_s']['p50']:.1f}",
        f"{m['propagation_s']['p50']:.2f}",
        f"{m['stale_milestone_rate']:.3f}",
        f"{man['wall_s'] / 60:.1f}",
    ]
    attack = ("attacker_hash_share", "attacker_fee_share", "attacker_revenue_share")
    cells.extend(f"{m[key]:.3f}" for key in attack if key in m)
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| run | delay | relay | milestones | blocks | late (S6) | unrewarded (R2) | undecided "
    "| offered tps | confirmed tps "
    "| confirmed/offered, 2nd half | txs_lost (refused on offer) | duplicate rate | wait p50 s "
    "| latency p50 s | propagation p50 s | stale ms | wall min |"
)

if __name__ == "__main__":
    print(HEADER)
    for arg in sys.argv[1:]:
        path = Path(arg)
        if (path / "metrics.json").exists():
            print(row(path))
