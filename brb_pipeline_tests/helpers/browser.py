"""The Dagster UI from a test: ``brb ui`` on a test home, headless Chromium, Dagster's GraphQL.

:data:`HAVE_BROWSER` says whether Chromium, chromedriver and selenium are installed (Debian:
``apt-get install chromium chromium-driver``, ``pip install selenium``); browser tests skip
without them. :func:`brb_ui` starts ``brb ui`` (the webserver and the daemon) in its own process
group and stops the whole group, the runs it launched included; :func:`chrome` is a headless
Chromium driven through the installed chromedriver (no driver download).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HAVE_BROWSER = bool(shutil.which("chromium") and shutil.which("chromedriver") and importlib.util.find_spec("selenium"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{url} did not answer within {seconds} s")


def graphql(port: int, query: str) -> dict:
    """``query`` against the webserver on ``port``; its ``data``."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


def poll(probe: Callable[[], Any], seconds: float, what: str, every: float = 1.0) -> Any:
    """``probe()``'s first truthy value, tried every ``every`` s for up to ``seconds``."""
    deadline = time.time() + seconds
    while True:
        value = probe()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(every)


def _locations_loaded(port: int) -> bool:
    entries = graphql(port, "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
                            "locationOrLoadError { __typename } } } } }")["workspaceOrError"]["locationEntries"]
    if any(e["locationOrLoadError"] and e["locationOrLoadError"]["__typename"] == "PythonError" for e in entries):
        raise AssertionError("the code location failed to load")
    return bool(entries) and all(e["loadStatus"] == "LOADED" and e["locationOrLoadError"] for e in entries)


@contextmanager
def brb_ui(home: Path, env: Mapping[str, str], log: Path, *, start_s: float = 180) -> Iterator[int]:
    """``brb ui --home HOME`` on a free port (its stderr in ``log``); yields the port once the
    webserver answers and has loaded the code location. Dagster's "Join the Dagster community"
    dialog is marked seen (the file ``<home>/dagster/.nux/nux.yaml``), so it opens over no page.
    On exit the process group is stopped (SIGTERM, then SIGKILL)."""
    port = free_port()
    with open(log, "wb") as out:
        ui = subprocess.Popen([sys.executable, "-m", "brb_pipeline.cli", "ui", "--home", str(home), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=out, env=dict(env), start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/server_info", start_s)
        poll(lambda: _locations_loaded(port), start_s, "the code location loads")  # it answers before
        graphql(port, "mutation { setNuxSeen }")  # what the dialog's Skip does: no dialog over the pages
        yield port
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()


@contextmanager
def chrome(window: str = "1400,1000") -> Iterator[Any]:
    """A headless Chromium (selenium ``WebDriver``), quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={window}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def skip_community_dialog(driver) -> None:
    """Close Dagster's "Join the Dagster community" dialog where a page shows it anyway."""
    from selenium.webdriver.common.by import By

    for skip in driver.find_elements(By.XPATH, "//button[normalize-space(.)='Skip']"):
        skip.click()


def page_text(driver) -> str:
    return driver.execute_script("return document.body.innerText")
