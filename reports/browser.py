"""Headless Chromium through Selenium and the system chromedriver: how the tests and the benchmark open
report.html the way a reader's browser does (nothing here is needed to render a report)."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path

from . import ReportError

CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1400, height: int = 1000, javascript: bool = True):
    """A headless Chromium session that logs every network request the page makes."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise ReportError("selenium is not installed; `make setup` installs the test extras") from None
    driver_path = shutil.which("chromedriver") or CHROMEDRIVER
    binary = shutil.which("chromium")
    if not binary or not Path(driver_path).exists():
        raise ReportError("chromium and chromedriver are not installed; apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}", "--allow-file-access-from-files"):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def requests_made(driver) -> list[str]:
    """URLs of every request the browser sent since the last call (from the DevTools performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
