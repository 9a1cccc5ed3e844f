"""Weir's web dashboard in a real headless Chromium (Debian's chromium and
chromium-driver), driven over WebDriver by Selenium (PyPI, in the test venv).

Arguments: the dashboard's URL, the server's SQL port, the job whose graph shows a
back-pressured operator, a view fed by table `t`, and the folder for screenshots.

Visits the overview, the job graph and the checkpoint history; inserts rows into
`t` through psycopg and waits for the view's page to show them; prints one JSON
line with what the pages showed and every console message of level SEVERE, for the
Rust test to compare with the `weir_catalog` tables.
"""

import json
import os
import sys
import time

os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver

import psycopg
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

url, pg_port, busy_job, view, shots = sys.argv[1:6]
TIMEOUT = 60


def browser():
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu",
              "--disable-dev-shm-usage", "--window-size=1400,1000"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait(what, check, show=None):
    """Polls `check` until it gives a true value; on timeout, says what `show` (or
    `check`) last gave."""
    deadline = time.time() + TIMEOUT
    last = None
    while True:
        try:
            v = check()
            last = show() if show else v
        except Exception as e:  # the page is re-rendering: try again
            v, last = None, repr(e)
        if v:
            return v
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}; last seen: {last}")
        time.sleep(0.2)


def table(driver, test):
    """A table's body cells as text, row by row: read in one script, so a refresh
    cannot change the table halfway."""
    return driver.execute_script(
        "return [...document.querySelectorAll(`table[data-test='${arguments[0]}'] tbody tr`)]"
        ".map(r => [...r.querySelectorAll('td')].map(td => td.innerText.trim()));", test)


def visit(driver, route):
    """Opens `route` (`#/...`) and waits until the page shows it: a hash change
    leaves the previous page's content up until the new one is rendered."""
    driver.get(url + "/" + route)
    wait(f"the page {route}",
         lambda: driver.find_element(By.ID, "main").get_attribute("data-route") == route)


def renders(driver):
    return int(driver.find_element(By.ID, "main").get_attribute("data-renders") or 0)


def main():
    driver = browser()
    out = {}
    try:
        # Overview: the jobs created through SQL.
        visit(driver, "#/")
        jobs = wait("jobs", lambda: [r for r in table(driver, "jobs") if len(r) > 1])
        out["overview_jobs"] = [r[:5] for r in jobs]
        driver.save_screenshot(os.path.join(shots, "overview.png"))

        # The job graph with a back-pressured fragment.
        visit(driver, "#/job/" + busy_job)
        wait("a back-pressured fragment", lambda: driver.find_elements(
            By.CSS_SELECTOR, "g[data-fragment][data-backpressure='HIGH'], "
                             "g[data-fragment][data-backpressure='LOW']"))
        out["graph_fragments"] = wait("the fragments", lambda: len(
            driver.find_elements(By.CSS_SELECTOR, "g[data-fragment]")))
        out["graph_relations"] = wait("the relations", lambda: [
            g.get_attribute("data-relation")
            for g in driver.find_elements(By.CSS_SELECTOR, "g[data-relation]")])
        driver.save_screenshot(os.path.join(shots, "job-graph.png"))

        # The page updates by itself once more rows arrive.
        visit(driver, "#/job/" + view)
        first = lambda: int(table(driver, "operators")[0][4].replace(",", ""))
        before = wait("the view's operators", first)
        with psycopg.connect(f"host=127.0.0.1 port={pg_port} user=weir dbname=weir",
                             autocommit=True) as conn:
            # The slow view's failpoint off first: while it is back-pressured, the
            # generator feeding it holds the write lock the INSERT needs.
            conn.execute("SET failpoint.operator.slow.slow = 'off'")
            t0 = time.time()
            conn.execute("INSERT INTO t SELECT x, x FROM generate_series(1, 500) AS s(x)")
            inserted_in = time.time() - t0
        after = wait(f"the new rows on the page (before: {before}, the INSERT took "
                     f"{inserted_in:.1f} s)", lambda: first() >= before + 500 and first(),
                     show=lambda: table(driver, "operators"))
        out["records_in"] = [before, after]

        # The checkpoint history with its charts.
        visit(driver, "#/checkpoints")
        wait("three checkpoints", lambda: len(table(driver, "checkpoints")) >= 3)
        r0 = renders(driver)
        wait("a refresh", lambda: renders(driver) > r0)
        out["checkpoints"] = [r[:3] for r in table(driver, "checkpoints")]
        out["chart_points"] = wait("the duration chart", lambda: int(driver.find_element(
            By.CSS_SELECTOR, "svg[data-test='chart-duration']").get_attribute("data-points")))
        driver.save_screenshot(os.path.join(shots, "checkpoints.png"))

        # Every other page loads.
        for page in ["savepoints", "sources", "progress", "settings"]:
            visit(driver, "#/" + page)
            wait(page, lambda: driver.find_elements(By.CSS_SELECTOR, "main table"))
        out["settings_rows"] = len(table(driver, "settings"))

        out["console_errors"] = [e["message"] for e in driver.get_log("browser")
                                 if e["level"] == "SEVERE"]
    finally:
        driver.quit()
    print(json.dumps(out))


main()
