// Live app instance state over the project's WebSocket (apps/runtime/consumers.py).
//
// The same approach as allocations-live.js. A root element marked
// data-instances-live names the socket (data-ws-url, a same-origin path) and
// holds instance views: elements with data-instance-id whose [data-field="state"]
// badges are updated in place from each message {"instance_id", "state"} (text,
// and tone class from data-tones). What the message does not carry (the events
// timeline, endpoints, actions, a new row) is re-rendered by the server: the
// root's data-refresh element is fetched again with htmx from its
// data-refresh-url, on every message about a shown instance
// (data-refresh-on="any", the detail page), or when a state changes or an
// unknown instance appears (data-refresh-on="state", the list). The server
// applies instance visibility to what it renders: the socket carries ids and
// states only.
//
// The socket reconnects with exponential backoff and jitter; after a reconnect
// (or on first open when something is in flight) the views are refreshed, since
// messages sent while the socket was closed are lost. No inline styles (CSP).
(function () {
  "use strict";

  var BACKOFF_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  var REFRESH_DELAY_MS = 250;
  var ID = /^[0-9a-f-]{36}$/;
  var STATE = /^[a-z_]{1,32}$/;

  var sockets = {}; // ws path -> {ws, attempts, opened, timer, stopped, known: {instance id: last state}}
  var refreshes = {}; // refresh target selector -> {timer, running, again}

  function socketUrl(path) {
    return (window.location.protocol === "https:" ? "wss://" : "ws://") + window.location.host + path;
  }

  function roots() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-instances-live]"));
  }

  function rootsFor(path) {
    return roots().filter(function (root) {
      return root.getAttribute("data-ws-url") === path;
    });
  }

  function setStatus(path, state, text) {
    rootsFor(path).forEach(function (root) {
      // The indicator may sit outside the root (the page header).
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
    roots().forEach(function (root) {
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
        // Something may have moved between the page's render and the socket's open.
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
      if (message && ID.test(String(message.instance_id)) && STATE.test(String(message.state))) {
        apply(path, message);
      }
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
    var previous = known[message.instance_id];
    known[message.instance_id] = message.state;
    rootsFor(path).forEach(function (root) {
      var views = Array.prototype.slice.call(root.querySelectorAll('[data-instance-id="' + message.instance_id + '"]'));
      if (root.getAttribute("data-instance-id") === message.instance_id) views.unshift(root);
      var stateChanged = false;
      views.forEach(function (view) {
        if (view.getAttribute("data-state") !== message.state) stateChanged = true;
        update(view, message.state, tones(root)[message.state] || "muted");
      });
      var on = root.getAttribute("data-refresh-on");
      if (on === "any" && views.length) {
        scheduleRefresh(root, REFRESH_DELAY_MS);
      } else if (on === "state" && (stateChanged || (!views.length && previous !== message.state))) {
        // A state change may move the row out of the filter or change the counts; an
        // instance not shown is new, on another page, filtered out or not visible to
        // this user: the server decides what the refreshed table shows.
        scheduleRefresh(root, REFRESH_DELAY_MS);
      }
    });
  }

  function update(view, state, tone) {
    view.setAttribute("data-state", state);
    var badges = view.querySelectorAll('[data-field="state"]');
    Array.prototype.forEach.call(badges, function (badge) {
      badge.textContent = state;
      var cls = (badge.getAttribute("class") || "").replace(/\bbadge-(ok|info|warn|bad|muted)\b/g, "").trim();
      badge.setAttribute("class", cls + " badge-" + tone);
    });
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
    // Filters and pages swap content in with htmx: open or close sockets to match.
    document.body.addEventListener("htmx:afterSettle", scan);
    // Back to a pushed filter: htmx restores a snapshot, which may be stale.
    document.body.addEventListener("htmx:historyRestore", function () {
      scan();
      roots().forEach(function (root) {
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
