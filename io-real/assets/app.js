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

  // Times in the reader's zone; the exact UTC value stays in the title.
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      t.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
        " " + pad(d.getHours()) + ":" + pad(d.getMinutes());
    });
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
    var e = $("up-err");
    if (e) e.textContent = text; else window.alert(text);
  }

  function request(method, url, headers) {
    return fetch(url, { method: method, headers: headers || {}, credentials: "same-origin" })
      .then(function (r) {
        if (r.ok) return r;
        return r.text().then(function (t) { throw new Error(t.trim() || r.status + " " + r.statusText); });
      });
  }

  // Rename, move, delete (WebDAV), with confirmation.
  function rowActions(tr) {
    if (!body.hasAttribute("data-dav") || tr.querySelector("td.act")) return;
    var name = tr.dataset.name;
    var isDir = tr.classList.contains("k-dir");
    var href = tr.querySelector("td.name a").getAttribute("href");
    var src = new URL(href, location.href).href;
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
        .then(refreshList, function (e) { showError("Cannot move " + name + ": " + e.message); });
    }
    button("Rename", function () {
      var to = window.prompt("New name for " + name, name);
      if (!to || to === name) return;
      if (to.indexOf("/") >= 0) { showError("A name cannot contain /"); return; }
      move(dir + encodeURIComponent(to) + (isDir ? "/" : ""));
    });
    button("Move", function () {
      var to = window.prompt("Move " + name + " to folder (path from the top, e.g. /a/b/)", dir);
      if (!to) return;
      if (to.charAt(0) !== "/") to = "/" + to;
      if (to.charAt(to.length - 1) !== "/") to += "/";
      move(encodePath(to.slice(0, -1)) + "/" + encodeURIComponent(name) + (isDir ? "/" : ""));
    });
    button("Delete", function () {
      var what = isDir ? "the folder " + name + " and everything in it" : name;
      if (!window.confirm("Delete " + what + "?")) return;
      request("DELETE", src).then(refreshList, function (e) { showError("Cannot delete " + name + ": " + e.message); });
    });
    tr.appendChild(td);
  }

  function decorate() {
    localTimes(document);
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

  if (!body.hasAttribute("data-upload")) return;

  // ---- Uploads: each file in chunks through the resumable PUT. ----
  var form = $("up-form"), queue = $("queue"), overall = $("overall");
  var allBar = $("up-all"), allText = $("up-all-t");
  var jobs = [], running = 0, madeDirs = {};

  function updateOverall() {
    var total = 0, done = 0, left = 0;
    jobs.forEach(function (j) {
      if (j.state === "cancelled") return;
      total += j.file.size; done += j.sent;
      if (j.state !== "done" && j.state !== "failed") left++;
    });
    overall.hidden = false;
    allBar.max = Math.max(total, 1);
    allBar.value = total === 0 && left === 0 ? 1 : done;
    allText.textContent = human(done) + " of " + human(total) + (left ? "" : " — finished");
  }

  function setState(job, state, text) {
    job.state = state;
    job.li.className = state;
    job.status.textContent = text;
    job.cancel.hidden = state === "done" || state === "failed" || state === "cancelled";
    updateOverall();
  }

  function addJob(file, rel) {
    var li = el("li"), what = el("span", "what", rel), bar = el("progress");
    var status = el("span", "state", "waiting"), cancel = el("button", "quiet", "Cancel");
    bar.max = Math.max(file.size, 1);
    bar.value = 0;
    bar.setAttribute("aria-label", rel);
    cancel.type = "button";
    cancel.setAttribute("aria-label", "Cancel " + rel);
    var job = { file: file, rel: rel, li: li, bar: bar, status: status, cancel: cancel, sent: 0, state: "waiting", xhr: null };
    cancel.addEventListener("click", function () {
      if (job.xhr) job.xhr.abort();
      setState(job, "cancelled", "cancelled");
      pump();
    });
    var row = el("div");
    row.appendChild(what);
    li.appendChild(row);
    li.appendChild(cancel);
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
        else reject(new Error((x.responseText || "").trim() || x.status + " " + x.statusText));
      };
      x.onerror = function () { job.xhr = null; reject(new Error("network error")); };
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
              return r.text().then(function (t) { throw new Error(t.trim() || "cannot create " + path); });
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
        if (job.sent === 0 && r.have > 0) job.status.textContent = "resuming at " + human(r.have);
        else job.status.textContent = "uploading";
        job.sent = r.have;
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
      if (job.state !== "cancelled") setState(job, "failed", e.message);
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

  function enqueue(items) {
    $("up-err").textContent = "";
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
