"""The Dagster UI in a real browser shows why an asset will or will not run.

A copy of an ingested home, ``brb ui`` (the webserver and the daemon, as a user starts them),
and a user who turns automation on where the docs say (Automation -> the ``brb_automation``
switch). The daemon then evaluates every asset's automation condition on its own ticks, 30 s
apart. Its first tick requests nothing (a first evaluation is Dagster's baseline: nothing is new
since it, and the every-minute observation of the sources waits for a minute to pass). The sources
are then observed, as that observation does: the first version seen is new, so the next tick
requests the ingestion. Each asset's Automation tab lists both ticks; the evaluation of the
second shows ``source_snapshot`` requested (its condition and the sub-conditions that were true)
and ``chunk_store`` not requested (nothing it depends on changed).
``docs/dagster/automation_evaluation.png`` is its screenshot of ``source_snapshot``'s evaluation.
"""

from __future__ import annotations

import time

import pytest

from brb_pipeline_tests.helpers.browser import HAVE_BROWSER, brb_ui, chrome, graphql, page_text, poll
from brb_pipeline_tests.helpers.cli import ENV

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_BROWSER, reason="needs chromium, chromedriver and selenium")]

SENSOR = ('sensorOrError(sensorSelector: {repositoryLocationName: "brb_pipeline", repositoryName: "__repository__", '
          'sensorName: "brb_automation"}) { ... on Sensor { sensorState { status } } }')
EVALUATIONS = ('assetConditionEvaluationRecordsOrError(assetKey: {path: ["%s"]}, limit: 20) '
               '{ ... on AssetConditionEvaluationRecords { records { evaluationId numRequested } } }')

#: What ``source_snapshot``'s evaluation at the tick after the observation says, row by row.
WILL_RUN = {
    "sources changed, or the schedule": "True",  # brb's label on its condition: requested
    "eager": "True",
    "(newly_missing) OR (any_deps_updated) SINCE handled": "True",  # the sources' new version
    "NOT any_deps_missing": "True",
    "NOT any_deps_in_progress": "True",
    "schedule_cron 0 3 * * *": "False",  # not the nightly tick
}
#: ``chunk_store`` at the same tick: nothing it depends on was updated, so not requested.
WILL_NOT_RUN = {
    "eager": "False",
    "(newly_missing) OR (any_deps_updated) SINCE handled": "False",
    "set: never (newly_missing) OR (any_deps_updated)": "False",
    "NOT any_deps_missing": "Skipped",  # the AND stopped at the first false part
}


def _sensor_status(port: int) -> str:
    return graphql(port, "{ %s }" % SENSOR)["sensorOrError"]["sensorState"]["status"]


def _evaluations(port: int, asset: str) -> list[dict]:
    """The asset's recorded evaluations, newest first (what its Automation tab lists)."""
    return graphql(port, "{ %s }" % (EVALUATIONS % asset))["assetConditionEvaluationRecordsOrError"]["records"]


def _turn_automation_on(driver, port: int) -> None:
    """Automation -> the switch on ``brb_automation``'s row, as docs/dagster.md tells a user. A
    click before the page has wired the switch does nothing: click again while the sensor is off."""
    from selenium.webdriver.common.by import By

    driver.get(f"http://127.0.0.1:{port}/automation")
    switch = "label[contains(@class, 'formatSwitch')]"

    def enabled_switch():  # in the innermost element holding the name and a switch: its row
        rows = driver.find_elements(By.XPATH, f"//*[.//*[normalize-space(text())='brb_automation'] and .//{switch}]")
        label = rows and rows[-1].find_element(By.XPATH, f".//{switch}")
        return label and label.find_element(By.TAG_NAME, "input").is_enabled() and label

    for _ in range(3):
        poll(enabled_switch, 60, "the Automation page lists brb_automation with its switch").click()
        deadline = time.time() + 10
        while time.time() < deadline and _sensor_status(port) != "RUNNING":
            time.sleep(0.5)
        if _sensor_status(port) == "RUNNING":
            return
    raise AssertionError("three clicks on the brb_automation switch did not start it")


