#!/usr/bin/env python3
"""The directory page in headless Chromium, as a person would use it, checked by axe-core
for accessibility (WCAG 2.1 A and AA, and axe's best practices) along the way.

Run by tests/tests/browser.rs against a servery started with --workers 4 --upload --dav:

    page.py BASE_URL ROOT_DIR WORK_DIR [SCREENSHOT_DIR]

BASE_URL is servery's address, ROOT_DIR the directory it serves (checked byte for byte),
WORK_DIR a scratch directory for the files to upload and the browser profile. Every wait
is on something the page shows, bounded; the whole run is bounded by DEADLINE.
"""

import hashlib
import http.server
import io
import os
import re
import sys
import tarfile
import threading
import time
import urllib.request
import zipfile

import axe_core_python
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

DEADLINE = time.monotonic() + 150
WAIT = 20
CHROME_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1100,900",
]
HOSTILE = [
    "<img src=x onerror=alert(1)>.txt",
    "\"quotes' & <b>.txt",
    "100% done %41.txt",
    "rtl\u202egpj.exe",
    "new\nline.txt",
]


# axe-core, the accessibility checker most audits use, as shipped in a PyPI wheel.
AXE = open(os.path.join(os.path.dirname(axe_core_python.__file__), "axe.min.js")).read()
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]


def accessible(driver, where):
    """axe-core finds no violation of WCAG 2.1 A/AA or its best practices on the page as
    it is now (injected through the driver, so the page's CSP stays as served)."""
    if not driver.execute_script("return typeof axe !== 'undefined'"):
        driver.execute_script(AXE)
    found = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}})"
        ".then(r => done(r.violations)).catch(e => done(String(e)));", AXE_TAGS)
    assert isinstance(found, list), f"axe did not run on {where}: {found}"
    report = [f"{v['id']} ({v['impact']}): {v['help']} at "
              f"{[n['target'] for n in v['nodes'][:3]]}" for v in found]
    assert not report, f"accessibility violations on {where}:\n" + "\n".join(report)


def step(name):
    left = DEADLINE - time.monotonic()
    if left <= 0:
        sys.exit(f"out of time before: {name}")
    print(f"-- {name} ({left:.0f} s left)", flush=True)


