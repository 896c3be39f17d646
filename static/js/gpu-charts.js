// GPU telemetry charts on the allocation page (uPlot, vendored under static/vendor/uplot).
//
// The section marked data-gpu-charts names the JSON endpoint (data-url), which
// answers what GET /api/metrics/gpu/{tenant_id} answers for this allocation:
// series of {gpu, metric, unit, points: [[unix_seconds, value], ...]}. One chart
// per metric, one line per GPU. Window buttons (data-window) fetch again; the
// shown window is fetched again every minute while the page is visible. No
// inline styles or scripts (CSP): uPlot sizes its canvas through the CSSOM.
(function () {
  "use strict";

  var REFRESH_MS = 60000;
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

  function columns(series, metric) {
    // uPlot wants one shared x axis: the union of the series' timestamps.
    var mine = series.filter(function (s) { return s.metric === metric; });
    mine.sort(function (a, b) { return a.gpu - b.gpu; });
    var times = {};
    mine.forEach(function (s) { s.points.forEach(function (p) { times[p[0]] = true; }); });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var index = {};
    xs.forEach(function (x, i) { index[x] = i; });
    var data = [xs];
    mine.forEach(function (s) {
      var ys = xs.map(function () { return null; });
      s.points.forEach(function (p) { ys[index[p[0]]] = p[1]; });
      data.push(ys);
    });
    return { gpus: mine.map(function (s) { return s.gpu; }), data: data };
  }

  function draw(figure, metric, series) {
    var shaped = columns(series, metric);
    var old = figure.querySelector(".uplot");
    if (old) { old.remove(); }
    figure.setAttribute("data-points", String(shaped.data[0].length));
    if (!shaped.data[0].length) { return; }
    var width = Math.max(280, figure.clientWidth || 480);
    var lines = [{}].concat(shaped.gpus.map(function (gpu, i) {
      return { label: "GPU " + gpu, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false };
    }));
    // From zero, so an idle GPU reads as idle; utilization is a percentage.
    var range = metric === "utilization"
      ? function () { return [0, 100]; }
      : function (u, min, max) { return [0, Math.max(1, max * 1.15)]; };
    new uPlot({ width: width, height: 180, series: lines, legend: { show: true },
      scales: { x: { time: true }, y: { range: range } } }, shaped.data, figure);
  }

  function setup(section) {
    var status = section.querySelector("[data-chart-status]");
    var current = "1h";

    function load() {
      fetch(section.getAttribute("data-url") + "?window=" + encodeURIComponent(current), {
        credentials: "same-origin", headers: { Accept: "application/json" }
      }).then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      }).then(function (answer) {
        if (!answer.ok) {
          status.textContent = (answer.body.error && answer.body.error.message) || "Telemetry is unavailable.";
          return;
        }
        var series = answer.body.series;
        status.textContent = series.length ? "" : "No telemetry for this window yet.";
        section.querySelectorAll("[data-metric]").forEach(function (figure) {
          draw(figure, figure.getAttribute("data-metric"), series);
        });
        section.setAttribute("data-loaded", current);
      }).catch(function () {
        status.textContent = "Telemetry is unavailable.";
      });
    }

    section.querySelectorAll("[data-window]").forEach(function (button) {
      button.addEventListener("click", function () {
        current = button.getAttribute("data-window");
        section.querySelectorAll("[data-window]").forEach(function (other) {
          other.classList.toggle("active", other === button);
          other.setAttribute("aria-pressed", other === button ? "true" : "false");
        });
        load();
      });
    });
    load();
    setInterval(function () { if (!document.hidden) { load(); } }, REFRESH_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("[data-gpu-charts]").forEach(setup);
  });
})();
