// The operations front page's fleet charts (uPlot, vendored under static/vendor/uplot).
//
// Each [data-fleet-chart] figure names the JSON script the page rendered next to it
// ({unit, labels: [...], values: [...]}): one bar per label. The table in the figure
// says the same in text. No inline styles or scripts (CSP): uPlot sizes its canvas
// through the CSSOM.
(function () {
  "use strict";

  function bars(figure, chart) {
    var plot = figure.querySelector("[data-chart-plot]");
    plot.replaceChildren();
    var xs = chart.labels.map(function (label, i) { return i; });
    var unit = " " + chart.unit;
    new uPlot({
      width: Math.max(240, plot.clientWidth || 360),
      height: 180,
      legend: { show: false },
      cursor: { show: false },
      scales: {
        x: { time: false, range: function () { return [-0.5, xs.length - 0.5]; } },
        y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.15)]; } }
      },
      axes: [
        { splits: function () { return xs; }, values: function (u, splits) {
          return splits.map(function (i) { return chart.labels[i] || ""; });
        } },
        { size: 40, values: function (u, splits) {
          return splits.map(function (v) { return Number.isInteger(v) ? String(v) : ""; });
        } }
      ],
      series: [{}, {
        label: chart.unit, stroke: "#2563eb", fill: "rgba(37, 99, 235, 0.45)",
        paths: uPlot.paths.bars({ size: [0.6, 80] }), points: { show: false },
        value: function (u, v) { return v == null ? "-" : v + unit; }
      }]
    }, [xs, chart.values], plot);
  }

  function setup(figure) {
    var data = document.getElementById(figure.getAttribute("data-fleet-chart"));
    var chart = JSON.parse(data.textContent);
    var total = chart.values.reduce(function (sum, v) { return sum + v; }, 0);
    if (total > 0) { bars(figure, chart); }
    figure.setAttribute("data-loaded", "true");
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("[data-fleet-chart]").forEach(setup);
  });
})();
