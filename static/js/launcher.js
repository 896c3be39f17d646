// The launcher (seed 003 "Launcher Recovery"). It mints a UI session through the
// platform API, checks that the app boots (its HTML and one script that HTML
// references load with that session), mints once more if not, and only then sends
// the browser to the app. A subdomain route lives on its own origin: the ticket is
// posted there in a form (never in a URL), the proxy sets the cookie on that origin
// and redirects to the app.
(function () {
  "use strict";

  var box = document.querySelector("[data-launcher]");
  if (!box) return;
  var status = box.querySelector("[data-launcher-status]");
  var failure = box.querySelector("[data-launcher-error]");
  var ATTEMPTS = 2;

  function mint() {
    return fetch(box.getAttribute("data-session-url"), {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        "X-CSRFToken": box.getAttribute("data-csrf"),
      },
      body: JSON.stringify({ endpoint: box.getAttribute("data-endpoint") }),
    }).then(function (response) {
      // A gateway in front of the portal (a 502 page, a sign-in redirect) answers
      // in HTML: say what the portal answered rather than what JSON.parse thinks of it.
      var answered = "The portal answered " + response.status + " " + response.statusText + ".";
      return response.json().then(
        function (body) {
          if (!response.ok) throw new Error((body.error && body.error.message) || answered);
          return body;
        },
        function () {
          throw new Error(answered);
        }
      );
    });
  }

  // The first script the page boots from: script[src], a module preload, or an
  // inline import("...") of a modern single-page app.
  function bootstrapAsset(html, base) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var element = doc.querySelector(
      'script[src], link[rel="modulepreload"][href], link[rel="preload"][as="script"][href]'
    );
    var reference = element && (element.getAttribute("src") || element.getAttribute("href"));
    if (!reference) {
      var found = html.match(/import\(\s*["']([^"']+)["']\s*\)/);
      reference = found && found[1];
    }
    return reference ? new URL(reference, base).href : null;
  }

  function preflight(url) {
    var verify = box.getAttribute("data-verify");
    if (verify === "none") return Promise.resolve();
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (page) {
      if (!page.ok) throw new Error("The app answered " + page.status + " " + page.statusText + ".");
      if (verify !== "html_plus_asset") return undefined;
      return page.text().then(function (html) {
        var asset = bootstrapAsset(html, page.url);
        if (!asset) return undefined;
        return fetch(asset, { credentials: "same-origin" }).then(function (script) {
          if (!script.ok) throw new Error("The app's script did not load (" + script.status + ").");
        });
      });
    });
  }

  function open(session) {
    if (session.route_mode === "subdomain") {
      var form = box.querySelector("[data-launcher-exchange]");
      var entry = new URL(session.open_url);
      form.action = session.exchange_url;
      form.elements.ticket.value = session.ticket;
      form.elements.next.value = entry.pathname + entry.search;
      form.submit();
      return Promise.resolve();
    }
    return preflight(session.open_url).then(function () {
      window.location.replace(session.open_url);
    });
  }

  function launch(attempt) {
    failure.hidden = true;
    status.hidden = false;
    status.textContent = attempt > 1 ? "Trying once more\u2026" : status.textContent;
    mint()
      .then(open)
      .catch(function (error) {
        if (attempt < ATTEMPTS) {
          launch(attempt + 1);
          return;
        }
        status.hidden = true;
        failure.querySelector("[data-launcher-message]").textContent =
          "The app did not open: " + error.message;
        failure.hidden = false;
      });
  }

  box.querySelector("[data-launcher-retry]").addEventListener("click", function () {
    launch(1);
  });
  launch(1);
})();
