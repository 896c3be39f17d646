// GPU telemetry charts on the allocation page (uPlot, vendored under static/vendor/uplot).
//
// The section marked data-gpu-charts names the JSON endpoint (data-url), which
// answers what GET /api/metrics/gpu/{tenant_id} answers for this allocation:
// series of {gpu, metric, unit, points: [[unix_seconds, value], ...]}. One chart
// per metric, one line per GPU, and each GPU's latest value written out in the
// figure's [data-latest]. Window buttons (data-window) fetch again; so does the
// page's live socket (live.js) when the allocation (data-allocation-id) has new
// points, and, without it, a timer every minute while the page is visible. The
// socket only says that there is something new: the points always come from the
// endpoint, the metrics API's service. No inline styles or scripts (CSP): uPlot
// sizes its canvas through the CSSOM.
//
// The [data-usage-chart] figures (the dashboard's GPU-hours, the usage page's
// charges) name theirs too: an amount per UTC day per project, {unit, days:
// ["YYYY-MM-DD", ...], projects: [{name, values: [...]}]}, drawn one line per
// project and written out as a table and a sentence (the text alternative).
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

  function latest(figure, shaped) {
    var out = figure.querySelector("[data-latest]");
    if (!out) { return; }
    out.textContent = shaped.gpus.map(function (gpu, i) {
      var ys = shaped.data[i + 1];
      for (var j = ys.length - 1; j >= 0; j--) {
        if (ys[j] != null) { return "GPU " + gpu + ": " + (Math.round(ys[j] * 10) / 10); }
      }
      return "GPU " + gpu + ": -";
    }).join(" \u00b7 ");
  }

  function draw(figure, metric, series) {
    var shaped = columns(series, metric);
    var old = figure.querySelector(".uplot");
    if (old) { old.remove(); }
    figure.setAttribute("data-points", String(shaped.data[0].length));
    latest(figure, shaped);
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
    var running = false, again = false;

    function load() {
      // One fetch at a time; news that comes during it asks for one more after.
      if (running) { again = true; return; }
      running = true;
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
      }).then(function () {
        running = false;
        if (again) { again = false; load(); }
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
    var id = section.getAttribute("data-allocation-id");
    var heard = 0;
    document.addEventListener("live:allocation:points", function (event) {
      if (event.detail.id !== id) { return; }
      if (!document.hidden) { heard = Date.now(); load(); }
    });
    load();
    // The timer covers a page whose socket is down or says nothing (nothing new, or
    // a page left hidden while news came).
    setInterval(function () {
      if (!document.hidden && Date.now() - heard >= REFRESH_MS) { load(); }
    }, REFRESH_MS);
  }

  function usageRows(body) {
    var rows = [];
    body.days.forEach(function (day, i) {
      body.projects.forEach(function (project) {
        if (project.values[i] > 0) { rows.push([day, project.name, project.values[i]]); }
      });
    });
    return rows;
  }

  function usageTable(figure, rows) {
    var details = figure.querySelector("[data-chart-table]");
    var body = details.querySelector("tbody");
    body.replaceChildren();
    rows.forEach(function (row) {
      var tr = document.createElement("tr");
      row.forEach(function (value, i) {
        var td = document.createElement("td");
        td.textContent = i === 2 ? value.toFixed(2) : value;
        if (i === 2) { td.className = "num"; }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    details.hidden = rows.length === 0;
  }

  function usageChart(figure, body) {
    var unit = " " + body.unit;
    var plot = figure.querySelector("[data-chart-plot]");
    plot.replaceChildren();
    var xs = body.days.map(function (day) { return Date.parse(day + "T00:00:00Z") / 1000; });
    var lines = [{}].concat(body.projects.map(function (project, i) {
      return { label: project.name, stroke: COLORS[i % COLORS.length], width: 1.5,
        points: { show: true }, value: function (u, v) { return v == null ? "-" : v.toFixed(2) + unit; } };
    }));
    var data = [xs].concat(body.projects.map(function (project) { return project.values; }));
    new uPlot({ width: Math.max(200, plot.clientWidth || 300), height: 160, series: lines,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.15)]; } } },
      axes: [{}, { size: 44 }] }, data, plot);
  }

  function setupUsage(figure) {
    var status = figure.querySelector("[data-chart-status]");
    fetch(figure.getAttribute("data-url"), {
      credentials: "same-origin", headers: { Accept: "application/json" }
    }).then(function (response) {
      if (!response.ok) { throw new Error(String(response.status)); }
      return response.json();
    }).then(function (body) {
      var rows = usageRows(body);
      var total = rows.reduce(function (sum, row) { return sum + row[2]; }, 0);
      // The tenant's storage is a series without a project id: said apart from the projects.
      var projects = body.projects.filter(function (p) { return p.project_id !== null; }).length;
      var storage = projects < body.projects.length ? " and the tenant's storage" : "";
      status.textContent = rows.length
        ? total.toFixed(2) + " " + body.unit + " in " + projects + " project" + (projects === 1 ? "" : "s") +
          storage + " from " + body.days[0] + " to " + body.days[body.days.length - 1] + "."
        : "Nothing on any of these " + body.days.length + " days.";
      usageTable(figure, rows);
      if (rows.length) { usageChart(figure, body); }
      figure.setAttribute("data-loaded", "true");
    }).catch(function () {
      status.textContent = "Usage is unavailable.";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("[data-gpu-charts]").forEach(setup);
    document.querySelectorAll("[data-usage-chart]").forEach(setupUsage);
  });
})();
