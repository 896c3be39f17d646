// Small progressive enhancements for the portal. Every page works without this
// file; the CSP forbids inline scripts and handlers, so behaviour is attached
// here by data attributes: data-autosubmit, data-js-hide, data-dismiss, data-copy,
// data-maximize, data-ago, data-menu-toggle.
(function () {
  "use strict";

  document.documentElement.classList.add("js");

  // The project switcher opens the chosen project as soon as it changes.
  document.addEventListener("change", function (event) {
    var select = event.target.closest && event.target.closest("select[data-autosubmit]");
    if (select && select.form) {
      select.form.requestSubmit ? select.form.requestSubmit() : select.form.submit();
    }
  });

  document.addEventListener("click", function (event) {
    var dismiss = event.target.closest("[data-dismiss]");
    if (dismiss) {
      var message = dismiss.closest(".message");
      if (message) message.remove();
      return;
    }
    var copy = event.target.closest("[data-copy]");
    if (copy) copyText(copy);
    var maximize = event.target.closest("[data-maximize]");
    if (maximize) toggleMaximized(maximize);
    var toggle = event.target.closest("[data-menu-toggle]");
    if (toggle) {
      var open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      document.getElementById(toggle.getAttribute("aria-controls")).classList.toggle("open", open);
    }
    // An open user menu closes when the click lands elsewhere, as menus do.
    document.querySelectorAll("details.user-menu[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    });
  });

  // The App UI tab's app over the whole window, and back (the button or Escape).
  function toggleMaximized(button) {
    var card = button.closest("[data-maximizable]");
    if (!card) return;
    var on = !card.classList.contains("is-maximized");
    card.classList.toggle("is-maximized", on);
    document.documentElement.classList.toggle("has-maximized", on);
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.textContent = on ? button.getAttribute("data-restore-label") : button.getAttribute("data-maximize-label");
  }

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var button = document.querySelector(".is-maximized [data-maximize]");
    if (button) toggleMaximized(button);
    document.querySelectorAll("details.user-menu[open]").forEach(function (menu) {
      menu.removeAttribute("open");
      menu.querySelector("summary").focus();
    });
  });

  function copyText(button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent.trim();
    var done = function () {
      button.textContent = "Copied";
      button.classList.add("copied");
      window.setTimeout(function () {
        button.textContent = "Copy";
        button.classList.remove("copied");
      }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { selectText(source); });
    } else {
      // Plain http outside localhost has no clipboard API: select it for Ctrl+C.
      selectText(source);
    }
  }

  function selectText(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // htmx does not swap error answers: say what happened in the message area.
  function flash(text, level) {
    var area = document.getElementById("messages");
    if (!area) return;
    var message = document.createElement("div");
    message.className = "message message-" + (level || "error");
    message.setAttribute("role", "alert");
    var span = document.createElement("span");
    span.textContent = text;
    var close = document.createElement("button");
    close.type = "button";
    close.className = "message-close";
    close.setAttribute("data-dismiss", "");
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "\u00d7";
    message.appendChild(span);
    message.appendChild(close);
    area.appendChild(message);
  }

  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (status === 403 && event.detail.xhr.getResponseHeader("X-CSRF-Failure")) {
      // Django rotated the CSRF token at sign-in: the token in this tab is stale.
      flash("This page is out of date (you signed in again elsewhere): reload it.");
    } else if (status === 403) {
      flash("Your role does not allow this action.");
    } else if (status === 404) {
      flash("That no longer exists, or you no longer have access to it. Reload the page.");
    } else {
      flash("Something went wrong (HTTP " + status + "). Try again, or reload the page.");
    }
  });

  // Relative times ("3 minutes ago", the ``ago`` filter's words) age while the page
  // stays open, rather than keep the age they had when the server rendered them.
  var AGO_UNITS = [
    ["year", 365 * 86400],
    ["month", 30 * 86400],
    ["week", 7 * 86400],
    ["day", 86400],
    ["hour", 3600],
    ["minute", 60],
  ];

  function ago(seconds) {
    if (seconds < 60) return "just now";
    for (var i = 0; i < AGO_UNITS.length; i++) {
      var count = Math.floor(seconds / AGO_UNITS[i][1]);
      if (count >= 1) return count + "\u00a0" + AGO_UNITS[i][0] + (count === 1 ? "" : "s") + " ago";
    }
    return "just now";
  }

  function ageTimes() {
    var now = Date.now();
    Array.prototype.forEach.call(document.querySelectorAll("time[data-ago][datetime]"), function (time) {
      var at = Date.parse(time.getAttribute("datetime"));
      if (isNaN(at)) return;
      var text = ago(Math.max(0, (now - at) / 1000));
      if (time.textContent !== text) time.textContent = text;
    });
  }

  window.setInterval(ageTimes, 30000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) ageTimes();
  });

  document.addEventListener("htmx:sendError", function () {
    flash("The portal could not be reached. Check your connection and try again.");
  });
})();
