/* perfctl report: draws the plotly figures, makes tables sortable and filterable.
   Plain ES5, no dependencies besides the plotly bundle in the page. */
(function () {
  "use strict";
  var each = function (list, fn) { Array.prototype.forEach.call(list, fn); };

  function drawCharts() {
    var holder = document.getElementById("perfctl-figures");
    var payload = holder ? JSON.parse(holder.textContent) : {};
    var figures = payload.figures || {};
    var divs = document.querySelectorAll(".chart[data-figure]");
    if (typeof window.Plotly === "undefined") {
      // --cdn report opened offline: say so instead of leaving blank boxes.
      each(divs, function (div) {
        div.classList.add("chart-missing");
        div.textContent = "This chart needs plotly.js, which could not be loaded.";
      });
      return;
    }
    // One chart per task: the header and table stay usable while a long
    // history (50 charts of 500 points) is still being drawn.
    var queue = Array.prototype.slice.call(divs);
    function next() {
      var div = queue.shift();
      if (!div) { return; }
      var fig = figures[div.getAttribute("data-figure")];
      if (fig) {
        // One template for the page, instead of a copy inside every figure.
        var layout = Object.assign({template: payload.template}, fig.layout || {});
        window.Plotly.newPlot(div, fig.data || [], layout, {responsive: true, displaylogo: false});
      }
      window.setTimeout(next, 0);
    }
    next();
  }

  function sortKey(cell, type) {
    var raw = cell.getAttribute("data-sort");
    if (raw === null) { raw = cell.textContent; }
    if (type === "num" || type === "rank") {
      var v = parseFloat(raw);
      return isNaN(v) ? Infinity : v;  // unknown values sort last
    }
    return raw.toLowerCase();
  }

  function sortBy(table, col, th) {
    var type = th.getAttribute("data-type") || "text";
    var asc = th.getAttribute("aria-sort") !== "ascending";
    each(th.parentNode.cells, function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = sortKey(a.cells[col], type), y = sortKey(b.cells[col], type);
      var c = x < y ? -1 : (x > y ? 1 : 0);
      return asc ? c : -c;
    });
    each(rows, function (r) { body.appendChild(r); });
  }

  function makeSortable(table) {
    each(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.setAttribute("aria-sort", "none");
      var go = function () { sortBy(table, col, th); };
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); }
      });
    });
  }

  function applyFilter(bar) {
    var table = document.getElementById(bar.getAttribute("data-table"));
    if (!table) { return; }
    var text = bar.querySelector(".filter-text").value.trim().toLowerCase();
    var select = bar.querySelector(".filter-verdict");
    var verdict = select ? select.value : "";
    var rows = table.tBodies[0].rows, shown = 0;
    each(rows, function (row) {
      var ok = (!text || row.textContent.toLowerCase().indexOf(text) !== -1) &&
               (!verdict || row.getAttribute("data-verdict") === verdict);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    bar.querySelector(".filter-count").textContent = shown + " of " + rows.length + " shown";
  }

  function setupFilters() {
    each(document.querySelectorAll(".filters"), function (bar) {
      bar.addEventListener("input", function () { applyFilter(bar); });
      bar.addEventListener("change", function () { applyFilter(bar); });
      applyFilter(bar);
    });
    // A verdict count in the header toggles the results table's verdict filter.
    each(document.querySelectorAll("#verdict-counts button[data-verdict]"), function (btn) {
      btn.addEventListener("click", function () {
        var bar = document.querySelector('.filters[data-table="results-table"]');
        var select = bar && bar.querySelector(".filter-verdict");
        if (!select) { return; }
        var v = btn.getAttribute("data-verdict");
        select.value = select.value === v ? "" : v;
        applyFilter(bar);
        document.getElementById("results").scrollIntoView();
      });
    });
  }

  // "view" in the flamegraph table opens that flame graph's <details> below it.
  function setupFlameViews() {
    each(document.querySelectorAll("#flamegraph-table a.view"), function (link) {
      link.addEventListener("click", function () {
        var target = document.getElementById(link.getAttribute("href").slice(1));
        if (target) { target.open = true; }
      });
    });
  }

  function start() {
    each(document.querySelectorAll("table.sortable"), makeSortable);
    setupFilters();
    setupFlameViews();
    drawCharts();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
