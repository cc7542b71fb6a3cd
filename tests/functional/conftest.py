"""Fixtures for the functional tests: a TestNetwork that always cleans up."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.framework import TestNetwork, network_context


@pytest.fixture
def network(tmp_path: Path) -> Iterator[TestNetwork]:
    """Real devnet nodes under ``tmp_path``; killed at teardown, logs printed on failure."""
    with network_context(tmp_path) as net:
        yield net
