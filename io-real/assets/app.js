// servery directory page: filter, local times, resumable uploads, folder operations.
// The page works without this script; everything here builds on the server's markup.
// Names are always set as text (textContent, dataset), never as markup.
"use strict";
(function () {
  var body = document.body;
  var dir = body.dataset.dir || "/";
  var CHUNK = 4 * 1024 * 1024;
  var PARALLEL = 3;
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function encodePath(rel) {
    return rel.split("/").map(encodeURIComponent).join("/");
  }
  function human(n) {
    if (n < 1024) return n + " B";
    var u = ["KiB", "MiB", "GiB", "TiB"], i = -1;
    do { n /= 1024; i++; } while (Math.round(n) >= 1024 && i < u.length - 1);
    return (n < 9.95 ? n.toFixed(1) : Math.round(n)) + " " + u[i];
  }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function plural(n, one) { return n + " " + one + (n === 1 ? "" : "s"); }

  // How long ago, in words; past a week (or in the future) the local date instead.
  function ago(d, now) {
    var s = (now - d) / 1000;
    var date = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate());
    if (s < -60 || s >= 7 * 86400) return date;
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return plural(Math.floor(s / 3600), "hour") + " ago";
    return s < 2 * 86400 ? "yesterday" : Math.floor(s / 86400) + " days ago";
  }

  // Times relative to now; the exact time, in the reader's zone, is in the tooltip.
  function localTimes(root) {
    var now = Date.now();
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      t.textContent = ago(d, now);
      t.title = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    });
  }
  setInterval(function () { localTimes(document); }, 60000);

  // What a refusal means, in words. The server's text reads "409 Conflict: the target is
  // a directory"; its explanation after the status is kept, a bare status line is not.
  var WORDS = {
    400: "the server could not understand the request",
    401: "you need to sign in first",
    403: "this is not allowed here",
    404: "it is not there any more (moved, renamed or deleted?)",
    405: "something with that name is already there",
    409: "it clashes with what is there now",
    412: "something with that name is already there, or it changed meanwhile",
    413: "it is too large for this server",
    423: "it is locked by someone else",
    503: "the server is busy: try again in a moment",
    507: "the server has no space left"
  };
  function explain(status, text) {
    var first = String(text || "").trim().split("\n")[0];
    var detail = /^\d{3}\b[^:]*:\s*(.+)$/.exec(first);
    if (detail) return detail[1];
    if (first && !/^\d{3}\b/.test(first) && first.charAt(0) !== "<") return first;
    return WORDS[status] || (status ? "the server refused (status " + status + ")" : "the connection failed");
  }

  // Filter: hides rows whose name does not contain the text.
  var filter = $("filter");
  function applyFilter() {
    if (!filter) return;
    var q = filter.value.toLowerCase();
    document.querySelectorAll("#list tbody tr[data-name]").forEach(function (tr) {
      tr.hidden = q !== "" && tr.dataset.name.toLowerCase().indexOf(q) < 0;
    });
  }
  if (filter) {
    filter.parentNode.hidden = false;
    filter.addEventListener("input", applyFilter);
    document.addEventListener("keydown", function (e) {
      var t = e.target.tagName;
      if (e.key === "/" && t !== "INPUT" && t !== "TEXTAREA" && !e.ctrlKey && !e.metaKey) {
        e.preventDefault();
        filter.focus();
      } else if (e.key === "Escape" && e.target === filter) {
        filter.value = "";
        applyFilter();
      }
    });
  }

  // Re-reads this folder's rows after a change, keeping the page (and its progress bars).
  function refreshList() {
    return fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("#list tbody");
        var old = document.querySelector("#list tbody");
        if (fresh && old) old.replaceWith(document.importNode(fresh, true));
        decorate();
      });
  }

  function showError(text) {
    var e = $("msg");
    if (e) e.textContent = text; else window.alert(text);
  }

  function request(method, url, headers) {
    return fetch(url, { method: method, headers: headers || {}, credentials: "same-origin" })
      .then(function (r) {
        if (r.ok) return r;
        return r.text().then(function (t) {
          var e = new Error(explain(r.status, t));
          e.status = r.status;
          throw e;
        });
      }, function () { throw new Error(explain(0, "")); });
  }

  // Rename, move, delete (WebDAV), with confirmation.
  function rowActions(tr) {
    if (!body.hasAttribute("data-dav") || tr.querySelector("td.act")) return;
    var name = tr.dataset.name;
    var isDir = tr.classList.contains("k-dir");
    var href = tr.querySelector("td.name a").getAttribute("href");
    var src = new URL(href, location.href).href;
    // The folder the entry is in: a search result's own, not the folder searched from.
    var own = new URL(href, location.href).pathname;
    if (isDir) own = own.slice(0, -1);
    var parent = own.slice(0, own.lastIndexOf("/") + 1);
    var td = el("td", "act");
    function button(label, action) {
      var b = el("button", "quiet", label);
      b.type = "button";
      b.setAttribute("aria-label", label + " " + name);
      b.addEventListener("click", action);
      td.appendChild(b);
    }
    function move(to) {
      var dest = new URL(to, location.href).href;
      request("MOVE", src, { Destination: dest, Overwrite: "F" })
        .then(refreshList, function (e) {
          showError("Cannot move " + name + ": " +
            (e.status === 412 ? "something with that name is already there" : e.message));
        });
    }
    button("Rename", function () {
      var to = window.prompt("New name for " + name, name);
      if (!to || to === name) return;
      if (to.indexOf("/") >= 0) { showError("A name cannot contain /"); return; }
      move(parent + encodeURIComponent(to) + (isDir ? "/" : ""));
    });
    button("Move", function () {
      var shown;
      try { shown = decodeURIComponent(parent); } catch (e) { shown = "/"; }  // not UTF-8
      var to = window.prompt("Move " + name + " to folder (path from the top, e.g. /a/b/)", shown);
      if (!to) return;
      if (to.charAt(0) !== "/") to = "/" + to;
      if (to.charAt(to.length - 1) !== "/") to += "/";
      move(encodePath(to.slice(0, -1)) + "/" + encodeURIComponent(name) + (isDir ? "/" : ""));
    });
    // Offered only where the server allows it (`--allow-overwrite`); the page says so.
    if (body.hasAttribute("data-delete")) button("Delete", function () {
      var what = isDir ? "the folder " + name + " and everything in it" : name;
      if (!window.confirm("Delete " + what + "?")) return;
      request("DELETE", src).then(refreshList, function (e) { showError("Cannot delete " + name + ": " + e.message); });
    });
    tr.appendChild(td);
  }

  // ---- The viewer, in one dialog: text and code with line numbers, images (previous and
  // next through the folder's images, also with the arrow keys), audio, video and PDF.
  // Where the server takes overwrites, a text file can be edited here: the save carries
  // If-Match with the version the editor loaded, so an edit someone made meanwhile is a
  // conflict the person sees and settles, never an update silently lost. ----
  var PREVIEW_BYTES = 512 * 1024, PREVIEW_LINES = 20000, EDIT_BYTES = 1024 * 1024;
  var VIEWABLE = ["text", "code", "image", "audio", "video", "pdf"];
  var canEdit = body.hasAttribute("data-edit");
  // What the dialog shows: { name, url, kind, editing } or null.
  var viewing = null;

  function kindOf(tr) {
    for (var i = 0; i < VIEWABLE.length; i++) {
      if (tr.classList.contains("k-" + VIEWABLE[i])) return VIEWABLE[i];
    }
    return null;
  }
  function rowUrl(tr) {
    return new URL(tr.querySelector("td.name a").getAttribute("href"), location.href).href;
  }
  // The images the list shows now (the filter hides some), in the list's order.
  function imageRows() {
    return Array.prototype.filter.call(
      document.querySelectorAll("#list tbody tr.k-image[data-name]"),
      function (tr) { return !tr.hidden; });
  }
  function unsaved() {
    return viewing && viewing.editing && viewing.editing.area.value !== viewing.editing.saved;
  }
  function mayLeave() {
    return !unsaved() || window.confirm("Discard your changes to " + viewing.name + "?");
  }

  function previewDialog() {
    var dlg = $("preview");
    if (dlg) return dlg;
    dlg = el("dialog", "card preview");
    dlg.id = "preview";
    dlg.setAttribute("aria-labelledby", "pv-h");
    var head = el("div", "pv-head"), h = el("h2", "", "");
    h.id = "pv-h";
    var prev = el("button", "quiet", "Previous"), next = el("button", "quiet", "Next");
    var edit = el("button", "quiet", "Edit"), close = el("button", "quiet", "Close");
    var open = el("a", "", "Open"), dl = el("a", "", "Download");
    prev.id = "pv-prev";
    next.id = "pv-next";
    edit.id = "pv-edit";
    open.id = "pv-open";
    dl.id = "pv-dl";
    dl.setAttribute("download", "");
    [prev, next, edit, close].forEach(function (b) { b.type = "button"; });
    prev.setAttribute("aria-label", "Previous image");
    next.setAttribute("aria-label", "Next image");
    prev.addEventListener("click", function () { turn(-1); });
    next.addEventListener("click", function () { turn(1); });
    edit.addEventListener("click", startEdit);
    close.addEventListener("click", function () { if (mayLeave()) dlg.close(); });
    [h, prev, next, edit, open, dl, close].forEach(function (e) { head.appendChild(e); });
    var note = el("p", "note");
    note.id = "pv-note";
    note.setAttribute("aria-live", "polite");
    var view = el("div", "pv-view");
    view.id = "pv-view";
    [head, note, view].forEach(function (e) { dlg.appendChild(e); });
    dlg.addEventListener("click", function (e) { if (e.target === dlg && mayLeave()) dlg.close(); });
    // Escape asks first when an edit is not saved.
    dlg.addEventListener("cancel", function (e) { if (!mayLeave()) e.preventDefault(); });
    // Emptied on close: a playing file stops, and nothing of it stays in the page.
    dlg.addEventListener("close", function () { $("pv-view").textContent = ""; viewing = null; });
    dlg.addEventListener("keydown", function (e) {
      if (!viewing || viewing.kind !== "image") return;
      if (e.key === "ArrowLeft") { e.preventDefault(); turn(-1); }
      if (e.key === "ArrowRight") { e.preventDefault(); turn(1); }
    });
    document.body.appendChild(dlg);
    return dlg;
  }

  function say(text, bad) {
    var note = $("pv-note");
    note.textContent = text;
    note.classList.toggle("bad", !!bad);
  }

  function show(tr) {
    var dlg = previewDialog(), kind = kindOf(tr), name = tr.dataset.name, url = rowUrl(tr);
    var v = viewing = { name: name, url: url, kind: kind, editing: null };
    var view = $("pv-view");
    $("pv-h").textContent = name;
    $("pv-open").href = url;
    $("pv-open").setAttribute("aria-label", "Open " + name);
    $("pv-dl").href = url;
    $("pv-dl").setAttribute("aria-label", "Download " + name);
    view.textContent = "";
    say("");
    var images = kind === "image" ? imageRows() : [];
    $("pv-prev").hidden = $("pv-next").hidden = images.length < 2;
    $("pv-edit").hidden = !(canEdit && (kind === "text" || kind === "code"));
    if (!dlg.open) dlg.showModal();
    if (kind === "image") {
      var img = el("img", "pv-media");
      img.alt = name;
      img.addEventListener("error", function () {
        if (viewing === v) say("Cannot show " + name + ": the browser cannot read this image", true);
      });
      img.src = url;
      view.appendChild(img);
      if (images.length > 1) say((images.indexOf(tr) + 1) + " of " + images.length + " images");
    } else if (kind === "audio" || kind === "video") {
      var media = el(kind, "pv-media");
      media.controls = true;
      media.preload = "metadata";
      media.setAttribute("aria-label", name);
      media.addEventListener("error", function () {
        if (viewing === v) say("This browser cannot play " + name + ": download it to play it elsewhere", true);
      });
      media.src = url;
      view.appendChild(media);
    } else if (kind === "pdf") {
      var frame = el("iframe", "pv-pdf");
      frame.title = "Content of " + name;
      frame.src = url;
      view.appendChild(frame);
    } else {
      showText(v);
    }
  }

  // The next (+1) or previous (-1) image of the list, around the ends.
  function turn(by) {
    if (!viewing || viewing.kind !== "image") return;
    var images = imageRows(), name = viewing.name, at = 0;
    images.forEach(function (tr, i) { if (tr.dataset.name === name) at = i; });
    if (images.length > 1) show(images[(at + by + images.length) % images.length]);
  }

  function showText(v) {
    var pre = el("pre", "code");
    pre.id = "pv-body";
    pre.tabIndex = 0;
    pre.setAttribute("aria-label", "Content of " + v.name);
    $("pv-view").appendChild(pre);
    say("Loading…");
    fetch(v.url, { headers: { Range: "bytes=0-" + (PREVIEW_BYTES - 1) }, credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error(explain(r.status, t)); });
        var total = /\/(\d+)$/.exec(r.headers.get("Content-Range") || "");
        return r.text().then(function (text) {
          return { text: text, cut: r.status === 206 && total && Number(total[1]) > PREVIEW_BYTES,
            total: total ? Number(total[1]) : text.length };
        });
      })
      .then(function (got) {
        if (viewing !== v) return;
        var lines = got.text.split("\n");
        if (lines.length && lines[lines.length - 1] === "") lines.pop();
        // A cut file's last line may end inside a character: leave it out.
        if (got.cut) lines.pop();
        var cut = got.cut || lines.length > PREVIEW_LINES;
        lines = lines.slice(0, PREVIEW_LINES);
        var frag = document.createDocumentFragment();
        lines.forEach(function (line) { frag.appendChild(el("span", "l", line.replace(/\r$/, "") + "\n")); });
        pre.appendChild(frag);
        say(plural(lines.length, "line") +
          (cut ? ", the first of " + human(got.total) + ": open the file for all of it" : ""));
      }, function (e) { if (viewing === v) say("Cannot show " + v.name + ": " + e.message, true); });
  }

  // The file as stored, with its version tag: a range is always served uncoded, so its
  // tag is the stored file's own (a compressed answer's tag names the compressed form,
  // which a write's If-Match would not match). An empty file has no range to give.
  function stored(url, bytes) {
    var get = function (headers) {
      return fetch(url, { headers: headers, cache: "no-store", credentials: "same-origin" });
    };
    return get({ Range: "bytes=0-" + (bytes - 1) }).then(function (r) {
      return r.status === 416 ? get({}) : r;
    });
  }

  function startEdit() {
    var v = viewing;
    if (!v || !mayLeave()) return;
    $("pv-edit").hidden = true;
    say("Loading " + v.name + " for editing…");
    stored(v.url, EDIT_BYTES)
      .then(function (r) {
        if (!r.ok) return r.text().then(function (t) { throw new Error(explain(r.status, t)); });
        var total = /\/(\d+)$/.exec(r.headers.get("Content-Range") || "");
        if (r.status === 206 && total && Number(total[1]) > EDIT_BYTES) {
          throw new Error("it is larger than " + human(EDIT_BYTES) + ", too large to edit here");
        }
        var tag = r.headers.get("ETag");
        if (!tag) throw new Error("the server gave no version of it, so saving could undo someone's edit");
        return r.arrayBuffer().then(function (buf) {
          try {
            return { text: new TextDecoder("utf-8", { fatal: true }).decode(buf), tag: tag };
          } catch (e) {
            throw new Error("it is not UTF-8 text");
          }
        });
      })
      .then(function (got) { if (viewing === v) editor(v, got.text, got.tag); },
        function (e) {
          if (viewing !== v) return;
          $("pv-edit").hidden = false;
          say("Cannot edit " + v.name + ": " + e.message, true);
        });
  }

  function editor(v, text, tag) {
    var view = $("pv-view");
    // A file written with CRLF throughout keeps it; a text box hands back LF only.
    var crlf = text.indexOf("\r\n") >= 0 && !/(^|[^\r])\n/.test(text);
    view.textContent = "";
    var area = el("textarea", "pv-text");
    area.id = "pv-text";
    area.spellcheck = false;
    area.setAttribute("aria-label", "Text of " + v.name);
    area.value = text;
    var bar = el("div", "pv-actions");
    var save = el("button", "", "Save"), cancel = el("button", "quiet", "Cancel");
    var over = el("button", "bad", "Save over theirs"), theirs = el("button", "quiet", "Load theirs");
    save.id = "pv-save";
    over.id = "pv-over";
    theirs.id = "pv-theirs";
    [save, cancel, over, theirs].forEach(function (b) { b.type = "button"; bar.appendChild(b); });
    over.hidden = theirs.hidden = true;
    view.appendChild(area);
    view.appendChild(bar);
    v.editing = { area: area, saved: area.value, tag: tag, crlf: crlf };
    save.addEventListener("click", function () { saveText(v, v.editing.tag); });
    over.addEventListener("click", function () { overwrite(v); });
    theirs.addEventListener("click", function () {
      if (!mayLeave()) return;
      v.editing = null;
      startEdit();
    });
    cancel.addEventListener("click", function () {
      if (!mayLeave()) return;
      v.editing = null;
      $("pv-edit").hidden = false;
      view.textContent = "";
      showText(v);
    });
    say("Editing" + (crlf ? " (Windows line endings are kept)" : ""));
    area.focus();
  }

  function conflicted(v, yes) {
    $("pv-over").hidden = $("pv-theirs").hidden = !yes;
    if (yes) {
      say("Not saved: someone changed or removed " + v.name + " after you opened it. " +
        "Your text is still here: save it over theirs, or load theirs instead of yours.", true);
    }
  }

  // PUT with If-Match `tag` (or, for a file someone removed, If-None-Match: *).
  function saveText(v, tag) {
    var ed = v.editing, text = ed.area.value;
    var sent = ed.crlf ? text.replace(/\r?\n/g, "\r\n") : text;
    var headers = { "Content-Type": "text/plain; charset=utf-8" };
    if (tag) headers["If-Match"] = tag; else headers["If-None-Match"] = "*";
    $("pv-save").disabled = true;
    say("Saving…");
    return fetch(v.url, { method: "PUT", headers: headers, body: sent, credentials: "same-origin" })
      .then(function (r) {
        if (r.ok) {
          ed.saved = text;
          ed.tag = r.headers.get("ETag");
          conflicted(v, false);
          var at = new Date();
          say("Saved " + human(new Blob([sent]).size) + " at " + pad(at.getHours()) + ":" +
            pad(at.getMinutes()) + ":" + pad(at.getSeconds()));
          refreshList();
          return;
        }
        return r.text().then(function (t) {
          if (r.status === 412) conflicted(v, true);
          else say("Not saved: " + explain(r.status, t), true);
        });
      }, function () { say("Not saved: " + explain(0, ""), true); })
      .then(function () { if ($("pv-save")) $("pv-save").disabled = false; });
  }

  // The person chose their text over a change made meanwhile: saved against the version
  // there now, so a third change made since this look is still caught.
  function overwrite(v) {
    stored(v.url, 1).then(function (r) {
      if (r.status === 404) return saveText(v, null);
      if (!r.ok || !r.headers.get("ETag")) {
        return r.text().then(function (t) { say("Not saved: " + explain(r.status, t), true); });
      }
      return saveText(v, r.headers.get("ETag"));
    }, function () { say("Not saved: " + explain(0, ""), true); });
  }

  function previewButton(tr) {
    var cell = tr.querySelector("td.name");
    if (!cell || cell.querySelector("button.pv")) return;
    var b = el("button", "quiet pv", "Preview");
    b.type = "button";
    b.setAttribute("aria-label", "Preview " + tr.dataset.name);
    b.addEventListener("click", function () { if (mayLeave()) show(tr); });
    cell.appendChild(b);
  }

  function decorate() {
    localTimes(document);
    if (!$("list")) return;
    document.querySelectorAll(VIEWABLE.map(function (k) {
      return "#list tbody tr.k-" + k + "[data-name]";
    }).join(", ")).forEach(previewButton);
    if (body.hasAttribute("data-dav")) {
      var head = document.querySelector("#list thead tr");
      if (head && !head.querySelector(".act")) {
        var th = el("th", "act", "Actions");
        th.scope = "col";
        head.appendChild(th);
      }
      document.querySelectorAll("#list tbody tr[data-name]").forEach(rowActions);
      var up = document.querySelector("#list tr.k-up");
      if (up && !up.querySelector(".act")) up.appendChild(el("td", "act"));
    }
    applyFilter();
  }
  decorate();

  // Uploads need the upload form; search results have none.
  var form = $("up-form");
  if (!body.hasAttribute("data-upload") || !form) return;

  // ---- Uploads: each file in chunks through the resumable PUT. ----
  var queue = $("queue"), overall = $("overall");
  var allBar = $("up-all"), allText = $("up-all-t");
  // The jobs of the current batch (a batch starts when files are added to an idle queue).
  var jobs = [], running = 0, madeDirs = {}, batchStart = 0;

  // The batch in numbers: bytes held by the server of the files not failed, of all their
  // sizes; a failed file counts in the total but never as done, so the bar cannot fill.
  function updateOverall() {
    var total = 0, done = 0, left = 0, ok = 0, failed = 0, fresh = 0;
    jobs.forEach(function (j) {
      if (j.state === "cancelled") return;
      total += j.file.size;
      if (j.state === "failed") { failed++; return; }
      done += j.sent;
      fresh += j.sent - j.resumedAt;
      if (j.state === "done") ok++; else left++;
    });
    overall.hidden = false;
    overall.classList.toggle("failed", failed > 0);
    allBar.max = Math.max(total, 1);
    allBar.value = total === 0 && left === 0 && failed === 0 ? 1 : done;
    var text = human(done) + " of " + human(total);
    if (left) {
      var secs = (Date.now() - batchStart) / 1000, rate = secs > 1 ? fresh / secs : 0;
      if (rate > 0) {
        text += " · " + human(Math.round(rate)) + "/s · about " +
          Math.max(1, Math.round((total - done) / rate)) + " s left";
      }
    } else if (failed) {
      text += " — stopped: " + plural(failed, "file") + " not uploaded, " + ok + " uploaded";
    } else {
      text += " — finished";
    }
    allText.textContent = text;
  }

  function setState(job, state, text) {
    job.state = state;
    job.li.className = state;
    job.status.textContent = text;
    job.cancel.hidden = state === "done" || state === "failed" || state === "cancelled";
    job.retry.hidden = state !== "failed";
    updateOverall();
  }

  function addJob(file, rel) {
    var li = el("li"), what = el("span", "what", rel), bar = el("progress");
    var status = el("span", "state", "waiting"), cancel = el("button", "quiet", "Cancel");
    var retry = el("button", "quiet", "Retry");
    bar.max = Math.max(file.size, 1);
    bar.value = 0;
    bar.setAttribute("aria-label", rel);
    cancel.type = "button";
    cancel.setAttribute("aria-label", "Cancel " + rel);
    retry.type = "button";
    retry.hidden = true;
    retry.setAttribute("aria-label", "Retry " + rel);
    var job = { file: file, rel: rel, li: li, bar: bar, status: status, cancel: cancel, retry: retry,
      sent: 0, held: 0, resumedAt: 0, state: "waiting", xhr: null };
    cancel.addEventListener("click", function () {
      if (job.xhr) job.xhr.abort();
      setState(job, "cancelled", "cancelled");
      pump();
    });
    retry.addEventListener("click", function () {
      if (!busy()) startBatch();
      earlier = earlier.filter(function (j) { return j !== job; });
      if (jobs.indexOf(job) < 0) jobs.push(job);
      job.sent = 0;
      job.held = 0;
      job.resumedAt = 0;
      job.bar.value = 0;
      setState(job, "waiting", "waiting");
      pump();
    });
    // The same file picked again replaces its failed or cancelled row.
    function stale(old) {
      return old.rel === rel && (old.state === "failed" || old.state === "cancelled");
    }
    jobs.concat(earlier).filter(stale).forEach(function (old) { old.li.remove(); });
    jobs = jobs.filter(function (j) { return !stale(j); });
    earlier = earlier.filter(function (j) { return !stale(j); });
    var row = el("div");
    row.appendChild(what);
    li.appendChild(row);
    li.appendChild(cancel);
    li.appendChild(retry);
    li.appendChild(bar);
    li.appendChild(status);
    queue.appendChild(li);
    jobs.push(job);
  }

  // One PUT; resolves with the response status and the held byte count (from `Range`).
  function put(job, headers, blob) {
    return new Promise(function (resolve, reject) {
      var x = new XMLHttpRequest();
      job.xhr = x;
      x.open("PUT", dir + encodePath(job.rel));
      Object.keys(headers).forEach(function (k) { x.setRequestHeader(k, headers[k]); });
      var base = job.sent;
      x.upload.onprogress = function (e) {
        if (!blob) return;
        job.sent = base + e.loaded;
        job.bar.value = job.sent;
        updateOverall();
      };
      x.onload = function () {
        job.xhr = null;
        var range = /bytes=0-(\d+)/.exec(x.getResponseHeader("Range") || "");
        if (x.status === 308) resolve({ status: 308, have: range ? Number(range[1]) + 1 : 0 });
        else if (x.status >= 200 && x.status < 300) resolve({ status: x.status, have: job.file.size });
        else reject(new Error(explain(x.status, x.responseText)));
      };
      x.onerror = function () { job.xhr = null; reject(new Error("the connection to the server failed")); };
      x.onabort = function () { job.xhr = null; reject(new Error("cancelled")); };
      x.send(blob || null);
    });
  }

  function ensureDirs(rel) {
    var parts = rel.split("/").slice(0, -1), chain = Promise.resolve(), path = "";
    parts.forEach(function (p) {
      path += p + "/";
      var url = dir + encodePath(path.slice(0, -1)) + "/";
      if (!madeDirs[url]) {
        madeDirs[url] = chain.then(function () {
          return fetch(url, { method: "MKCOL", credentials: "same-origin" }).then(function (r) {
            // 405: it exists already, which is what we want.
            if (!r.ok && r.status !== 405) {
              return r.text().then(function (t) {
                throw new Error("cannot create the folder " + path + ": " + explain(r.status, t));
              });
            }
          });
        });
      }
      chain = madeDirs[url];
    });
    return chain;
  }

  function run(job) {
    var size = job.file.size;
    setState(job, "running", "starting");
    return ensureDirs(job.rel).then(function () {
      if (size === 0) return put(job, {}, new Blob([]));
      // Ask how much of this file the server already holds, then send the rest.
      return put(job, { "Content-Range": "bytes */" + size }, null).then(function step(r) {
        if (job.state === "cancelled") throw new Error("cancelled");
        if (r.status !== 308) return r;
        if (job.sent === 0 && r.have > 0) {
          job.status.textContent = "resuming at " + human(r.have);
          job.resumedAt = r.have;
        } else job.status.textContent = "uploading";
        job.sent = r.have;
        job.held = r.have;
        job.bar.value = r.have;
        var end = Math.min(r.have + CHUNK, size);
        return put(job, { "Content-Range": "bytes " + r.have + "-" + (end - 1) + "/" + size },
          job.file.slice(r.have, end)).then(step);
      });
    }).then(function () {
      job.sent = size;
      job.bar.value = job.bar.max;
      setState(job, "done", "done");
    }, function (e) {
      if (job.state === "cancelled") return;
      // The bar shows what the server holds, not what was sent and then refused.
      job.bar.value = job.held;
      setState(job, "failed", "Not uploaded: " + e.message);
    });
  }

  function pump() {
    while (running < PARALLEL) {
      var next = jobs.filter(function (j) { return j.state === "waiting"; })[0];
      if (!next) break;
      running++;
      run(next).then(function () {
        running--;
        if (running === 0 && !jobs.some(function (j) { return j.state === "waiting"; })) refreshList();
        pump();
      });
    }
  }

  function busy() {
    return jobs.some(function (j) { return j.state === "waiting" || j.state === "running"; });
  }
  // Earlier rows stay on screen (a failed one with its Retry), but a new batch counts
  // only its own files, and a file retried joins the batch running then.
  var earlier = [];
  function startBatch() {
    earlier = earlier.concat(jobs);
    jobs = [];
    batchStart = Date.now();
  }

  function enqueue(items) {
    $("msg").textContent = "";
    if (!busy()) startBatch();
    items.forEach(function (it) { addJob(it.file, it.rel); });
    updateOverall();
    pump();
  }

  function fromInput(input) {
    var items = Array.prototype.map.call(input.files, function (f) {
      return { file: f, rel: f.webkitRelativePath || f.name };
    });
    input.value = "";
    enqueue(items);
  }

  var files = $("up-files"), dirInput = $("up-dir");
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (files.files.length) fromInput(files);
  });
  // With the script, choosing is enough: the upload starts at once.
  files.addEventListener("change", function () { fromInput(files); });
  $("up-go").hidden = true;
  if (dirInput && "webkitdirectory" in dirInput) {
    $("up-dir-l").hidden = false;
    dirInput.addEventListener("change", function () { fromInput(dirInput); });
  }

  // Drag and drop, folders included.
  var drop = $("drop");
  drop.hidden = false;
  function walk(entry, prefix, out) {
    if (entry.isFile) {
      return new Promise(function (res) {
        entry.file(function (f) { out.push({ file: f, rel: prefix + f.name }); res(); }, function () { res(); });
      });
    }
    if (!entry.isDirectory) return Promise.resolve();
    var reader = entry.createReader(), all = [];
    return new Promise(function (res) {
      (function more() {
        reader.readEntries(function (batch) {
          if (!batch.length) {
            res(Promise.all(all.map(function (c) { return walk(c, prefix + entry.name + "/", out); })));
          } else { all = all.concat(Array.prototype.slice.call(batch)); more(); }
        }, function () { res(); });
      })();
    });
  }
  ["dragenter", "dragover"].forEach(function (t) {
    document.addEventListener(t, function (e) { e.preventDefault(); drop.classList.add("over"); });
  });
  ["dragleave", "drop"].forEach(function (t) {
    document.addEventListener(t, function () { drop.classList.remove("over"); });
  });
  document.addEventListener("drop", function (e) {
    e.preventDefault();
    var dt = e.dataTransfer, out = [];
    var entries = Array.prototype.map.call(dt.items || [], function (i) {
      return i.webkitGetAsEntry ? i.webkitGetAsEntry() : null;
    }).filter(Boolean);
    if (!entries.length) {
      enqueue(Array.prototype.map.call(dt.files, function (f) { return { file: f, rel: f.name }; }));
      return;
    }
    Promise.all(entries.map(function (en) { return walk(en, "", out); })).then(function () { enqueue(out); });
  });

  // New folder.
  var mk = $("mkdir");
  mk.hidden = false;
  mk.addEventListener("submit", function (e) {
    e.preventDefault();
    var input = $("mkdir-n"), name = input.value;
    if (!name || name.indexOf("/") >= 0) { showError("A folder name cannot be empty or contain /"); return; }
    request("MKCOL", dir + encodeURIComponent(name) + "/").then(function () {
      input.value = "";
      return refreshList();
    }, function (err) { showError("Cannot create " + name + ": " + err.message); });
  });
})();
