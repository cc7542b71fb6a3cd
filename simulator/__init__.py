"""The discrete-event simulator driving the real core (arrives with a later issue)."""

__all__: list[str] = []