def _open_evaluation(driver, port: int, asset: str, evaluation_id: str) -> tuple[str, dict[str, str]]:
    """Open ``asset``'s Automation tab and, in it, the evaluation of tick ``evaluation_id``;
    returns (its result as the tab shows it, its condition tree, :func:`_condition_tree`)."""
    from selenium.webdriver.common.by import By

    def row():  # the tab lists the records newest first, one row each; retried if a tick lands between
        driver.get(f"http://127.0.0.1:{port}/assets/{asset}?view=automation")
        poll(lambda: driver.find_elements(By.CSS_SELECTOR, "tbody tr button"), 60, f"{asset}'s tab lists ticks")
        ids = [r["evaluationId"] for r in _evaluations(port, asset)]
        rows = driver.find_elements(By.CSS_SELECTOR, "tbody tr")
        return len(rows) == len(ids) and rows[ids.index(evaluation_id)]

    found = poll(row, 120, f"{asset}'s tab lists the ticks the instance holds")
    result = found.find_elements(By.TAG_NAME, "td")[1].text.strip()
    stamp = found.find_element(By.CSS_SELECTOR, "button [title]").get_attribute("title")
    found.find_element(By.TAG_NAME, "button").click()
    header = f"{asset}\n@\n{stamp}\n"  # the dialog's title, "source_snapshot @ <time>"
    poll(lambda: header in (t := page_text(driver)) and "Condition" in t.split(header)[-1], 30,
         f"{asset}'s evaluation at {stamp} opens")
    return result, _condition_tree(driver)


def _condition_tree(driver) -> dict[str, str]:
    """The open evaluation's condition tree (the page's last table): each row's condition, its
    words joined by one space ("NOT any_deps_missing"), -> its Result ("True"/"False"); the first
    row of each condition wins."""
    rows = driver.execute_script(
        "const t = [...document.querySelectorAll('table')].pop();"
        "return [...t.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.innerText));")
    tree: dict[str, str] = {}
    for cells in rows:
        if len(cells) >= 2:
            tree.setdefault(" ".join(cells[0].split()), cells[1].strip())
    return tree


def test_the_automation_tab_shows_why_an_asset_will_or_will_not_run(tmp_path, template_homes, monkeypatch):
    home, _ = template_homes.copy("imessage-700", tmp_path / "home")
    monkeypatch.setenv("BRB_HOME", str(home))  # the observation below reads the home's sources
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    with brb_ui(home, {**ENV, "BRB_ENCRYPTION": "0"}, tmp_path / "ui.log") as port, chrome() as driver:
        try:
            _two_ticks_in_the_ui(driver, port, home, tmp_path)
        except Exception:
            driver.save_screenshot(str(tmp_path / "failed.png"))
            raise


def _two_ticks_in_the_ui(driver, port: int, home, tmp_path) -> None:
    from dagster._core.definitions.observe import observe

    from brb_pipeline.config.settings import Settings
    from brb_pipeline.orchestration.assets.ingest import message_sources
    from brb_pipeline.orchestration.instance import instance_for

    assert _sensor_status(port) == "STOPPED" and _evaluations(port, "source_snapshot") == []  # off by default
    _turn_automation_on(driver, port)
    first = poll(lambda: _evaluations(port, "source_snapshot"), 60, "the daemon's first tick")
    assert [r["numRequested"] for r in first] == [0]  # up to date, no version of the sources seen yet
    assert observe([message_sources], instance=instance_for(Settings.load(home))).success
    second = poll(lambda: [r for r in _evaluations(port, "source_snapshot") if r["numRequested"]], 90,
                  "a tick after the observation requests the snapshot", every=2)
    tick = second[-1]["evaluationId"]
    # the asset that will run: its tab lists this tick, requested, and the first, not requested
    result, tree = _open_evaluation(driver, port, "source_snapshot", tick)
    assert result == "Requested" and "Not requested" in page_text(driver)
    driver.save_screenshot(str(tmp_path / "automation_evaluation.png"))
    assert {k: tree.get(k) for k in WILL_RUN} == WILL_RUN, tree
    # the asset that will not run, at the same tick: nothing it depends on was updated
    result, tree = _open_evaluation(driver, port, "chunk_store", tick)
    assert result == "Not requested"
    assert {k: tree.get(k) for k in WILL_NOT_RUN} == WILL_NOT_RUN, tree
