"""Every numbered consensus rule of PROTOCOL.md §2-§9 (and §12's A1-A3) is cited by a test.

Issue 2 asks for "one or more unit tests per numbered rule, naming the rule". This check keeps that
true as tests are renamed or removed: a rule counts as covered when a test function's name or
docstring, or a test module's docstring, cites its id (``test_e2_...``, "... (V6) ...").
The list is copied from PROTOCOL.md v1 so that the check runs from a clean clone without
``../shared``; a new rule in a later revision must be added here with its tests.
"""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

RULES: tuple[str, ...] = (
    # §2 encoding and hashing
    *("E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E9"),
    # §3 arrival and DAG-context rules
    *("H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "H9", "H10", "H11"),
    *("D1", "D2", "D3", "D4", "D5a", "D5b", "D6"),
    # §4 milestone chain, §6 retargeting, §5 level sets
    *("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8"),
    *("G0", "G1", "G2", "G3", "G4", "G5", "G6"),
    *("L1", "L2", "L3"),
    # §7 transactions and ledger, §8 sortition, §9 rewards
    *("T1", "T2", "T3", "T4", "T5", "T6", "T7"),
    *("V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8"),
    *("S1", "S2", "S3", "S4", "S5", "S6", "S7"),
    *("R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8"),
    # §12 atomic batches
    *("A1", "A2", "A3"),
)


def _citations() -> list[str]:
    """Names (underscores as spaces) and docstrings of every test function and test module."""
    texts: list[str] = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        texts.append(ast.get_docstring(tree) or "")
        texts.extend(
            f"{node.name.replace('_', ' ')} {ast.get_docstring(node) or ''}"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test")
        )
    return texts


def _cites(text: str, rule: str) -> bool:
    pattern = rf"(?<![A-Za-z0-9]){re.escape(rule)}(?![0-9])"
    return re.search(pattern, text, re.IGNORECASE) is not None


def test_every_numbered_rule_of_sections_2_to_9_is_cited_by_a_test() -> None:
    texts = _citations()
    uncited = [rule for rule in RULES if not any(_cites(text, rule) for text in texts)]
    assert uncited == [], f"rules no test names: {uncited}"


def test_a_rule_id_is_matched_whole_not_as_a_prefix() -> None:
    """H1 must not be satisfied by a test that only cites H10 or H11."""
    assert _cites("test h10 future timestamp", "H10")
    assert not _cites("test h10 future timestamp", "H1")
    assert not _cites("rejects at D5b", "D5a")
    assert _cites("encodes E3 (canonical ints)", "E3")
