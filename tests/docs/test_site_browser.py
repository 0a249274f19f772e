"""The built site in a real browser (Debian's Chromium, headless, driven over its debugging pipe): the home page
renders with its navigation, a nav link leads to its page, and the search box finds a config key in the
configuration reference. The site is served over HTTP (the search index is fetched by a web worker)."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest

from tests.docs.cdp import Browser

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # ~10 s: one Chromium start, the site build
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (make install-browser)",
    ),
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(built_site: Path):
    handler = functools.partial(_Quiet, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser(tmp_path: Path):
    b = Browser(CHROMIUM, tmp_path / "profile")
    yield b
    b.close()


def test_navigation_and_search(served: str, browser: Browser):
    browser.open(f"{served}/index.html")
    assert browser.js("document.querySelector('h1').textContent").startswith("foundry-stack")
    nav = browser.js(
        "[...document.querySelectorAll('nav.md-nav--primary a.md-nav__link')].map(a => a.textContent.trim())"
    )
    for title in ("Getting started", "Training", "Configuration", "Command line", "Benchmarks"):
        assert title in nav, nav

    # follow the nav link to Getting started
    browser.js(
        "[...document.querySelectorAll('nav.md-nav--primary a.md-nav__link')]"
        ".find(a => a.textContent.trim() === 'Getting started').click()"
    )
    browser.wait_for(
        "location.pathname.endsWith('/getting-started.html') && document.readyState === 'complete'"
    )
    assert browser.wait_for(
        "document.querySelector('h1') && document.querySelector('h1').textContent"
    ).startswith("Getting started")

    # search for a config key: the results list the configuration reference
    browser.js("document.querySelector('.md-search__input').focus()")
    browser.type("max_duration")
    results = browser.wait_for(
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.getAttribute('href'))"
        ".filter(h => h.includes('reference/config.html')).length > 0 && "
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.getAttribute('href'))"
    )
    assert any("reference/config.html" in href for href in results), results
