"""One home per rule (docs/protocol.md decision 23): header and link rules live in dagchain/.

The node, the miner, the simulator, the wallet and the scripts call ``dagchain.rules`` (H2-H5,
H7 for ``tips_root``, H11, D4-D6, msh(L), P14) and never re-derive a rule. This test parses every
module outside ``dagchain/`` and fails on the shapes a re-implementation takes: a comparison
against ``punctuality`` (D5b, P14, the §3.4 catch-up) or against a milestone-link height (D5a),
a comparison with the null id (H5), a block ``version`` compared with ``block_version`` (H2),
a timestamp compared with ``max_future_drift_ms`` (H11), a header ``target`` compared with an
encoded target (D4), ``is_valid_compact_target`` (H3) or a hand-made ``tips_root`` (H7).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ("node", "miner", "simulator", "wallet", "scripts", "bench", "experiments")


def _names(node: ast.AST) -> set[str]:
    """Every attribute and variable name used inside an expression."""
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif isinstance(sub, ast.Name):
            out.add(sub.id)
    return out


def _violations(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = _names(node)
            if "punctuality" in names:
                found.append((node.lineno, "D5b/P14: compares against punctuality"))
            if "ms_link_height" in names and (
                "best_height" in names or "height" in names or "ms_height" in names
            ):
                found.append((node.lineno, "D5a: compares milestone-link heights"))
            if "NULL_ID" in names:
                found.append((node.lineno, "H5: compares with the null id"))
            if "block_version" in names:
                found.append((node.lineno, "H2: compares a version with block_version"))
            if "max_future_drift_ms" in names:
                found.append((node.lineno, "H11: compares a timestamp with the drift"))
            if "target" in names and "encode_compact" in names:
                found.append((node.lineno, "D4: compares a header target"))
        elif isinstance(node, ast.Call):
            names = _names(node.func)
            if "is_valid_compact_target" in names:
                found.append((node.lineno, "H3: calls is_valid_compact_target"))
        elif isinstance(node, ast.Constant) and node.value == b"dagchain-tips":
            found.append((node.lineno, "H7: hashes a tips_root by hand"))
    return found


def _modules() -> list[Path]:
    files: list[Path] = []
    for top in OUTSIDE:
        base = ROOT / top
        if base.is_dir():
            files.extend(sorted(base.rglob("*.py")))
    return files


def test_the_scan_sees_the_programs() -> None:
    """The scan covers the node, the miner and the simulator (it cannot pass by finding none)."""
    seen = {p.relative_to(ROOT).parts[0] for p in _modules()}
    assert {"node", "miner", "simulator"} <= seen


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_rule_is_implemented_outside_dagchain(path: Path) -> None:
    """H2-H5, H7 (tips), H11, D4-D6 and P14 are called from ``dagchain.rules``, never copied."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    assert _violations(tree) == [], f"{path.relative_to(ROOT)} re-implements a dagchain rule"


def test_the_scan_catches_a_copied_rule() -> None:
    """The detector flags the v1 template's own D5b comparison and the v1 sync's H5 check."""
    copied = ast.parse(
        "if link_height - msh >= p.punctuality:\n    pass\n"
        "if NULL_ID in header.links:\n    pass\n"
        "if meta.ms_link_height > best_height:\n    pass\n"
    )
    rules = {reason.split(":")[0] for _, reason in _violations(copied)}
    assert rules == {"D5b/P14", "H5", "D5a"}
