#!/usr/bin/env python3
"""Drives the live view of a running agent in headless Chromium (Selenium) and checks it.

Run by tests/tests/e2e/ui.rs, which starts the agent, feeds it the demo's incident and passes:

    check_page.py URL HOT_SHARD XSS_NAME SCREENSHOT ALERT [ALERT ...]

Checks, in order: the page names HOT_SHARD as the busiest shard; the heatmap's brightest row
(by the levels it drew, and by the pixels on the canvas) is HOT_SHARD; the empty key is listed
as "(empty)"; every ALERT is listed; the what-if curve of hit ratio against TTL is drawn with
the cache as configured ringed; the shard XSS_NAME is shown as exactly those characters
and no <img> element exists; every resource the page loaded came from URL's origin; the
browser logged no error. It then saves a 1280x800 screenshot to SCREENSHOT, prints
"READY-TO-STOP", waits for a line on stdin (the test stops the agent then) and checks that the
page shows that the agent stopped answering. Exit code 0 when everything holds; the first
failed check is printed and exits 1.
"""
import json
import struct
import sys
import time
from urllib.parse import urlsplit

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def fail(msg):
    print(f"FAILED: {msg}", flush=True)
    sys.exit(1)


def wait_until(driver, what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # the page may be mid-render; try again until the deadline
            last = e
        time.sleep(0.2)
    fail(f"{what} within {timeout} s (last: {last!r})")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,800", "--hide-scrollbars", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    # The viewport itself at 1280x800, whatever the window decorations take.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    return driver


def check_heatmap(driver, hot):
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap-rows li')].map(li => li.textContent)")
    canvas = driver.find_element("id", "heatmap")
    matrix = json.loads(canvas.get_attribute("data-matrix"))
    geo = json.loads(canvas.get_attribute("data-geometry"))
    if len(matrix) != len(rows) or not rows:
        fail(f"heatmap has {len(matrix)} drawn rows for {len(rows)} labels")
    # Brightest row by what was drawn: the highest level in the newest column.
    latest = [r[-1] if r and r[-1] is not None else -1 for r in matrix]
    brightest = rows[latest.index(max(latest))]
    if brightest != hot:
        fail(f"brightest drawn row is {brightest!r}, not {hot!r}; levels {latest}")
    # And by the pixels: mean luminance of each row's newest cell on the canvas.
    lum = driver.execute_script(
        """const [c, g] = arguments;
        const ctx = c.getContext('2d');
        const x = Math.floor(c.width - g.cellW / 2);
        const out = [];
        for (let r = 0; r * g.rowPx < c.height; r++) {
          const p = ctx.getImageData(x, r * g.rowPx + Math.floor(g.rowPx / 2), 1, 1).data;
          out.push(0.2126 * p[0] + 0.7152 * p[1] + 0.0722 * p[2]);
        }
        return out;""", canvas, geo)
    by_pixels = rows[lum.index(max(lum))]
    if by_pixels != hot:
        fail(f"brightest row on the canvas is {by_pixels!r}, not {hot!r}; luminance {lum}")
    print(f"ok: heatmap brightest row {hot} (level {max(latest):.3f}, luminance {max(lum):.0f}, "
          f"next {sorted(lum)[-2] if len(lum) > 1 else 0:.0f})", flush=True)


def check_whatif(driver):
    """The what-if section is shown, its canvas draws a curve of at least two TTLs with the
    cache as configured among them, every point inside the canvas, and the ring around the
    observed point is painted."""
    def points():
        if driver.find_element("id", "whatif-section").get_attribute("hidden") is not None:
            return None
        pts = json.loads(driver.find_element("id", "whatif").get_attribute("data-points") or "[]")
        return pts if any(p["observed"] for p in pts) else None
    pts = wait_until(driver, "the what-if curve with the cache as configured marked", points)
    curve = [p for p in pts if p["on_curve"]]
    if len({p["ttl_secs"] for p in curve}) < 2:
        fail(f"the what-if curve has fewer than two TTLs: {pts}")
    xs = [p["x"] for p in curve]
    if xs != sorted(xs):
        fail(f"the curve's points are not in TTL order: {curve}")
    canvas = driver.find_element("id", "whatif")
    width, height = int(canvas.get_attribute("width")), int(canvas.get_attribute("height"))
    for p in pts:
        if not (0 <= p["x"] <= width and 0 <= p["y"] <= height):
            fail(f"point {p} lies outside the {width}x{height} canvas")
    obs = next(p for p in curve if p["observed"])
    # The observed ring: radius 7 around the point, in the --hot colour (orange).
    ring = driver.execute_script(
        """const [c, x, y] = arguments;
        return Array.from(c.getContext('2d').getImageData(x + 7, y, 1, 1).data);""",
        canvas, obs["x"], obs["y"])
    if not (ring[0] > 150 and ring[2] < 120):
        fail(f"no orange ring around the observed point {obs}: pixel {ring}")
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#whatif-table td.observed')].map(e => e.textContent)")
    if not rows or not rows[0].startswith("as configured"):
        fail(f"the what-if table marks no row as configured: {rows}")
    print(f"ok: what-if curve of {len(curve)} TTLs, as configured at {obs['ttl_secs']} s "
          f"({obs['hit_ratio']:.3f} ± {obs['error_bound']:.3f})", flush=True)


def check_xss(driver, name):
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap-rows li')].map(li => li.textContent)")
    if name not in rows:
        fail(f"the shard {name!r} is not listed as text; rows {rows}")
    imgs = driver.execute_script("return document.getElementsByTagName('img').length")
    if imgs != 0:
        fail(f"{imgs} <img> elements exist: a name was rendered as markup")
    print("ok: the XSS shard name is text, no <img> element", flush=True)


def check_requests(driver, url):
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    names = driver.execute_script(
        "return performance.getEntries().map(e => e.name).filter(n => n.includes(':'))")
    outside = [n for n in names if not n.startswith(origin + "/") and n != origin]
    if outside:
        fail(f"requests outside the agent: {outside}")
    print(f"ok: {len(names)} resource entries, all from {origin}", flush=True)


def check_console(driver):
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    if errors:
        fail(f"the browser logged errors: {errors}")
    print("ok: no browser errors", flush=True)


def screenshot(driver, path):
    driver.save_screenshot(path)
    with open(path, "rb") as f:
        head = f.read(24)
    width, height = struct.unpack(">II", head[16:24])
    if (width, height) != (1280, 800):
        fail(f"screenshot is {width}x{height}, not 1280x800")
    print(f"ok: screenshot {width}x{height} at {path}", flush=True)


def main():
    url, hot, xss, shot, *alerts = sys.argv[1:]
    driver = browser()
    try:
        driver.get(url)
        wait_until(driver, f"the page naming {hot!r} as the busiest shard",
                   lambda: driver.execute_script(
                       "const e = document.getElementById('hot-shard'); return e && e.textContent")
                   == hot)
        print(f"ok: the page names {hot} as the busiest shard", flush=True)
        check_heatmap(driver, hot)
        keys = wait_until(driver, "the empty key listed as (empty)", lambda: [
            t for t in driver.execute_script(
                "return [...document.querySelectorAll('#group-keys td.key')].map(td => td.textContent)")
            if t == "(empty)"])
        print(f"ok: group keys list {keys[0]}", flush=True)
        titles = driver.execute_script(
            "return [...document.querySelectorAll('#alerts .title')].map(e => e.textContent)")
        for a in alerts:
            if not any(t.startswith(a + " · firing") for t in titles):
                fail(f"alert {a} is not listed as firing; listed: {titles}")
        print(f"ok: firing alerts listed: {', '.join(alerts)}", flush=True)
        check_whatif(driver)
        check_xss(driver, xss)
        check_requests(driver, url)
        check_console(driver)
        screenshot(driver, shot)
        print("READY-TO-STOP", flush=True)
        sys.stdin.readline()
        wait_until(driver, "the notice that the agent stopped answering", lambda:
                   driver.execute_script(
                       "const b = document.getElementById('banner');"
                       "return !b.hidden && document.body.dataset.state === 'offline'"
                       " && b.textContent.includes('stopped answering')"), timeout=40)
        print("ok: the page says the agent stopped answering", flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
