#!/usr/bin/env python3
"""The directory page's viewer and editor in headless Chromium, checked by axe-core.

Run by tests/tests/browser_viewer.rs against a servery started with --workers 2 --upload
--dav --allow-overwrite:

    viewer.py BASE_URL ROOT_DIR WORK_DIR [SCREENSHOT_DIR]

Images with previous and next (buttons and arrow keys, around the ends, only the images
the filter shows), audio that plays under the page's policy, a video the browser cannot
play explained in words, a PDF framed, and the text editor: saves chained on the version
each save returns, an edit made meanwhile on disk caught as a conflict (nothing
overwritten) and settled either way, Windows line endings kept. Uses the helpers of
page.py (the main browser test); every wait is bounded.
"""

import os
import struct
import sys
import wave
import zlib

from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import page  # noqa: E402  (the shared helpers: browser, wait, accessible, rows, write)
from page import accessible, browser, rows, shoot, step, wait, write  # noqa: E402


def png(width, height, rgb):
    """A real PNG of one colour (the browser decodes it and reports its size)."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def wav(path, seconds):
    """Silence as 8 kHz 16-bit mono PCM, which every browser plays."""
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * int(8000 * seconds))


PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
       b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
       b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 100]>>endobj\n"
       b"trailer<</Root 1 0 R>>\n%%EOF\n")


def refusals(driver):
    """Console errors since the last look: the page's own script errors, and anything the
    browser refused to load (a Content-Security-Policy or framing refusal)."""
    found = []
    for e in driver.get_log("browser"):
        m = e["message"]
        if e["level"] == "SEVERE" and ("/.servery/app-" in m or "Refused to" in m
                                        or "Content Security Policy" in m):
            found.append(m)
    return found


def note(driver):
    return driver.find_element(By.ID, "pv-note").text


def shown_image(driver):
    """(file name, decoded width) of the image the viewer shows, once decoded."""
    return driver.execute_script(
        "const i = document.querySelector('#pv-view img');"
        "return i && i.complete && i.naturalWidth ? [i.alt, i.naturalWidth] : null")


def open_viewer(driver, name):
    wait(driver, f"the preview button of {name}", lambda d: d.find_element(
        By.CSS_SELECTOR, f"button[aria-label='Preview {name}']")).click()
    wait(driver, "the viewer", lambda d: d.find_element(By.ID, "preview").is_displayed())


def close_viewer(driver):
    driver.find_element(By.CSS_SELECTOR, "#preview .pv-head button:last-of-type").click()
    wait(driver, "the viewer closed", lambda d: not d.find_element(By.ID, "preview").is_displayed())


def disk(root, name):
    with open(os.path.join(root, name), "rb") as f:
        return f.read()


def type_into_editor(driver, text):
    """Replaces the editor's text as typing would (an input event follows)."""
    area = wait(driver, "the editor", lambda d: d.find_element(By.ID, "pv-text"))
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}))", area, text)
    return area


