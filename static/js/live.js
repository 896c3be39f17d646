// Live state over a project's WebSocket, for allocations (apps/allocations/consumers.py)
// and app instances (apps/runtime/consumers.py): one mechanism, one call per kind below.
//
// A root element marked data-<kind>s-live names the socket (data-ws-url, a
// same-origin path) and holds views: elements with data-<kind>-id whose
// [data-field] children are updated in place from each message {"<kind>_id",
// "state", and for allocations "step", "progress"}: the state badge (text and
// tone class, from data-tones), the step, the <progress> bar and its text.
// Whatever the message does not carry (timelines, actions, a new row) is
// re-rendered by the server: the root's data-refresh element is fetched again
// with htmx from its data-refresh-url, on every message about a shown item
// (data-refresh-on="any", detail pages) or when a state changes or an unknown
// item appears (data-refresh-on="state", lists). The server applies visibility
// to what it renders: the sockets carry ids and states only.
//
// A state change is never patched in place on a re-rendered view: the view waits
// for the server's snapshot, so its badge and its actions always agree. When that
// snapshot brings a new next step (data-next-step), the page's success messages
// turn into it.
//
// Sockets reconnect (socket.js); after a reconnect (or on first open when
// something is in flight) the views are refreshed, since messages sent while the
// socket was closed are lost. A message with an "event"
// instead of a state ({"allocation_id", "event": "points"}) is handed on as the
// document event "live:<kind>:<event>" (detail: {id, path}) to the script it is
// for (gpu-charts.js). No inline styles (CSP):
// only text, classes, attributes and the <progress> value change.
(function () {
  "use strict";

  var BACKOFF_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  var REFRESH_DELAY_MS = 250;
  var ID = /^[0-9a-f-]{36}$/;
  var EVENT = /^[a-z]{1,32}$/;

  function live(kind, STATE) {
    var ROOTS = "[data-" + kind + "s-live]";
    var ID_ATTRIBUTE = "data-" + kind + "-id";
    var ID_FIELD = kind + "_id";
    var sockets = {}; // ws path -> {socket (socket.js), known: {id: last state}}
    var refreshes = {}; // refresh target selector -> {timer, running, again, during: {id: message}}

    function rootsFor(path) {
      return Array.prototype.filter.call(document.querySelectorAll(ROOTS), function (root) {
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
      Array.prototype.forEach.call(document.querySelectorAll(ROOTS), function (root) {
        var path = root.getAttribute("data-ws-url");
        if (path && path.charAt(0) === "/") wanted[path] = true;
      });
      Object.keys(wanted).forEach(function (path) {
        if (!sockets[path]) connect(path);
        else if (sockets[path].socket.isOpen()) setStatus(path, "live", "Live");
      });
      Object.keys(sockets).forEach(function (path) {
        if (!wanted[path]) stop(path);
      });
    }

    function connect(path) {
      var entry = (sockets[path] = { known: {} });
      entry.socket = window.gpuaasSocket.open(path, {
        status: function (state, text) {
          setStatus(path, state, text);
        },
        open: function (reconnected) {
          rootsFor(path).forEach(function (root) {
            if (reconnected || root.querySelector("[data-inflight]")) scheduleRefresh(root, 0);
          });
        },
        message: function (message) {
          if (!ID.test(String(message[ID_FIELD]))) return;
          if (typeof message.state === "string" && STATE.test(message.state)) {
            apply(path, message);
          } else if (typeof message.event === "string" && EVENT.test(message.event)) {
            // Not a state: news for another script on the page (the charts' new points).
            document.dispatchEvent(new CustomEvent("live:" + kind + ":" + message.event, {
              detail: { id: message[ID_FIELD], path: path }
            }));
          }
        },
      });
    }

    function stop(path) {
      var entry = sockets[path];
      delete sockets[path];
      if (entry) entry.socket.stop();
    }

    // --- applying a message ----------------------------------------------------

    function tones(root) {
      try {
        return JSON.parse(root.getAttribute("data-tones") || "{}");
      } catch (error) {
        return {};
      }
    }

    // The views of item ``id`` in ``root``: the root itself (a detail page) and its rows or tiles.
    function viewsOf(root, id) {
      var views = Array.prototype.slice.call(root.querySelectorAll("[" + ID_ATTRIBUTE + '="' + id + '"]'));
      if (root.getAttribute(ID_ATTRIBUTE) === id) views.unshift(root);
      return views;
    }

    function apply(path, message) {
      var entry = sockets[path];
      var known = entry ? entry.known : {};
      var id = message[ID_FIELD];
      var previous = known[id];
      known[id] = message.state;
      rootsFor(path).forEach(function (root) {
        var views = viewsOf(root, id);
        var stateChanged = false;
        var on = root.getAttribute("data-refresh-on");
        var rerendered = root.hasAttribute("data-refresh") && (on === "any" || on === "state");
        Array.prototype.forEach.call(views, function (view) {
          if (view.getAttribute("data-state") !== message.state) {
            stateChanged = true;
            if (rerendered) {
              // A new state changes more than the badge (actions, notes, timeline): the
              // server re-renders the view from one snapshot, so a badge never sits
              // beside the previous state's buttons. Until then the old state shows whole.
              view.setAttribute("data-state", message.state);
              return;
            }
          }
          update(view, message, tones(root));
        });
        if (on === "any" && views.length) {
          scheduleRefresh(root, REFRESH_DELAY_MS, message);
        } else if (on === "state" && (stateChanged || (!views.length && previous !== message.state))) {
          // A state change may move the row out of the filter or change the counts; an
          // item not shown is new, on another page, filtered out or not visible to this
          // user: refresh when its state changes (the server decides what the table
          // shows), not for each step of its progress.
          scheduleRefresh(root, REFRESH_DELAY_MS, message);
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
      if (!("progress" in message)) return; // instances carry their state only
      each(view, "step", function (step) {
        step.textContent = message.step_label || message.step || "\u2013";
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

    function scheduleRefresh(root, delay, message) {
      var selector = root.getAttribute("data-refresh");
      if (!selector || !window.htmx) return;
      var job =
        refreshes[selector] || (refreshes[selector] = { timer: null, running: false, again: false, during: {} });
      if (job.running) {
        job.again = true; // one more after the one in flight: its answer may predate this message
        if (message) job.during[message[ID_FIELD]] = message;
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
      var before = nextStep(target);
      var done = function () {
        job.running = false;
        if (document.body.contains(root)) reapplyProgress(root, job.during);
        job.during = {};
        var after = nextStep(document.querySelector(selector));
        if (after && after.textContent !== (before && before.textContent)) turnMessages(after);
        if (job.again) {
          job.again = false;
          scheduleRefresh(root, REFRESH_DELAY_MS);
        }
      };
      window.htmx
        .ajax("GET", source.getAttribute("data-refresh-url"), { target: selector, swap: "innerHTML" })
        .then(done, done);
    }

    // An answer read before a message's commit shows less progress than the bar had
    // already reached: the messages that came during the request put it back at once
    // (progress only grows within a state; a new state waits for the next answer).
    function reapplyProgress(root, during) {
      Object.keys(during).forEach(function (id) {
        var message = during[id];
        if (!("progress" in message)) return;
        viewsOf(root, id).forEach(function (view) {
          var bar = view.querySelector('[data-field="progress"]');
          if (view.getAttribute("data-state") === message.state && bar && Number(bar.value) < Number(message.progress)) {
            update(view, message, tones(root));
          }
        });
      });
    }

    // --- success messages become the next step --------------------------------

    function nextStep(scope) {
      return scope ? scope.querySelector("[data-next-step]") : null;
    }

    // "Allocating gpu-001: provisioning has started" is stale once the node is ready;
    // the page's success messages then say what to do next ("gpu-001 is ready ->
    // Launch an app"), with the re-rendered card's own links.
    function turnMessages(step) {
      Array.prototype.forEach.call(document.querySelectorAll("#messages .message-success > span"), function (text) {
        while (text.firstChild) text.removeChild(text.firstChild);
        Array.prototype.forEach.call(step.childNodes, function (node) {
          text.appendChild(node.cloneNode(true));
        });
        text.parentNode.setAttribute("data-next-step-message", "");
      });
    }

    // --- wiring ------------------------------------------------------------------

    function start() {
      scan();
      // Tabs and filters swap content in with htmx: open or close sockets to match.
      document.body.addEventListener("htmx:afterSettle", scan);
      // Back to a pushed tab or filter: htmx restores a snapshot, which may be stale.
      document.body.addEventListener("htmx:historyRestore", function () {
        scan();
        Array.prototype.forEach.call(document.querySelectorAll(ROOTS), function (root) {
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
  }

  live("allocation", /^[A-Z_]{1,32}$/);
  live("instance", /^[a-z_]{1,32}$/);
})();
