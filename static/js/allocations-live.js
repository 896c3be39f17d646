// Live allocation status over the project's WebSocket (apps/allocations/consumers.py).
//
// A root element marked data-allocations-live names the socket (data-ws-url, a
// same-origin path) and holds allocation views: elements with data-allocation-id
// whose [data-field] children are updated in place from each message
// {"allocation_id", "state", "step", "progress"}: the state badge (text and
// tone class, from data-tones), the step, the <progress> bar and its text.
// Whatever the message does not carry (the steps timeline, the actions, a new
// row) is re-rendered by the server: the root's data-refresh element is fetched
// again with htmx from its data-refresh-url, on every change (data-refresh-on="any",
// the detail page) or when a state changes or an unknown allocation appears
// (data-refresh-on="state", the list).
//
// The socket reconnects with exponential backoff and jitter; after a reconnect
// (or on first open when something is in flight) the views are refreshed, since
// messages sent while the socket was closed are lost. No inline styles (CSP):
// only text, classes, attributes and the <progress> value change.
(function () {
  "use strict";

  var BACKOFF_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  var REFRESH_DELAY_MS = 250;
  var ID = /^[0-9a-f-]{36}$/;

  var sockets = {}; // ws path -> {ws, attempts, opened, timer, stopped, known: {allocation id: last state}}
  var refreshes = {}; // refresh target selector -> {timer, running, again}

  function socketUrl(path) {
    return (window.location.protocol === "https:" ? "wss://" : "ws://") + window.location.host + path;
  }

  function rootsFor(path) {
    return Array.prototype.filter.call(document.querySelectorAll("[data-allocations-live]"), function (root) {
      return root.getAttribute("data-ws-url") === path;
    });
  }

  function setStatus(path, state, text) {
    rootsFor(path).forEach(function (root) {
      // The indicator may sit outside the root (the detail page's header).
      var scope = root.closest("main") || document;
      Array.prototype.forEach.call(scope.querySelectorAll("[data-live-status]"), function (status) {
        status.setAttribute("data-state", state);
        status.textContent = text;
        status.title = state === "live" ? "Changes appear as they happen." : "Live updates are paused; retrying.";
      });
    });
  }

  // --- the socket ------------------------------------------------------------

  function scan() {
    var wanted = {};
    Array.prototype.forEach.call(document.querySelectorAll("[data-allocations-live]"), function (root) {
      var path = root.getAttribute("data-ws-url");
      if (path && path.charAt(0) === "/") wanted[path] = true;
    });
    Object.keys(wanted).forEach(function (path) {
      if (!sockets[path]) connect(path);
      else if (sockets[path].opened && sockets[path].ws.readyState === 1) setStatus(path, "live", "Live");
    });
    Object.keys(sockets).forEach(function (path) {
      if (!wanted[path]) stop(path);
    });
  }

  function connect(path) {
    var entry = sockets[path] || (sockets[path] = { attempts: 0, opened: false, stopped: false, known: {} });
    entry.timer = null;
    setStatus(path, entry.opened ? "reconnecting" : "connecting", entry.opened ? "Reconnecting\u2026" : "Connecting\u2026");
    var ws;
    try {
      ws = new WebSocket(socketUrl(path));
    } catch (error) {
      retry(path, entry);
      return;
    }
    entry.ws = ws;
    ws.addEventListener("open", function () {
      var reconnected = entry.opened;
      entry.opened = true;
      entry.attempts = 0;
      setStatus(path, "live", "Live");
      rootsFor(path).forEach(function (root) {
        if (reconnected || root.querySelector("[data-inflight]")) scheduleRefresh(root, 0);
      });
    });
    ws.addEventListener("message", function (event) {
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (message && ID.test(String(message.allocation_id))) apply(path, message);
    });
    ws.addEventListener("close", function () {
      if (entry.stopped || sockets[path] !== entry) return;
      retry(path, entry);
    });
  }

  function retry(path, entry) {
    setStatus(path, "reconnecting", "Reconnecting\u2026");
    var delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MS * Math.pow(2, entry.attempts));
    entry.attempts += 1;
    // Jitter: many pages reconnecting after a server restart do not arrive at once.
    entry.timer = window.setTimeout(function () {
      if (!entry.stopped) connect(path);
    }, delay * (0.5 + Math.random() / 2));
  }

  function stop(path) {
    var entry = sockets[path];
    delete sockets[path];
    if (!entry) return;
    entry.stopped = true;
    if (entry.timer) window.clearTimeout(entry.timer);
    if (entry.ws && entry.ws.readyState <= 1) entry.ws.close(1000);
  }

  // --- applying a message ----------------------------------------------------

  function tones(root) {
    try {
      return JSON.parse(root.getAttribute("data-tones") || "{}");
    } catch (error) {
      return {};
    }
  }

  function apply(path, message) {
    var entry = sockets[path];
    var known = entry ? entry.known : {};
    var previous = known[message.allocation_id];
    known[message.allocation_id] = message.state;
    rootsFor(path).forEach(function (root) {
      var views = root.querySelectorAll('[data-allocation-id="' + message.allocation_id + '"]');
      if (root.getAttribute("data-allocation-id") === message.allocation_id) {
        views = [root].concat(Array.prototype.slice.call(views));
      }
      var stateChanged = false;
      Array.prototype.forEach.call(views, function (view) {
        if (view.getAttribute("data-state") !== message.state) stateChanged = true;
        update(view, message, tones(root));
      });
      var on = root.getAttribute("data-refresh-on");
      if (on === "any" && views.length) {
        scheduleRefresh(root, REFRESH_DELAY_MS);
      } else if (on === "state" && (stateChanged || (!views.length && previous !== message.state))) {
        // A state change may move the row out of the filter or change the counts; an
        // allocation not shown is new, or on another page, or filtered out: refresh
        // when its state changes, not for each step of its progress.
        scheduleRefresh(root, REFRESH_DELAY_MS);
      }
    });
  }

  function retone(element, prefix, tone) {
    var pattern = new RegExp("\\b" + prefix + "-(ok|info|warn|bad|muted)\\b", "g");
    element.setAttribute("class", (element.getAttribute("class") || "").replace(pattern, "").trim() + " " + prefix + "-" + tone);
  }

  function update(view, message, toneMap) {
    var tone = toneMap[message.state] || "muted";
    view.setAttribute("data-state", message.state);
    each(view, "state", function (badge) {
      badge.textContent = message.state;
      retone(badge, "badge", tone);
    });
    each(view, "step", function (step) {
      step.textContent = message.step || "\u2013";
    });
    var progress = Math.max(0, Math.min(100, Number(message.progress) || 0));
    each(view, "progress", function (bar) {
      bar.value = progress;
      retone(bar, "bar", tone);
      bar.textContent = progress + "%";
    });
    each(view, "progress-text", function (text) {
      text.textContent = progress + "%";
    });
  }

  function each(view, field, fn) {
    Array.prototype.forEach.call(view.querySelectorAll('[data-field="' + field + '"]'), fn);
  }

  // --- re-rendering from the server ------------------------------------------

  function scheduleRefresh(root, delay) {
    var selector = root.getAttribute("data-refresh");
    if (!selector || !window.htmx) return;
    var job = refreshes[selector] || (refreshes[selector] = { timer: null, running: false, again: false });
    if (job.running) {
      job.again = true; // one more after the one in flight: its answer may predate this message
      return;
    }
    if (job.timer) window.clearTimeout(job.timer);
    job.timer = window.setTimeout(function () {
      job.timer = null;
      refresh(root, selector, job);
    }, delay);
  }

  function refresh(root, selector, job) {
    var target = document.querySelector(selector);
    var source = root.hasAttribute("data-refresh-url") ? root : root.querySelector("[data-refresh-url]");
    if (!target || !source || !document.body.contains(root)) return;
    job.running = true;
    var done = function () {
      job.running = false;
      if (job.again) {
        job.again = false;
        scheduleRefresh(root, REFRESH_DELAY_MS);
      }
    };
    window.htmx
      .ajax("GET", source.getAttribute("data-refresh-url"), { target: selector, swap: "innerHTML" })
      .then(done, done);
  }

  // --- wiring ------------------------------------------------------------------

  function start() {
    scan();
    // Tabs and filters swap content in with htmx: open or close sockets to match.
    document.body.addEventListener("htmx:afterSettle", scan);
    // Back to a pushed tab or filter: htmx restores a snapshot, which may be stale.
    document.body.addEventListener("htmx:historyRestore", function () {
      scan();
      Array.prototype.forEach.call(document.querySelectorAll("[data-allocations-live]"), function (root) {
        scheduleRefresh(root, 0);
      });
    });
    window.addEventListener("pagehide", function () {
      Object.keys(sockets).forEach(stop);
    });
    window.addEventListener("pageshow", function (event) {
      if (event.persisted) scan(); // back/forward cache: the sockets were closed
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
