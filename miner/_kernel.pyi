LANES: str
"""The lane kernel this CPU runs: ``scalar``, ``avx2x4`` or ``avx512x8``."""
ACTIVE: int
"""Its number: 0 scalar, 1 AVX2 (4 lanes), 2 AVX-512 (8 lanes)."""

def hash_header(header: bytes, /) -> bytes: ...
def search(
    prefix: bytes, target: bytes, start: int, count: int, kind: int = -1, /
) -> int | None: ...
