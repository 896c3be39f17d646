// An instance's Logs tab (templates/portal/partials/instance_logs.html), tailed live.
//
// The root [data-logs] names the instance's log socket (data-ws-url) and the API that
// serves its lines (data-lines-url), and the id of the newest line the page already
// shows (data-after). The socket says only "the newest line is now N"
// (apps/runtime/consumers.py); the lines after the last one shown are then read from
// the API, which applies who may see the instance, page by page. On every (re)connect
// the tab reads what it missed. Lines are added as text, never as markup, and only
// the newest MAX_LINES stay in the page (the download has every kept line).
(function () {
  "use strict";
  if (window.gpuaasLogs) return;

  var MAX_LINES = 5000;
  var PAGE_SIZE = 500;
  var current = null;

  function setStatus(tail, state, text) {
    var status = tail.root.querySelector("[data-logs-status]");
    if (!status) return;
    status.setAttribute("data-state", state);
    status.textContent = text;
  }

  function follow(root) {
    var tail = {
      root: root,
      view: root.querySelector("[data-logs-view]"),
      after: Number(root.getAttribute("data-after")) || 0,
      stopped: false,
      reading: false,
      again: false,
    };
    tail.socket = window.gpuaasSocket.open(root.getAttribute("data-ws-url"), {
      status: function (state, text) {
        setStatus(tail, state, text);
      },
      open: function () {
        read(tail); // whatever arrived while the socket was not open
      },
      message: function (message) {
        if (Number(message.newest) > tail.after) read(tail);
      },
    });
    return tail;
  }

  function stop(tail) {
    tail.stopped = true;
    tail.socket.stop();
  }

  // One read at a time; a message during a read asks for one more after it.
  function read(tail) {
    if (tail.reading) {
      tail.again = true;
      return;
    }
    tail.reading = true;
    var url = tail.root.getAttribute("data-lines-url") + "?after=" + tail.after + "&page_size=" + PAGE_SIZE;
    page(tail, url);
  }

  function page(tail, url) {
    window
      .fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (body) {
        if (tail.stopped) return;
        append(tail, body.results || []);
        // Follow the API's own next page only on this origin.
        if (body.next && new URL(body.next, window.location.href).origin === window.location.origin) {
          page(tail, body.next);
        } else {
          done(tail);
        }
      })
      .catch(function () {
        done(tail);
      });
  }

  function done(tail) {
    tail.reading = false;
    if (tail.again && !tail.stopped) {
      tail.again = false;
      read(tail);
    }
  }

  function append(tail, lines) {
    if (!lines.length) return;
    var view = tail.view;
    var atBottom = view.scrollHeight - view.scrollTop - view.clientHeight < 24;
    lines.forEach(function (line) {
      if (!(line.id > tail.after)) return; // already shown
      tail.after = line.id;
      var row = document.createElement("div");
      row.className = line.dropped ? "log-line log-dropped" : "log-line";
      row.setAttribute("data-line-id", String(line.id));
      row.textContent = line.dropped ? line.dropped.toLocaleString("en-US") + " lines dropped" : line.text;
      view.appendChild(row);
    });
    while (view.childElementCount > MAX_LINES) view.removeChild(view.firstElementChild);
    tail.root.setAttribute("data-after", String(tail.after));
    var empty = tail.root.querySelector("[data-logs-empty]");
    if (empty) empty.hidden = true;
    // Keep following the newest line, unless the reader scrolled up to read.
    if (atBottom) view.scrollTop = view.scrollHeight;
  }

  // A live refresh of the instance's page swaps the tab's part anew: follow the new one.
  function scan() {
    var root = document.querySelector("[data-logs]");
    if (current && current.root === root) return;
    if (current) stop(current);
    current = root ? follow(root) : null;
    if (current) current.view.scrollTop = current.view.scrollHeight;
  }

  function start() {
    window.gpuaasLogs = { scan: scan };
    scan();
    document.body.addEventListener("htmx:afterSettle", scan);
    window.addEventListener("pagehide", function () {
      if (current) stop(current);
      current = null;
    });
    window.addEventListener("pageshow", function (event) {
      if (event.persisted) scan();
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
