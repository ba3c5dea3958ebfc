"""Debian's headless Chromium for the page's tests, driven by Playwright's sync API.

    with headless_chromium() as browser:        # skips the test where either is missing
        page = browser.new_page()

Playwright never downloads a browser here: .ci/run installs Debian's chromium.
"""

import contextlib
import os

import pytest

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags, Chromium's calls home are refused by a closed
# network, many at a time.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


@contextlib.contextmanager
def headless_chromium():
    """A launched Chromium `Browser`, closed on exit; the test is skipped without Playwright
    or without Debian's chromium."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
