"""Before/after screenshots of the 2-D map (docs/map/): the same demo data in the page of a2c41ce
(`git show a2c41ce:brb_pipeline/core/insights/map_page.py > /tmp/i34-old_map_page.py`) and in
today's page, plus the person + months filter. Expects a demo home at /tmp/i34-demo."""
import sys, time, importlib.util
from pathlib import Path
sys.path.insert(0, "benchmarks")
from bench_map import browser
new = Path("/tmp/i34-demo/insights/map.html").read_text()
payload = new.split('<script id="data" type="application/json">')[1].split("</script>")[0]
spec = importlib.util.spec_from_file_location("old_page", "/tmp/i34-old_map_page.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
title = "Conversation map"
oldhtml = old._PAGE.replace("__TITLE__", title).replace("__DATA__", payload)
tmp = Path("/tmp/i34-shots"); tmp.mkdir(exist_ok=True)
(tmp / "before.html").write_text(oldhtml); from brb_pipeline.core.insights import map_page
(tmp / "after.html").write_text(map_page._PAGE.replace("__TITLE__", title).replace("__DATA__", payload))
d = browser()
try:
    for name in ("before", "after"):
        d.get((tmp / f"{name}.html").as_uri()); time.sleep(0.8)
        d.save_screenshot(str(tmp / f"{name}.png"))
    # the explorer's two clicks: a person, then a stretch of months
    from selenium.webdriver.support.ui import Select
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.action_chains import ActionChains
    sel = Select(d.find_element(By.ID, "who")); sel.select_by_index(1)
    h = d.find_element(By.ID, "hist"); w = h.size["width"]
    ActionChains(d).move_to_element_with_offset(h, int(-w * 0.25), 0).click_and_hold().move_by_offset(int(w * 0.3), 0).release().perform()
    time.sleep(0.5); d.save_screenshot(str(tmp / "after_person_time.png"))
finally:
    d.quit()
