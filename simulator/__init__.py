"""The discrete-event simulator driving the real consensus core.

Run it with ``dagchain-sim run [SCENARIO.toml]`` or ``python -m simulator run``; see
docs/simulator.md. Importing this package loads nothing else (no asyncio, no plotting).
"""

__all__: list[str] = []