def browser(work):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROME_FLAGS + [f"--user-data-dir={work}/profile"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait(driver, what, condition, bound=WAIT):
    # The page re-renders its list after a change (a delete, a rename, a filter): an
    # element found in one look may be gone by the next call on it, which is a reason to
    # look again, not a failure.
    try:
        return WebDriverWait(driver, min(bound, max(1, DEADLINE - time.monotonic())),
                             poll_frequency=0.1,
                             ignored_exceptions=(StaleElementReferenceException,)
                             ).until(lambda d: condition(d))
    except Exception as e:
        raise AssertionError(f"timed out waiting for {what}: {e}; rows: {rows_now(driver)}") from None


def rows(driver):
    return [tr.get_attribute("data-name") for tr in
            driver.find_elements(By.CSS_SELECTOR, "#list tbody tr[data-name]") if tr.is_displayed()]


def rows_now(driver):
    """`rows`, for a message: what the list shows once it holds still."""
    for _ in range(20):
        try:
            return rows(driver)
        except StaleElementReferenceException:
            time.sleep(0.05)
    return "(the list kept changing)"


def no_alert(driver):
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a script ran: alert({text!r})")


def script_errors(driver):
    """The page's own script errors logged since the last call (the log is drained)."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "/.servery/app-" in e["message"]]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def throttle(driver, bytes_per_s):
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1,
        "uploadThroughput": bytes_per_s if bytes_per_s else -1,
    })


def shoot(driver, shots, name):
    if shots:
        driver.save_screenshot(os.path.join(shots, f"{name}.png"))


class Foreign(http.server.BaseHTTPRequestHandler):
    """A hostile page on another port: it posts an upload form to servery on load."""
    target = ""

    def do_GET(self):
        page = f"""<!DOCTYPE html><title>hostile</title>
<form id=f method=post enctype=multipart/form-data action="{self.target}/">
<input type=hidden name=x value=y></form>
<script>
const data = new FormData();
data.append("file", new Blob(["pwned"]), "csrf-fetch.txt");
fetch("{self.target}/", {{method: "POST", body: data, mode: "no-cors"}})
  .then(() => {{ document.title = "fetch sent"; }}, () => {{ document.title = "fetch failed"; }});
</script>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def main():
    base, root, work = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    shots = sys.argv[4] if len(sys.argv) > 4 else None
    if shots:
        os.makedirs(shots, exist_ok=True)

    # The served tree: a folder to browse, sort and archive, and the hostile names.
    write(f"{root}/docs/README.md", b"# Docs\n\n<script>alert(1)</script> *kept as text*\n")
    write(f"{root}/docs/small.txt", b"s" * 10)
    write(f"{root}/docs/medium.bin", os.urandom(5000))
    write(f"{root}/docs/deep/large.bin", os.urandom(300_000))
    for name in HOSTILE:
        write(f"{root}/{name}", name.encode())
    # What the person uploads.
    uploads = {f"up{i}.bin": os.urandom(n) for i, n in enumerate([1, 700_000, 2_500_000])}
    for name, data in uploads.items():
        write(f"{work}/pick/{name}", data)
    write(f"{work}/album/a.txt", b"alpha")
    write(f"{work}/album/inner/b.bin", os.urandom(50_000))
    big = os.urandom(6 * 1024 * 1024 + 123)
    write(f"{work}/resume/resumed.bin", big)
    again = os.urandom(10 * 1024 * 1024 + 321)
    write(f"{work}/resume/again.bin", again)
    # A file the server refuses: a folder of that name is in the way.
    write(f"{work}/refused/docs", b"not a folder")
    # Code to find, rename from a search, and read.
    write(f"{root}/src/util/a.py", b"import os\n\nprint('hi')\n")
    # A big folder, numbered as people number things.
    os.makedirs(f"{root}/big", exist_ok=True)
    for i in range(10_000):
        with open(f"{root}/big/icon-{i}.png", "wb") as f:
            f.write(b"x")

    # A page someone uploaded, whose script would act as the site if it ran.
    write(f"{root}/evil.html", b"<!doctype html><title>inert</title><p id=p>static</p>"
          b"<script>document.title = 'ran'; document.getElementById('p').textContent = 'ran';"
          b"fetch('/evil-wrote.txt', {method: 'PUT', body: 'x'});</script>")
    write(f"{root}/evil.svg", b"<svg xmlns='http://www.w3.org/2000/svg'><script>"
          b"fetch('/evil-svg-wrote.txt', {method: 'PUT', body: 'x'})</script>"
          b"<text x='5' y='20'>svg</text></svg>")

    driver = browser(work)
    try:
        step("an uploaded page runs in a sandbox")
        driver.get(base + "/evil.html")
        shown = wait(driver, "the uploaded page shown", lambda d: d.find_element(By.ID, "p"))
        wait(driver, "the page loaded",
             lambda d: d.execute_script("return document.readyState") == "complete")
        ran = (shown.text, driver.title)
        assert ran == ("static", "inert"), \
            f"an uploaded page's script ran on the site (sandbox rule, decision 0047): {ran}"
        origin = driver.execute_script("try { return String(window.origin) } catch (e) { return 'error' }")
        assert origin == "null", f"the page is not in an opaque origin: {origin!r}"
        driver.get(base + "/evil.svg")
        wait(driver, "the uploaded SVG shown", lambda d: "svg" in d.page_source)
        driver.get(base + "/")
        wait(driver, "the root listing", lambda d: "evil.html" in rows(d))
        for name in ("evil-wrote.txt", "evil-svg-wrote.txt"):
            assert not os.path.exists(f"{root}/{name}"), f"an uploaded page's script wrote {name}"

        step("browse and sort")
        driver.get(base + "/docs/")
        wait(driver, "the listing (folders first, then names ignoring case)",
             lambda d: rows(d) == ["deep", "medium.bin", "README.md", "small.txt"])
        readme = driver.find_element(By.CSS_SELECTOR, "article.readme")
        assert "<script>alert(1)</script>" in readme.text, readme.text
        no_alert(driver)
        accessible(driver, "a folder with a README")
        code = driver.find_element(By.CSS_SELECTOR, "aside.qr img")
        wait(driver, "the QR code drawn (the page's policy lets data: images in)",
             lambda d: d.execute_script(
                 "return arguments[0].complete && arguments[0].naturalWidth >= 168", code))
        assert code.get_attribute("alt").startswith("QR code of http://"), code.get_attribute("alt")
        size = driver.find_element(By.CSS_SELECTOR, "th.size a")
        size.click()
        wait(driver, "sorted by size",
             lambda d: rows(d) == ["deep", "small.txt", "README.md", "medium.bin"])
        driver.find_element(By.CSS_SELECTOR, "th.size a").click()
        wait(driver, "sorted by size, descending",
             lambda d: rows(d) == ["deep", "medium.bin", "README.md", "small.txt"])
        cell = driver.find_element(By.CSS_SELECTOR, "tr[data-name='medium.bin'] td.size")
        assert (cell.text, cell.get_attribute("title")) == ("4.9 KiB", "5000 bytes"), cell.text

        step("filter and search")
        driver.get(base + "/docs/")
        box = wait(driver, "the filter box", lambda d: d.find_element(By.ID, "filter"))
        wait(driver, "the filter box shown", lambda d: box.is_displayed())
        box.send_keys("MED")
        wait(driver, "filtered rows", lambda d: rows(d) == ["medium.bin"])
        search = driver.find_element(By.ID, "q")
        search.send_keys("large\n")
        wait(driver, "search results", lambda d: "1 found" in d.page_source)
        link = driver.find_element(By.CSS_SELECTOR, "#list td.name a")
        assert link.text == "deep/large.bin", link.text
        assert link.get_attribute("href") == base + "/docs/deep/large.bin"
        assert driver.find_element(By.ID, "q").get_attribute("value") == "large", \
            "the search box keeps the query"
        wait(driver, "the page's script ran", lambda d: d.find_elements(By.CSS_SELECTOR, "td.act"))
        errors = script_errors(driver)
        assert not errors, f"script errors on the search results: {errors}"
        accessible(driver, "search results")

        step("rename a search result: it stays in its own folder")
        driver.get(base + "/?q=a.py")
        wait(driver, "the hit", lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-name='a.py']"))
        driver.find_element(By.CSS_SELECTOR, "button[aria-label='Rename a.py']").click()
        prompt = wait(driver, "the rename prompt", lambda d: d.switch_to.alert)
        prompt.send_keys("b.py")
        prompt.accept()
        wait(driver, "renamed on disk", lambda d: os.path.exists(f"{root}/src/util/b.py"))
        assert not os.path.exists(f"{root}/b.py"), "renamed into the folder searched from"
        assert not os.path.exists(f"{root}/src/util/a.py")
        assert not script_errors(driver)

        step("code previewed with line numbers, and opened as text")
        driver.get(base + "/src/util/")
        wait(driver, "the folder", lambda d: rows(d) == ["b.py"])
        wait(driver, "the preview button", lambda d: d.find_element(
            By.CSS_SELECTOR, "button[aria-label='Preview b.py']")).click()
        wait(driver, "the preview", lambda d: d.find_elements(By.CSS_SELECTOR, "#pv-body .l"))
        lines = driver.execute_script(
            "return [...document.querySelectorAll('#pv-body .l')].map(l => l.textContent)")
        assert lines == ["import os\n", "\n", "print('hi')\n"], lines
        numbers = driver.execute_script(
            "return getComputedStyle(document.querySelector('#pv-body .l'), '::before').content")
        assert numbers.startswith("counter(ln"), numbers
        assert driver.find_element(By.ID, "pv-note").text == "3 lines"
        accessible(driver, "the preview")
        shoot(driver, shots, "preview")
        driver.find_element(By.ID, "pv-body").send_keys("\ue00c")  # Escape
        wait(driver, "the preview closed", lambda d: not d.find_element(By.ID, "preview").is_displayed())
        driver.find_element(By.CSS_SELECTOR, "tr[data-name='b.py'] td.name a").click()
        shown = wait(driver, "the code shown", lambda d: d.find_element(By.TAG_NAME, "pre"))
        assert shown.text == "import os\n\nprint('hi')", shown.text
        assert driver.current_url == base + "/src/util/b.py"

        step("delete, where the server allows it")
        driver.get(base + "/src/util/")
        wait(driver, "the delete button", lambda d: d.find_elements(
            By.CSS_SELECTOR, "button[aria-label='Delete b.py']"))[0].click()
        wait(driver, "the confirmation", lambda d: d.switch_to.alert).accept()
        wait(driver, "deleted on disk", lambda d: not os.path.exists(f"{root}/src/util/b.py"))
        wait(driver, "the row gone", lambda d: rows(d) == [])

        step("a big folder: compressed, in natural order")
        driver.get(base + "/big/")
        wait(driver, "the big listing", lambda d: d.execute_script(
            "return document.querySelectorAll('#list tbody tr[data-name]').length") == 10_000, 40)
        first = driver.execute_script(
            "return [...document.querySelectorAll('#list tbody tr[data-name]')].slice(0, 12)"
            ".map(r => r.dataset.name)")
        assert first == [f"icon-{i}.png" for i in range(12)], first
        sizes = driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "return [n.encodedBodySize, n.decodedBodySize]")
        print(f"   10,000 entries: {sizes[1]} bytes of HTML, {sizes[0]} on the wire")
        assert sizes[0] < 200 * 1024 and sizes[1] > 2_000_000, sizes

        step("relative dates, exact in the tooltip")
        driver.get(base + "/docs/")
        stamp = wait(driver, "a date", lambda d: d.find_element(
            By.CSS_SELECTOR, "tr[data-name='small.txt'] time"))
        wait(driver, "the date in words", lambda d: stamp.text in ("just now", "1 min ago", "2 min ago"))
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp.get_attribute("title")), \
            stamp.get_attribute("title")

        step("a styled page where nothing is")
        driver.get(base + "/docs/no-such-file.txt")
        heading = wait(driver, "the 404 page", lambda d: d.find_element(By.TAG_NAME, "h1"))
        assert heading.text == "Not found", heading.text
        up = driver.find_element(By.LINK_TEXT, "Go to the folder above")
        assert up.get_attribute("href") == base + "/docs/", up.get_attribute("href")
        accessible(driver, "the 404 page")

        step("screenshots of the page")
        driver.get(base + "/")
        wait(driver, "the root listing", lambda d: "docs" in rows(d))
        shoot(driver, shots, "light")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        bg = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(21, 23, 26)", f"dark background: {bg}"
        shoot(driver, shots, "dark")
        accessible(driver, "the root in the dark theme")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.set_window_size(390, 844)
        shoot(driver, shots, "phone")
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the phone layout scrolls sideways by {overflow}px"
        driver.set_window_size(1100, 900)

        step("XSS names render as text and link correctly")
        no_alert(driver)
        names = driver.execute_script(
            "return [...document.querySelectorAll('#list tr[data-name]')].map(r => r.dataset.name)")
        for name in HOSTILE:
            assert name in names, f"{name!r} not listed: {names}"
        hrefs = driver.execute_script(
            "return [...document.querySelectorAll('#list tr[data-name]')]"
            ".map(r => [r.dataset.name, r.querySelector('a').href])")
        for name, href in hrefs:
            if name in HOSTILE:
                with urllib.request.urlopen(href, timeout=10) as r:
                    assert r.read() == name.encode(), f"{name!r} links to {href}"
        texts = driver.execute_script(
            "return [...document.querySelectorAll('#list td.name a')].map(a => a.textContent)")
        assert "<img src=x onerror=alert(1)>.txt" in texts, texts
        assert "rtlU+202Egpj.exe" in texts and "newU+000Aline.txt" in texts, texts
        assert not driver.find_elements(By.CSS_SELECTOR, "#list img"), "a name became an element"

        step("upload three files and a folder")
        driver.get(base + "/")
        pick = wait(driver, "the file input", lambda d: d.find_element(By.ID, "up-files"))
        pick.send_keys("\n".join(f"{work}/pick/{n}" for n in uploads))
        driver.find_element(By.ID, "up-dir").send_keys(f"{work}/album")
        # The folder's files are enumerated by the browser after the three picked ones may
        # have finished: the batch is done when all five are queued and none is left.
        wait(driver, "every upload finished",
             lambda d: len(d.find_elements(By.CSS_SELECTOR, "#queue li")) == 5
             and d.find_element(By.ID, "up-all-t").text.endswith("finished"), 40)
        bars = driver.execute_script(
            "return [...document.querySelectorAll('#queue li')].map(li => "
            "[li.querySelector('.what').textContent, li.querySelector('progress').value,"
            " li.querySelector('progress').max, li.className])")
        assert len(bars) == 5, bars
        for what, value, top, state in bars:
            assert state == "done" and value == top, f"{what}: {value}/{top} {state}"
        overall = driver.find_element(By.ID, "up-all")
        assert overall.get_attribute("value") == overall.get_attribute("max")
        wait(driver, "uploads listed", lambda d: all(n in rows(d) for n in list(uploads) + ["album"]))
        accessible(driver, "the page after uploads (queue and progress bars)")
        for name, data in uploads.items():
            assert sha(f"{root}/{name}") == hashlib.sha256(data).hexdigest(), name
        assert open(f"{root}/album/a.txt", "rb").read() == b"alpha"
        assert sha(f"{root}/album/inner/b.bin") == sha(f"{work}/album/inner/b.bin")

        step("a refused upload says so, in words, with a retry")
        driver.find_element(By.ID, "up-files").send_keys(f"{work}/refused/docs")
        failed = wait(driver, "the refusal", lambda d: d.find_element(
            By.CSS_SELECTOR, "#queue li.failed"))
        state = failed.find_element(By.CSS_SELECTOR, ".state").text
        assert state == "Not uploaded: the target is a directory", state
        assert failed.find_element(By.CSS_SELECTOR, "button[aria-label='Retry docs']").is_displayed()
        held = failed.find_element(By.TAG_NAME, "progress").get_attribute("value")
        assert float(held) == 0, f"the bar of a refused file shows {held} bytes held"
        total = driver.find_element(By.ID, "up-all-t").text
        assert "not uploaded" in total and not total.endswith("finished"), total
        assert "failed" in driver.find_element(By.ID, "overall").get_attribute("class")
        assert open(f"{root}/docs/small.txt", "rb").read() == b"s" * 10
        accessible(driver, "a refused upload")
        shoot(driver, shots, "upload-refused")

        step("interrupt an upload, reload, resume")
        throttle(driver, 1_500_000)
        driver.find_element(By.ID, "up-files").send_keys(f"{work}/resume/resumed.bin")
        bar = "#queue li:last-child progress"
        wait(driver, "the first chunk sent", lambda d: int(
            d.find_element(By.CSS_SELECTOR, bar).get_attribute("value") or 0) > 4 * 1024 * 1024)
        shoot(driver, shots, "upload-in-progress")
        driver.refresh()  # aborts the request mid-chunk
        throttle(driver, 0)
        assert not os.path.exists(f"{root}/resumed.bin"), "published while incomplete"
        pick = wait(driver, "the file input", lambda d: d.find_element(By.ID, "up-files"))
        pick.send_keys(f"{work}/resume/resumed.bin")
        wait(driver, "the resumed upload finished",
             lambda d: d.find_element(By.ID, "up-all-t").text.endswith("finished"), 30)
        log = driver.find_element(By.ID, "queue").text
        assert sha(f"{root}/resumed.bin") == hashlib.sha256(big).hexdigest(), "not byte-exact"
        total = driver.find_element(By.ID, "up-all-t").text
        assert total == "6.0 MiB of 6.0 MiB — finished", f"the overall total after a resume: {total}"
        print(f"   resumed: {log!r}")

        step("an upload cut off, picked again: resumed and counted once")
        throttle(driver, 1_500_000)
        driver.find_element(By.ID, "up-files").send_keys(f"{work}/resume/again.bin")
        wait(driver, "the first chunk sent", lambda d: int(
            d.find_element(By.CSS_SELECTOR, bar).get_attribute("value") or 0) > 4 * 1024 * 1024)
        # The next chunk's request fails as if the network had gone.
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*again.bin*"]})
        wait(driver, "the upload failed", lambda d: d.find_elements(By.CSS_SELECTOR, "#queue li.failed"))
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        throttle(driver, 0)
        driver.find_element(By.ID, "up-files").send_keys(f"{work}/resume/again.bin")
        wait(driver, "the upload picked again finished",
             lambda d: d.find_element(By.ID, "up-all-t").text.endswith("finished"), 30)
        total = driver.find_element(By.ID, "up-all-t").text
        assert total == "10 MiB of 10 MiB — finished", f"the overall total after a resume: {total}"
        rows_of = driver.execute_script(
            "return [...document.querySelectorAll('#queue li .what')].map(e => e.textContent)")
        assert rows_of.count("again.bin") == 1, rows_of
        assert sha(f"{root}/again.bin") == hashlib.sha256(again).hexdigest(), "not byte-exact"

        step("download a folder as zip and tar.gz")
        driver.get(base + "/album/")
        href = wait(driver, "the zip link", lambda d: d.find_element(
            By.CSS_SELECTOR, "a[href='?archive=zip']")).get_attribute("href")
        with urllib.request.urlopen(href, timeout=20) as r:
            archive = zipfile.ZipFile(io.BytesIO(r.read()))
        got = {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
        want = {"album/a.txt": b"alpha",
                "album/inner/b.bin": open(f"{work}/album/inner/b.bin", "rb").read()}
        assert got == want, sorted(got)
        with urllib.request.urlopen(base + "/album/?archive=tar.gz", timeout=20) as r:
            tar = tarfile.open(fileobj=io.BytesIO(r.read()), mode="r:gz")
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert got == want, sorted(got)

        step("a page on another port cannot upload")
        Foreign.target = base
        foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
        threading.Thread(target=foreign.serve_forever, daemon=True).start()
        try:
            driver.get(f"http://127.0.0.1:{foreign.server_address[1]}/")
            wait(driver, "the hostile fetch", lambda d: d.title in ("fetch sent", "fetch failed"))
            driver.execute_script("document.getElementById('f').submit()")
            wait(driver, "servery's refusal, in words",
                 lambda d: "cross-site request refused" in d.page_source.lower())
            assert driver.find_element(By.TAG_NAME, "h1").text == "Not allowed"
        finally:
            foreign.shutdown()
        assert not os.path.exists(f"{root}/csrf-fetch.txt"), "a cross-site upload was written"
        no_alert(driver)
    finally:
        driver.quit()
    print("browser: all passed", flush=True)


if __name__ == "__main__":
    main()
