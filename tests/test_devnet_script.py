"""scripts/devnet.py (``make run``): the summary's confirmed-tx rate at any polling interval."""

import importlib.util
from collections import deque
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "devnet.py"


def _devnet() -> ModuleType:
    spec = importlib.util.spec_from_file_location("devnet_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rate_is_shown_when_polls_are_as_far_apart_as_the_window() -> None:
    """With ``--interval 10`` or 15 every poll is a window apart: the rate is still the counter's
    growth over the last interval (it was '-' for good: the only earlier sample was dropped)."""
    devnet = _devnet()
    for interval in (5.0, devnet.TPS_WINDOW_S, 15.0):
        window: deque[tuple[float, float]] = deque(maxlen=64)
        assert devnet.confirmed_rate(window, 100.0, 0.0) is None
        rate = None
        for i in range(1, 6):
            rate = devnet.confirmed_rate(window, 100.0 + i * interval, 20.0 * i * interval)
        assert rate == 20.0, interval


def test_the_rate_covers_about_the_last_window() -> None:
    """Polled every second, the base is the newest sample at least the window old."""
    devnet = _devnet()
    window: deque[tuple[float, float]] = deque(maxlen=64)
    for t in range(31):  # 1 tx/s for 20 s, then 5 tx/s
        devnet.confirmed_rate(window, float(t), float(t if t <= 20 else 20 + 5 * (t - 20)))
    rate = devnet.confirmed_rate(window, 31.0, 75.0)
    assert window[0] == (21.0, 25.0)  # the newest sample a whole window old
    assert rate == (75.0 - 25.0) / 10.0
