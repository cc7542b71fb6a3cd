"""Fixtures shared by the simulator's tests."""

import pytest

from simulator.engine import ENGINE_BUILT, PythonEngine


def _engines() -> list[type[PythonEngine]]:
    if not ENGINE_BUILT:
        return [PythonEngine]
    from simulator._engine import Engine as CEngine

    return [PythonEngine, CEngine]  # type: ignore[list-item]


@pytest.fixture(params=_engines(), ids=lambda cls: cls.__module__)
def Engine(request: pytest.FixtureRequest) -> type[PythonEngine]:
    """Each engine implementation (simulator/engine.py's and the compiled one)."""
    cls: type[PythonEngine] = request.param
    return cls
