"""The Dagster UI in a real browser: `contact_backfill_job`'s launchpad with a person's name runs
that person's batch.

Runs only where Chromium, chromedriver and selenium are installed (Debian: `apt-get install
chromium chromium-driver`, `pip install selenium`); skipped otherwise. It starts `brb ui` (dagster
dev) on a home ingested with the hash embedder, types the config into the launchpad's editor,
clicks Launch Run and waits for the run and for brb.db to record which batches it processed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline_tests.helpers.browser import HAVE_BROWSER, brb_ui, chrome, graphql, skip_community_dialog
from brb_pipeline_tests.helpers.cli import ENV as CLI_ENV

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_BROWSER, reason="needs chromium, chromedriver and selenium")]
ENV = {k: v for k, v in CLI_ENV.items() if k != "BRB_FAULT"}


def _last_success(db: Path) -> dict | None:
    from brb_pipeline.core import metadata

    row = metadata.last_run(db, status="success")  # brb.db may be encrypted: read it as brb does
    return {"run_id": row["run_id"], **json.loads(row["stats_json"] or "{}")} if row else None


def _finder_url(log: Path) -> str:
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if "find a person's partitions by name: " in line:
            return line.split("by name: ", 1)[1].strip()
    raise AssertionError("brb ui printed no person finder URL")


def _finder_flow(driver, port: int, url: str, name: str, wanted: list[str], home: Path) -> None:
    """The person finder: type the name, see the person's partitions, open one in Dagster, re-run
    them; the run Dagster records holds the partition keys and not the name, and its child runs
    name it as their parent."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    before = _last_success(home / "brb.db")["run_id"]
    driver.get(url)
    driver.find_element(By.ID, "q").send_keys(name.split()[0])
    row = WebDriverWait(driver, 30).until(lambda d: next(
        (p for p in d.find_elements(By.CSS_SELECTOR, "#out .p") if p.find_element(By.CSS_SELECTOR, ".n").text == name),
        None))
    parts = row.find_elements(By.CSS_SELECTOR, "a.part")
    assert [a.text for a in parts] == wanted
    href = parts[0].get_attribute("href")
    assert href.startswith(f"http://127.0.0.1:{port}/assets/batch_chunks?")
    row.find_element(By.CSS_SELECTOR, "button.rerun").click()
    run_id = WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "run") and d.find_element(By.ID, "run").text)
    driver.save_screenshot(str(home.parent / "finder.png"))
    deadline = time.time() + 300
    while time.time() < deadline and (_last_success(home / "brb.db") or {}).get("run_id") == before:
        time.sleep(2)
    after = _last_success(home / "brb.db")
    assert after["run_id"] != before and sorted(after["batches_processed"]) == wanted
    run = graphql(port, f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status runConfigYaml tags {{ key value }} }} }} }}')
    run = run["runOrError"]
    assert "partitions" in run["runConfigYaml"] and name not in run["runConfigYaml"]
    assert {"key": "brb/source", "value": "ui"} in run["tags"]
    children = graphql(port, '{ runsOrError(filter: {tags: [{key: "brb/parent_run", value: "%s"}]}) '
                              '{ ... on Runs { results { jobName } } } }' % run_id)["runsOrError"]["results"]
    assert {c["jobName"] for c in children} >= {"ingest_job", "batch_job"}
    driver.get(href)  # the partition link opens that partition of the per-batch asset in Dagster
    WebDriverWait(driver, 60).until(lambda d: wanted[0] in d.execute_script("return document.body.innerText"))