def main():
    base, root, work = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    shots = sys.argv[4] if len(sys.argv) > 4 else None
    if shots:
        os.makedirs(shots, exist_ok=True)

    sizes = {"a.png": 3, "b.png": 5, "c.png": 7}
    for name, width in sizes.items():
        write(f"{root}/media/{name}", png(width, 2, (200, 40, 40)))
    write(f"{root}/media/notes.txt", b"between the images\n")
    os.makedirs(f"{root}/media", exist_ok=True)
    wav(f"{root}/media/tone.wav", 0.5)
    write(f"{root}/media/clip.webm", b"not a video at all")
    write(f"{root}/media/paper.pdf", PDF)
    write(f"{root}/edit/todo.txt", b"one\ntwo\n")
    write(f"{root}/edit/dos.txt", b"alpha\r\nbeta\r\n")

    driver = browser(work)
    try:
        step("images: previous and next through the folder, around the ends")
        driver.get(base + "/media/")
        wait(driver, "the listing", lambda d: "a.png" in rows(d))
        refusals(driver)
        open_viewer(driver, "a.png")
        wait(driver, "a.png decoded", lambda d: shown_image(d) == ["a.png", 3])
        assert note(driver) == "1 of 3 images", note(driver)
        driver.find_element(By.ID, "pv-next").click()
        wait(driver, "b.png after Next", lambda d: shown_image(d) == ["b.png", 5])
        assert note(driver) == "2 of 3 images", note(driver)
        accessible(driver, "the image viewer")
        shoot(driver, shots, "viewer-image")
        body = driver.find_element(By.ID, "pv-view")
        driver.find_element(By.ID, "pv-next").send_keys("\ue014")  # ArrowRight
        wait(driver, "c.png after the right arrow", lambda d: shown_image(d) == ["c.png", 7])
        driver.find_element(By.ID, "pv-next").send_keys("\ue014")
        wait(driver, "around the end to a.png", lambda d: shown_image(d) == ["a.png", 3])
        driver.find_element(By.ID, "pv-prev").send_keys("\ue012")  # ArrowLeft
        wait(driver, "back around to c.png", lambda d: shown_image(d) == ["c.png", 7])
        driver.find_element(By.ID, "pv-prev").click()
        wait(driver, "b.png after Previous", lambda d: shown_image(d) == ["b.png", 5])
        assert body.is_displayed()
        close_viewer(driver)
        assert not driver.find_elements(By.CSS_SELECTOR, "#pv-view *"), "the viewer kept its content"
        # With the filter showing one image, there is nothing to turn to.
        box = driver.find_element(By.ID, "filter")
        box.send_keys("c.")
        wait(driver, "filtered", lambda d: rows(d) == ["c.png"])
        open_viewer(driver, "c.png")
        wait(driver, "c.png decoded", lambda d: shown_image(d) == ["c.png", 7])
        assert not driver.find_element(By.ID, "pv-next").is_displayed(), "Next offered for one image"
        close_viewer(driver)
        box.clear()
        box.send_keys("\ue00c")  # Escape empties the filter
        assert not refusals(driver)

        step("audio plays under the page's policy; a video it cannot play is explained")
        driver.get(base + "/media/")
        wait(driver, "the listing", lambda d: "tone.wav" in rows(d))
        open_viewer(driver, "tone.wav")
        wait(driver, "the audio's length read (the policy lets the site's media in)",
             lambda d: d.execute_script(
                 "const a = document.querySelector('#pv-view audio');"
                 "return a && a.readyState >= 1 && Math.abs(a.duration - 0.5) < 0.05"))
        assert driver.execute_script("return document.querySelector('#pv-view audio').controls")
        accessible(driver, "the audio viewer")
        close_viewer(driver)
        open_viewer(driver, "clip.webm")
        wait(driver, "the refusal in words",
             lambda d: note(d) == "This browser cannot play clip.webm: download it to play it elsewhere")
        close_viewer(driver)
        found = refusals(driver)
        assert not [m for m in found if "Content Security Policy" in m], found

        step("a PDF in a frame")
        open_viewer(driver, "paper.pdf")
        frame = wait(driver, "the frame", lambda d: d.find_element(By.CSS_SELECTOR, "#pv-view iframe"))
        assert frame.get_attribute("src") == base + "/media/paper.pdf", frame.get_attribute("src")
        assert frame.get_attribute("title") == "Content of paper.pdf"
        wait(driver, "the PDF fetched into the frame", lambda d: d.execute_script(
            "return performance.getEntriesByType('resource')"
            ".some(e => e.name.endsWith('/media/paper.pdf'))"))
        found = refusals(driver)
        assert not found, f"the browser refused the framed PDF: {found}"
        close_viewer(driver)

        step("edit a text file: saves chain on the version each save returns")
        driver.get(base + "/edit/")
        wait(driver, "the listing", lambda d: "todo.txt" in rows(d))
        open_viewer(driver, "todo.txt")
        wait(driver, "the text shown", lambda d: note(d) == "2 lines")
        driver.find_element(By.ID, "pv-edit").click()
        area = wait(driver, "the editor with the file's text", lambda d: d.find_element(By.ID, "pv-text"))
        assert area.get_attribute("value") == "one\ntwo\n", area.get_attribute("value")
        accessible(driver, "the editor")
        type_into_editor(driver, "one\ntwo\nthree\n")
        driver.find_element(By.ID, "pv-save").click()
        wait(driver, "saved", lambda d: note(d).startswith("Saved 14 B at "))
        assert disk(root, "edit/todo.txt") == b"one\ntwo\nthree\n"
        type_into_editor(driver, "one\ntwo\nthree\nfour\n")
        driver.find_element(By.ID, "pv-save").click()
        wait(driver, "saved again (on the tag the first save returned)",
             lambda d: note(d).startswith("Saved 19 B at "))
        assert disk(root, "edit/todo.txt") == b"one\ntwo\nthree\nfour\n"
        shoot(driver, shots, "viewer-editor")

        step("an edit made meanwhile is a conflict, not a lost update")
        with open(f"{root}/edit/todo.txt", "wb") as f:
            f.write(b"someone else's version\n")
        type_into_editor(driver, "one\ntwo\nthree\nfour\nfive\n")
        driver.find_element(By.ID, "pv-save").click()
        wait(driver, "the conflict explained", lambda d: note(d).startswith(
            "Not saved: someone changed or removed todo.txt after you opened it."))
        assert disk(root, "edit/todo.txt") == b"someone else's version\n", \
            "a save over someone else's edit went through without If-Match"
        assert driver.find_element(By.ID, "pv-text").get_attribute("value") == \
            "one\ntwo\nthree\nfour\nfive\n", "the person's text was lost"
        accessible(driver, "the editor in conflict")
        shoot(driver, shots, "viewer-conflict")
        driver.find_element(By.ID, "pv-over").click()
        wait(driver, "saved over theirs", lambda d: note(d).startswith("Saved 24 B at "))
        assert disk(root, "edit/todo.txt") == b"one\ntwo\nthree\nfour\nfive\n"
        assert not driver.find_element(By.ID, "pv-over").is_displayed()
        # Again someone else; this time the person takes theirs.
        with open(f"{root}/edit/todo.txt", "wb") as f:
            f.write(b"take mine instead\n")
        type_into_editor(driver, "discarded\n")
        driver.find_element(By.ID, "pv-save").click()
        wait(driver, "the second conflict", lambda d: note(d).startswith("Not saved: someone changed"))
        driver.find_element(By.ID, "pv-theirs").click()
        wait(driver, "the confirmation", lambda d: d.switch_to.alert).accept()
        wait(driver, "their text loaded", lambda d: d.find_element(By.ID, "pv-text")
             .get_attribute("value") == "take mine instead\n")
        assert disk(root, "edit/todo.txt") == b"take mine instead\n"
        close_viewer(driver)

        step("Windows line endings are kept")
        open_viewer(driver, "dos.txt")
        driver.find_element(By.ID, "pv-edit").click()
        wait(driver, "the editor", lambda d: d.find_element(By.ID, "pv-text"))
        assert "Windows line endings" in note(driver), note(driver)
        type_into_editor(driver, "alpha\nbeta\ngamma\n")
        driver.find_element(By.ID, "pv-save").click()
        wait(driver, "saved", lambda d: note(d).startswith("Saved "))
        assert disk(root, "edit/dos.txt") == b"alpha\r\nbeta\r\ngamma\r\n", disk(root, "edit/dos.txt")
        close_viewer(driver)
        found = refusals(driver)
        assert not found, f"console errors: {found}"
    finally:
        driver.quit()
    print("viewer: all passed", flush=True)


if __name__ == "__main__":
    page.DEADLINE = page.time.monotonic() + 120
    main()
