// Case detail on demand: the matrix and the failures are plain HTML; this draws a cell's cases from the
// embedded compact JSON (timeline as SVG, checks with their rules, evidence rows as tables) when asked.
"use strict";
(function () {
  var DATA = null;
  function data() {
    if (!DATA) DATA = JSON.parse(document.getElementById("report-data").textContent);
    return DATA;
  }
  function S(i) { return data().strings[i]; }
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    (children || []).forEach(function (c) { node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }
  var NS = "http://www.w3.org/2000/svg";
  function sv(tag, attrs, title) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (title) { var t = document.createElementNS(NS, "title"); t.textContent = title; node.appendChild(t); }
    return node;
  }
  function show(value) { return typeof value === "string" ? value : JSON.stringify(value); }

  function evidenceTable(rows) {
    var cols = [];
    rows.forEach(function (r) {
      if (r && typeof r === "object" && !Array.isArray(r)) Object.keys(r).forEach(function (k) { if (cols.indexOf(k) < 0) cols.push(k); });
    });
    if (!cols.length) cols = ["value"];
    var head = el("tr", {}, cols.map(function (c) { return el("th", {}, [c]); }));
    var body = rows.map(function (r) {
      var plain = !(r && typeof r === "object" && !Array.isArray(r));
      return el("tr", {}, cols.map(function (c) {
        var v = plain ? r : (c in r ? r[c] : "");
        // A value that is itself a list of rows (overlapping occurrences, say) reads best as a table of its own.
        var rowsOfRows = Array.isArray(v) && v.length && v.every(function (x) { return x && typeof x === "object" && !Array.isArray(x); });
        return el("td", {class: "mono"}, [rowsOfRows ? evidenceTable(v) : show(v)]);
      }));
    });
    return el("table", {class: "evidence"}, [el("thead", {}, [head]), el("tbody", {}, body)]);
  }

  // The timeline: a lane for the harness and one per implementation instance; case time on the axis above,
  // the server clock (moved by clock events) on the axis below.
  function timeline(c) {
    var events = c.e, lanes = ["harness"];
    events.forEach(function (e) { var l = S(e[2]); if (lanes.indexOf(l) < 0) lanes.push(l); });
    var W = 980, left = 96, right = 16, top = 30, laneH = 26, H = top + lanes.length * laneH + 46;
    var tmax = 0;
    events.forEach(function (e) { if (e[0] > tmax) tmax = e[0]; });
    tmax = tmax > 0 ? tmax * 1.02 : 1;
    function x(t) { return left + (W - left - right) * t / tmax; }
    function y(lane) { return top + lanes.indexOf(lane) * laneH + laneH / 2; }
    var bottom = top + lanes.length * laneH;
    var svg = sv("svg", {class: "timeline", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img"});
    svg.appendChild(sv("title", {}, "timeline of " + c.i));
    lanes.forEach(function (l, i) {
      svg.appendChild(sv("rect", {x: left, y: top + i * laneH, width: W - left - right, height: laneH,
                                   fill: i % 2 ? "#f4f6f9" : "#ffffff"}));
      var name = sv("text", {x: 6, y: top + i * laneH + laneH / 2 + 4, "font-size": 11, fill: "#1d2330"});
      name.textContent = l; svg.appendChild(name);
    });
    var step = Math.pow(10, Math.floor(Math.log10(tmax / 6)));
    [1, 2, 5, 10].some(function (m) { if (tmax / (step * m) <= 8) { step *= m; return true; } return false; });
    for (var t = 0; t <= tmax; t += step) {
      svg.appendChild(sv("line", {x1: x(t), x2: x(t), y1: top - 4, y2: bottom, stroke: "#e1e4ea"}));
      var tick = sv("text", {x: x(t), y: top - 8, "font-size": 10, "text-anchor": "middle", fill: "#66707f"});
      tick.textContent = (Math.round(t * 1000) / 1000) + "s"; svg.appendChild(tick);
    }
    var axis = sv("text", {x: 6, y: bottom + 24, "font-size": 11, fill: "#1f5fbf"});
    axis.textContent = "server clock"; svg.appendChild(axis);
    var shift = 0, segments = [[0, 0]];
    events.forEach(function (e) {
      var kind = S(e[1]), lane = S(e[2]), label = S(e[3]), cx = x(e[0]), cy = y(lane);
      var title = e[0].toFixed(3) + "s  " + lane + ": " + label;
      if (kind === "barrier") {
        svg.appendChild(sv("line", {x1: cx, x2: cx, y1: cy - 8, y2: cy + 8, stroke: "#2c3442", "stroke-width": 1.5}, title));
      } else if (kind === "step") {
        svg.appendChild(sv("rect", {x: cx - 3, y: cy - 3, width: 6, height: 6, fill: "#7b8494"}, title));
      } else if (kind === "clock") {
        shift += e[4] || 0; segments.push([e[0], shift]);
        svg.appendChild(sv("line", {x1: cx, x2: cx, y1: top, y2: bottom + 8, stroke: "#1f5fbf", "stroke-dasharray": "3 3"}, title));
        svg.appendChild(sv("path", {d: "M" + cx + " " + (cy - 6) + " l6 6 l-6 6 l-6 -6 z", fill: "#1f5fbf"}, title));
      } else if (kind === "fault") {
        svg.appendChild(sv("line", {x1: cx, x2: cx, y1: top - 2, y2: bottom, stroke: "#d0301f", "stroke-width": 3}, title));
        var ft = sv("text", {x: cx + 4, y: top + 11, "font-size": 11, "font-weight": 700, fill: "#d0301f"});
        ft.textContent = label; svg.appendChild(ft);
      } else if (kind === "fault-injected") {
        svg.appendChild(sv("circle", {cx: cx, cy: cy, r: 5, fill: "#d0301f"}, title));
      } else if (kind === "recovery") {
        svg.appendChild(sv("line", {x1: cx, x2: cx, y1: top, y2: bottom, stroke: "#1c8a3a", "stroke-width": 2,
                                     "stroke-dasharray": "6 3"}, title));
        var rt = sv("text", {x: cx + 4, y: bottom - 4, "font-size": 11, "font-weight": 700, fill: "#1c8a3a"});
        rt.textContent = "recovery"; svg.appendChild(rt);
      } else if (kind === "response") {
        var colour = / → ok/.test(label) ? "#1c8a3a" : / → unknown/.test(label) ? "#e08a00" : "#d0301f";
        svg.appendChild(sv("circle", {cx: cx, cy: cy, r: 3.5, fill: "#fff", stroke: colour, "stroke-width": 2}, title));
      } else if (kind === "start") {
        svg.appendChild(sv("path", {d: "M" + cx + " " + (cy - 6) + " l9 6 l-9 6 z", fill: "#1c8a3a"}, title));
      } else if (kind === "harness-error") {
        svg.appendChild(sv("path", {d: "M" + (cx - 5) + " " + (cy - 5) + " l10 10 m0 -10 l-10 10", stroke: "#d0301f",
                                     "stroke-width": 2.5}, title));
      } else {
        svg.appendChild(sv("circle", {cx: cx, cy: cy, r: 2.5, fill: "#7b8494"}, title));
      }
    });
    segments.forEach(function (s, i) {
      var label = sv("text", {x: x(s[0]) + 3, y: bottom + 18 + (i % 2) * 13, "font-size": 10, fill: "#1f5fbf"});
      label.textContent = (s[1] >= 0 ? "+" : "") + s[1] + "s"; svg.appendChild(label);
    });
    return svg;
  }

  function checksTable(c) {
    var rows = [], d = data();
    // failed (0) first, then not compared (2), then differs from the reference (3), then passed (1)
    var order = function (k) { return k[1] === 2 ? 0.5 : k[1] === 3 ? 0.75 : k[1]; };
    var checks = c.c.slice().sort(function (a, b) { return order(a) - order(b); });
    var body = [];
    checks.forEach(function (k) {
      var name = S(d.checks[k[0]][0]), rule = S(d.checks[k[0]][1]), skipped = k[1] === 2, differs = k[1] === 3;
      var note = k[4] === undefined ? null : S(k[4]);
      body.push(el("tr", {class: skipped ? "not-compared" : differs ? "differs" : k[1] ? "" : "failed"}, [
        el("td", {title: skipped ? "not compared" : differs ? "differs from the reference" : ""},
           [skipped ? "–" : differs ? "≠" : k[1] ? "✓" : "✗"]), el("td", {class: "mono"}, [name]),
        el("td", {}, [String(k[2])]), el("td", {class: "rule"}, note ? [rule, el("div", {class: "muted note"}, [note])] : [rule])]));
      if ((!k[1] || skipped || differs) && k[3] && k[3].length) {
        body.push(el("tr", {class: "evidence-row"}, [el("td", {}, []), el("td", {colspan: 3}, [
          el("div", {class: "muted"}, ["evidence (" + k[3].length + " rows)"]), evidenceTable(k[3])])]));
      }
    });
    var head = el("tr", {}, ["ok", "check", "rows", "rule it guards"].map(function (h) { return el("th", {}, [h]); }));
    return el("table", {class: "checks"}, [el("thead", {}, [head]), el("tbody", {}, body)]);
  }

  function eventsTable(c) {
    var head = el("tr", {}, ["t", "lane", "event", "what"].concat(c.x ? ["details"] : []).map(function (h) { return el("th", {}, [h]); }));
    var body = c.e.map(function (e, i) {
      var cells = [el("td", {}, [e[0].toFixed(3)]), el("td", {}, [S(e[2])]), el("td", {}, [S(e[1])]), el("td", {}, [S(e[3])])];
      if (c.x) cells.push(el("td", {class: "mono"}, [JSON.stringify(c.x[i])]));
      return el("tr", {}, cells);
    });
    return el("details", {}, [el("summary", {}, ["events (" + c.e.length + ")"]),
                              el("table", {class: "events"}, [el("thead", {}, [head]), el("tbody", {}, body)])]);
  }

  function caseBody(c) {
    var parts = [];
    if (c.r) parts.push(el("p", {}, [c.r]));
    var meta = "duration " + c.d + " s";
    parts.push(el("p", {class: "muted"}, [meta]));
    if (c.l) {
      var logs = el("p", {class: "muted"}, ["logs: "]);
      Object.keys(c.l).forEach(function (k) { logs.appendChild(el("a", {href: c.l[k]}, [k])); logs.appendChild(document.createTextNode(" ")); });
      parts.push(logs);
    }
    parts.push(timeline(c), checksTable(c), eventsTable(c));
    return el("div", {class: "case-body"}, parts);
  }

  function caseElement(ci, open) {
    var c = data().cases[ci];
    var summary = el("summary", {}, [el("span", {class: "badge v-" + c.v}, [c.v]), " ", el("code", {}, [c.i]),
                                     c.r ? el("span", {class: "muted"}, [" — " + c.r]) : ""]);
    var details = el("details", {class: "case", id: "d-" + c.a}, [summary]);
    details.addEventListener("toggle", function () {
      if (details.open && !details.querySelector(".case-body")) details.appendChild(caseBody(c));
    });
    if (open) { details.appendChild(caseBody(c)); details.open = true; }
    return details;
  }

  function showCell(k, openId) {
    var d = data(), cell = d.cells[k], panel = document.getElementById("detail");
    document.querySelectorAll("table.matrix a.open").forEach(function (a) { a.classList.remove("open"); });
    var link = document.querySelector('table.matrix a[data-cell="' + k + '"]');
    if (link) link.classList.add("open");
    panel.textContent = "";
    panel.appendChild(el("h2", {}, [cell[0] + " × " + cell[1] + " (" + cell[2].length + " case" + (cell[2].length === 1 ? "" : "s") + ")"]));
    cell[2].forEach(function (ci, n) {
      var c = d.cases[ci];
      panel.appendChild(caseElement(ci, openId ? c.i === openId : n === 0 && c.v !== "pass"));
    });
    return panel;
  }

  function showCase(id) {
    var d = data();
    for (var ci = 0; ci < d.cases.length; ci++) {
      if (d.cases[ci].i === id) {
        var panel = showCell(d.cases[ci].k, id);
        var target = document.getElementById("d-" + d.cases[ci].a) || panel;
        target.scrollIntoView();
        return;
      }
    }
  }

  document.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a[data-cell], a[data-case]") : null;
    if (!a) return;
    ev.preventDefault();
    if (a.hasAttribute("data-cell")) showCell(+a.getAttribute("data-cell")).scrollIntoView();
    else showCase(a.getAttribute("data-case"));
  });
  function fromHash() {
    var h = decodeURIComponent(location.hash.slice(1));
    if (h.indexOf("case-") === 0) {
      var d = data();
      for (var ci = 0; ci < d.cases.length; ci++) if (d.cases[ci].a === h) { showCase(d.cases[ci].i); return; }
    }
  }
  window.addEventListener("hashchange", fromHash);
  if (location.hash) fromHash();
  window.crashproofReport = {showCell: showCell, showCase: showCase};
})();