@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
def test_launchpad_with_a_name_runs_that_persons_batch(tmp_path, monkeypatch, encrypted):
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from brb_pipeline.core import metadata
    from brb_pipeline.keys import provider as keys

    archive = build_demo_archive(tmp_path / "archive", messages=600, seed=7)
    home = tmp_path / "home"
    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    env = {**ENV, "BRB_ENCRYPTION": "1" if encrypted else "0", "BRB_KEY_DIR": str(tmp_path / "keys")}
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "ingest", "--chat-db", str(archive.chat_db),
                        "--addressbook", str(archive.addressbook_dir), "--progress", "none", "--no-insights",
                        "--home", str(home)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert bool((keys.read_marker(home) or {}).get("encrypted")) is encrypted
    contacts = metadata.read_contacts(home / "brb.db")
    batches = set(contacts["batch"].drop_nulls())
    named = contacts.filter((contacts["name_source"] == "addressbook") & (contacts["kind"] == "direct")
                            & contacts["batch"].is_not_null()).sort("rank", descending=True)
    # a person's backfill runs every conversation they take part in (1:1 and groups): its batches;
    # the first named person whose conversations leave some batch out
    from brb_pipeline.core.contacts.people_db import person_contact_ids

    def batches_of(who: str) -> list[str]:
        theirs = sorted(person_contact_ids(home / "brb.db", [who]))
        return sorted(set(contacts.filter(contacts["contact_id"].is_in(theirs))["batch"].drop_nulls()))

    name, wanted = next(((n, b) for n in named["display_name"] if 0 < len(b := batches_of(n)) < len(batches)),
                        (None, []))
    assert name, "the person's batches must be some of several, else the test proves nothing"
    before = _last_success(home / "brb.db")["run_id"]

    ui_log = tmp_path / "ui.log"  # brb ui's own lines: the person finder's URL
    with brb_ui(home, env, ui_log) as port, chrome() as driver:
        driver.get(f"http://127.0.0.1:{port}/locations/brb_pipeline/jobs/contact_backfill_job/playground")
        wait = WebDriverWait(driver, 120)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".CodeMirror")))
        config = f'ops:\n  backfill_contact_op:\n    config:\n      contact: "{name}"\n      insights: false\n'
        driver.execute_script("document.querySelector('.CodeMirror').CodeMirror.setValue(arguments[0]);", config)
        # a first visit may open Dagster's "Join the community" dialog over the page
        skip_community_dialog(driver)
        WebDriverWait(driver, 20).until_not(ec.presence_of_element_located((By.CSS_SELECTOR, ".dagster-backdrop")))
        driver.save_screenshot(str(tmp_path / "launchpad.png"))
        for attempt in range(4):  # the dialog can also open a moment later, over the button
            launch = wait.until(ec.element_to_be_clickable(
                (By.XPATH, "//button[contains(translate(., 'LAUNCHRUN', 'launchrun'), 'launch run')]")))
            try:
                launch.click()
                break
            except ElementClickInterceptedException:
                skip_community_dialog(driver)
                time.sleep(1)
        else:
            raise AssertionError("Launch Run stayed covered by a dialog")
        deadline = time.time() + 300
        after = None
        while time.time() < deadline:
            after = _last_success(home / "brb.db")
            if after and after["run_id"] != before:
                break
            time.sleep(2)
        driver.save_screenshot(str(tmp_path / "after_launch.png"))
        assert after and after["run_id"] != before, "the launched run never finished an ingestion"
        assert sorted(after["batches_processed"]) == wanted  # that person's batches, and only them
        # its child runs: named by what they do, tagged with the UI and their parent, in the
        # code location, so the Overview timeline lists them (and no ephemeral job)
        children = graphql(port, '{ runsOrError(filter: {tags: [{key: "brb/source", value: "ui"}]}) '
                                  '{ ... on Runs { results { jobName runId repositoryOrigin { repositoryLocationName } '
                                  'tags { key value } } } } }')["runsOrError"]["results"]
        parent = {r["runId"] for r in graphql(port, '{ runsOrError(filter: {pipelineName: "contact_backfill_job"}) '
                                                     '{ ... on Runs { results { runId } } } }')["runsOrError"]["results"]}
        assert {c["jobName"] for c in children} == {"ingest_job", "batch_job", "store_job"}
        assert all({"key": "brb/parent_run", "value": next(iter(parent))} in c["tags"] for c in children)
        assert {c["repositoryOrigin"]["repositoryLocationName"] for c in children} == {"brb_pipeline"}
        driver.get(f"http://127.0.0.1:{port}/overview/timeline")
        WebDriverWait(driver, 60).until(lambda d: "batch_job" in d.execute_script("return document.body.innerText"))
        assert "__ephemeral" not in driver.execute_script("return document.body.innerText")
        _finder_flow(driver, port, _finder_url(ui_log), name, wanted, home)
