"""The explorer page (GET /) in headless Chromium against a real devnet node.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package (test extra).
``make test`` installs the Debian packages when it runs as root with apt-get
(scripts/ensure-system-deps.sh). Without them the test skips, naming what to install, so the reason
shows in pytest's summary; on CI (``CI`` set) it fails instead, since CI must run it
(docs/architecture.md, "System packages").
"""

import functools
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from dagchain.params import DEVNET
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import BlockFactory, NodeProcess, TestNetwork, wait_until

log = logging.getLogger("functional.explorer")

pytestmark = pytest.mark.integration

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


def _missing_browser_reason(chromium: str | None, driver: str | None) -> str:
    """The line scripts/ensure-system-deps.sh prints when it cannot install the packages."""
    missing = [n for n, p in (("chromium", chromium), ("chromium-driver", driver)) if not p]
    return (
        f"missing Debian packages: {' '.join(missing)}; install with "
        "'sudo apt-get install chromium chromium-driver' (make test does this as root)"
    )


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        reason = _missing_browser_reason(chromium, driver)
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield drv
    finally:
        drv.quit()


def _console_errors(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = browser.get_log("browser")  # type: ignore[no-untyped-call]
    return [e for e in entries if e["level"] == "SEVERE"]


def _text(browser: WebDriver, css: str) -> str:
    try:
        return str(browser.find_element(By.CSS_SELECTOR, css).text)
    except (WebDriverException, StaleElementReferenceException):
        return ""


def _drawn(browser: WebDriver, block_hash: str) -> bool:
    return bool(browser.find_elements(By.CSS_SELECTOR, f'#dag circle[data-hash="{block_hash}"]'))


def _lookup(browser: WebDriver, query: str) -> None:
    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys(query)
    browser.find_element(By.CSS_SELECTOR, "#lookup button").click()


def _field(browser: WebDriver, name: str) -> str:
    return _text(browser, f'#result tr[data-field="{name}"] td:last-child')


def _is_milestone(factory: BlockFactory, block_id: bytes) -> bool:
    meta = factory.chain.get_meta(block_id)
    return meta is not None and meta.is_milestone


def _submit_all(node: NodeProcess, blocks: list[Any]) -> None:
    for block in blocks:
        assert node.submit_block(block).status in ("accepted", "duplicate")


def test_explorer_shows_the_live_dag_and_looks_up_blocks_and_transactions(
    network: TestNetwork, browser: webdriver.Chrome
) -> None:
    node = network.add_node()
    factory = BlockFactory(miners=3)
    log.info("Mine 16 blocks on three peer chains before the page loads")
    _submit_all(node, factory.mine(16))

    log.info("The page loads, its events WebSocket goes live and the DAG shows every block")
    browser.get(node.url + "/")
    wait_until(lambda: _text(browser, "#live") == "live", 20, "the events WebSocket (badge live)")
    wait_until(
        lambda: all(_drawn(browser, b.id.hex()) for b in factory.blocks[-10:]),
        20,
        "the 10 newest blocks in the DAG view",
    )
    assert _text(browser, "#network") == "devnet"
    lanes = browser.find_elements(By.CSS_SELECTOR, "#dag .lane-label")
    assert len(lanes) >= 3, "a lane per peer chain"

    log.info("Blocks mined while the page is open appear through /v1/events")
    fresh = factory.mine(6)
    _submit_all(node, fresh)
    for block in fresh:
        wait_until(
            functools.partial(_drawn, browser, block.id.hex()), 20, f"block {block.id.hex()}"
        )
    milestone = next(b for b in reversed(factory.blocks) if _is_milestone(factory, b.id))
    css = f'#dag circle.ms[data-hash="{milestone.id.hex()}"]'
    assert browser.find_elements(By.CSS_SELECTOR, css), "milestones are highlighted"
    assert browser.find_elements(By.CSS_SELECTOR, "#dag rect[data-level-set]"), "level sets shaded"
    wait_until(
        lambda: (
            _text(browser, "#milestones tbody tr td:first-child") == str(factory.chain.best_height)
        ),
        20,
        "the milestone list to show the best milestone",
    )

    log.info("A block lookup shows the block's fields")
    block = fresh[-1]
    _lookup(browser, block.id.hex())
    wait_until(lambda: _field(browser, "hash") == block.id.hex(), 10, "the block in the result")
    h = block.header
    assert _field(browser, "previous_link") == h.previous_link.hex()
    assert _field(browser, "tip_links").split() == [t.hex() for t in block.tip_links]
    assert _field(browser, "tips_root") == h.tips_root.hex()
    assert _field(browser, "milestone_link") == h.milestone_link.hex()
    assert _field(browser, "merkle_root") == h.merkle_root.hex()
    assert _field(browser, "nonce") == str(h.nonce)
    assert _field(browser, "timestamp_ms").startswith(str(h.timestamp_ms))
    meta = factory.chain.get_meta(block.id)
    assert meta is not None
    assert _field(browser, "is_milestone") == ("yes" if meta.is_milestone else "no")

    log.info("A transaction lookup shows its status: in the mempool, then confirmed")
    payment = transfer(  # S5 (devnet c = 1/16): assigned to the block the factory mines next
        [(factory.chain.genesis_id, 7)],
        [(10**13, key(77)[1])],
        DEVNET,
        assigned_to=[factory.next_previous()],
    )
    assert node.request("POST", "/v1/txs", {"raw": payment.raw.hex()}) == {
        "txid": payment.txid.hex()
    }
    _lookup(browser, payment.txid.hex())
    wait_until(lambda: _field(browser, "status") == "mempool", 10, "tx status mempool")
    carrier = factory.mine(1, txs=[payment]) + factory.mine_milestones(2)
    _submit_all(node, carrier)
    assert factory.tx_status(payment.txid) == "valid"
    wait_until(
        lambda: node.request("GET", f"/v1/txs/{payment.txid.hex()}")["status"] == "confirmed",
        20,
        "the node to confirm the payment",
    )
    _lookup(browser, payment.txid.hex())
    wait_until(lambda: _field(browser, "status") == "confirmed", 10, "tx status confirmed")
    assert _field(browser, "block") == carrier[0].id.hex()

    log.info("An unknown hash is a clean miss; the console stayed free of errors throughout")
    _lookup(browser, "ab" * 32)
    wait_until(lambda: _text(browser, "#result-title") == "Not found", 10, "the miss")
    assert _console_errors(browser) == []
