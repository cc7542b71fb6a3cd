"""The nonce search: the C kernel and the pure-Python fallback agree (STYLE.md rule 12)."""

import hashlib
import pickle
import random
import shutil
import sysconfig
from pathlib import Path

import pytest

from dagchain.blocks import HEADER_SIZE, NONCE_OFFSET
from miner import search
from miner.search import NONCE_SPACE, search_nonce, search_nonce_native, search_nonce_python

needs_kernel = pytest.mark.skipif(search.KERNEL != "c", reason="miner._kernel was not built")


def _brute_force(prefix: bytes, target: int, start: int, count: int) -> int | None:
    """The definition, with no midstate: one full hash per nonce."""
    for nonce in range(start, start + count):
        digest = hashlib.blake2b(prefix + nonce.to_bytes(8, "little"), digest_size=32).digest()
        if int.from_bytes(digest, "little") <= target:
            return nonce
    return None


CAN_BUILD = (
    shutil.which("cc") is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()
)


@pytest.mark.skipif(not CAN_BUILD, reason="no C compiler or Python headers: fallback expected")
def test_kernel_is_built_where_a_compiler_exists() -> None:
    """With a compiler the install must build the kernel; a silent fallback would hide a bug."""
    assert search.KERNEL == "c"
    assert search.RELEASES_GIL


@needs_kernel
def test_kernel_hash_equals_hashlib_for_random_headers() -> None:
    rnd = random.Random(6)
    for _ in range(2000):
        header = rnd.randbytes(HEADER_SIZE)
        assert search.hash_header(header) == hashlib.blake2b(header, digest_size=32).digest()


@needs_kernel
@pytest.mark.parametrize("difficulty", [1, 2, 4, 16, 300])
def test_kernel_and_fallback_find_the_same_nonces(difficulty: int) -> None:
    """Many random headers and targets (a solution every ``difficulty`` nonces on average)."""
    rnd = random.Random(difficulty)
    for _ in range(60):
        prefix = rnd.randbytes(NONCE_OFFSET)
        target = rnd.randrange(2**256 // difficulty)
        start = rnd.randrange(NONCE_SPACE - 5000)
        count = rnd.randrange(1, 1500)
        expected = search_nonce_python(prefix, target, start, count)
        assert search_nonce_native(prefix, target, start, count) == expected
        if difficulty >= 16:
            assert _brute_force(prefix, target, start, count) == expected


@needs_kernel
def test_every_solution_in_a_range_is_found_in_order() -> None:
    """Restarting after each hit walks the same solutions in both implementations."""
    rnd = random.Random(42)
    prefix = rnd.randbytes(NONCE_OFFSET)
    target = 2**256 // 50
    found: dict[str, list[int]] = {}
    for name, fn in (("python", search_nonce_python), ("c", search_nonce_native)):
        hits, start, end = [], 0, 20_000
        while (nonce := fn(prefix, target, start, end - start)) is not None:
            hits.append(nonce)
            start = nonce + 1
        found[name] = hits
    assert found["c"] == found["python"]
    assert len(found["c"]) > 300


@needs_kernel
@pytest.mark.parametrize(
    ("target", "start", "count", "expected"),
    [
        (2**256 - 1, 7, 10, 7),  # every hash meets the largest target
        (2**300, 7, 10, 7),  # a target above the hash space too
        (-1, 0, 1000, None),  # no hash meets a negative target
        (0, 0, 1000, None),
        (2**256 - 1, 0, 0, None),  # an empty range
        (2**256 - 1, NONCE_SPACE - 1, 10, NONCE_SPACE - 1),  # cut at the top of the nonce space
    ],
)
def test_edge_targets_and_ranges_agree(
    target: int, start: int, count: int, expected: int | None
) -> None:
    prefix = bytes(range(NONCE_OFFSET))
    assert search_nonce_python(prefix, target, start, count) == expected
    assert search_nonce_native(prefix, target, start, count) == expected


def test_the_nonce_is_the_last_eight_header_bytes_little_endian() -> None:
    prefix = bytes(NONCE_OFFSET)
    target = 2**256 // 8
    nonce = search_nonce(prefix, target, 1000, 10_000)
    assert nonce is not None
    digest = hashlib.blake2b(prefix + nonce.to_bytes(8, "little"), digest_size=32).digest()
    assert int.from_bytes(digest, "little") <= target


def test_search_nonce_is_picklable_for_worker_processes() -> None:
    assert pickle.loads(pickle.dumps(search_nonce)) is search_nonce
    assert pickle.loads(pickle.dumps(search_nonce_python)) is search_nonce_python


@pytest.mark.parametrize("fn", [search_nonce_python, search_nonce])
def test_bad_prefix_or_range_is_an_error(fn: search.SearchFunction) -> None:
    with pytest.raises(ValueError, match="prefix"):
        fn(bytes(150), 1, 0, 1)
    with pytest.raises(ValueError, match="range"):
        fn(bytes(NONCE_OFFSET), 1, NONCE_SPACE, 1)


@needs_kernel
@pytest.mark.parametrize("kind", [0, 1, 2], ids=["scalar", "avx2x4", "avx512x8"])
def test_every_lane_kernel_finds_the_fallback_nonces(kind: int) -> None:
    """Each vector width (where this CPU has it) walks the same solutions as hashlib."""
    from miner import _kernel

    if kind > _kernel.ACTIVE:
        pytest.skip(f"this CPU runs {_kernel.LANES}")
    rnd = random.Random(1000 + kind)
    for _ in range(300):
        prefix = rnd.randbytes(NONCE_OFFSET)
        target = rnd.randrange(2**256 // rnd.choice([1, 3, 7, 50, 400]))
        start = rnd.randrange(NONCE_SPACE - 5000)
        count = rnd.randrange(0, 900)  # not a multiple of the lane count: the tail is scalar
        expected = search_nonce_python(prefix, target, start, count)
        clamped = min(target, 2**256 - 1).to_bytes(32, "little")
        assert _kernel.search(prefix, clamped, start, count, kind) == expected


@needs_kernel
def test_lane_kernels_agree_near_the_top_of_the_nonce_space() -> None:
    from miner import _kernel

    prefix = bytes(NONCE_OFFSET)
    target = (2**256 // 20).to_bytes(32, "little")
    start = NONCE_SPACE - 1000
    expected = search_nonce_python(prefix, 2**256 // 20, start, 1000)
    for kind in range(_kernel.ACTIVE + 1):
        assert _kernel.search(prefix, target, start, 1000, kind) == expected
