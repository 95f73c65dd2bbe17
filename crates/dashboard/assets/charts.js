// msgbench dashboard: code shared by every page (token-carrying URLs, formatting, the
// downsampler mirror, uPlot charts built from a series schema). No build step: plain ES2017.
"use strict";

const MB = (() => {
  const token = new URLSearchParams(location.search).get("token");

  // A URL on this server with `params` and the token (if the page was opened with one).
  function url(path, params) {
    const u = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
    }
    if (token) u.searchParams.set("token", token);
    return u.pathname + u.search;
  }

  async function api(path, params) {
    const r = await fetch(url(path, params), { headers: { Accept: "application/json" } });
    const body = await r.json().catch(() => ({ error: r.statusText }));
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // ---- formatting ----
  function num(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
    return v.toFixed(digits === undefined ? 1 : digits);
  }
  function count(v) {
    if (v === null || v === undefined) return "–";
    return Number(v).toLocaleString("en-US");
  }
  // Milliseconds, with at most 3 significant digits and the unit that keeps them short.
  function ms(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (v === 0) return "0";
    const sig = (x) => x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2);
    if (v >= 1000) return sig(v / 1000) + " s";
    if (v >= 1) return sig(v) + " ms";
    return sig(v * 1000) + " µs";
  }
  function ns(v) { return v ? ms(v / 1e6) : "–"; }
  function bytes(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + u[i];
  }
  function dur(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = Math.floor(s % 60);
    return (h ? h + "h" : "") + (h || m ? m + "m" : "") + (h ? "" : r + "s");
  }
  function when(unixMs) { return new Date(unixMs).toLocaleString(); }
  function byUnit(unit) {
    switch (unit) {
      case "ms": return ms;
      case "bytes": return bytes;
      case "cores": return (v) => (v === null ? "–" : v.toFixed(2));
      default: return (v) => num(v);
    }
  }

  // ---- the downsampler, mirroring crates/dashboard/src/series.rs ----
  // Raw rows are folded into buckets of `stride`; when `cap` complete buckets are held,
  // adjacent pairs merge and the stride doubles. Column merge kinds come from the server.
  class Series {
    constructor(snap) {
      this.schema = snap.schema;
      this.cap = snap.cap;
      this.stride = snap.stride;
      this.points = snap.points.map((r) => r.slice());
      this.pending = snap.pending ? [snap.pending[0].slice(), snap.pending[1]] : null;
      this.raw = snap.raw_points;
      this.kinds = this.schema.columns.map((c) => c.merge);
    }
    merge(a, b) {
      const wa = a[1], wb = b[1];
      for (let k = 0; k < a.length; k++) {
        const x = a[k], y = b[k];
        if (x === null) { a[k] = y; continue; }
        if (y === null) continue;
        switch (this.kinds[k]) {
          case "last": a[k] = y; break;
          case "sum": a[k] = x + y; break;
          case "max": a[k] = Math.max(x, y); break;
          case "mean": {
            const w = (wa || 0) + (wb || 0);
            a[k] = w > 0 && wa !== null && wb !== null ? (x * wa + y * wb) / w : (x + y) / 2;
            break;
          }
        }
      }
    }
    push(row) {
      this.raw++;
      let bucket, n;
      if (!this.pending) { bucket = row.slice(); n = 1; }
      else { bucket = this.pending[0]; this.merge(bucket, row); n = this.pending[1] + 1; }
      this.pending = null;
      if (n < this.stride) { this.pending = [bucket, n]; return; }
      this.points.push(bucket);
      if (this.points.length >= this.cap) this.halve();
    }
    halve() {
      const out = [];
      for (let i = 0; i < this.points.length; i += 2) {
        const a = this.points[i];
        if (i + 1 < this.points.length) { this.merge(a, this.points[i + 1]); out.push(a); }
        else this.pending = [a, this.stride];
      }
      this.points = out;
      this.stride *= 2;
    }
    rows() { return this.pending ? this.points.concat([this.pending[0]]) : this.points; }
  }

  // ---- charts ----
  const COLORS = ["#2f6fde", "#e0762b", "#2a9d57", "#c23b4b", "#7b4fc4", "#8c6d1f", "#1b9aaa"];
  const PCT_COLORS = { p50: "#2a9d57", p90: "#2f6fde", p99: "#e0762b", "p99.9": "#c23b4b", max: "#7b4fc4" };

  // One uPlot per chart of `schema` in `container`; `update(rows)` redraws them all.
  // Each chart's box carries data-chart (its id), data-points (points drawn) and
  // data-values (non-empty values), which the browser test reads.
  class Charts {
    constructor(container, schema, opts) {
      this.schema = schema;
      this.container = container;
      this.opts = opts || {};
      this.plots = [];
      container.textContent = "";
      for (const chart of schema.charts) {
        const cols = [];
        schema.columns.forEach((c, i) => { if (c.chart === chart.id) cols.push(i); });
        if (!cols.length) continue;
        const box = MB.el("div", { class: "chart", "data-chart": chart.id, "data-points": "0", "data-values": "0" });
        box.append(MB.el("h3", {}, chart.title));
        const plotDiv = MB.el("div", { class: "plot" });
        const empty = MB.el("div", { class: "nodata" }, "nothing recorded (yet)");
        box.append(plotDiv, empty);
        container.append(box);
        const fmt = byUnit(chart.unit);
        const series = [{ label: "time", value: (u, v) => (v === null ? "–" : dur(v)) }];
        cols.forEach((i, k) => {
          const c = schema.columns[i];
          series.push({
            label: c.label,
            stroke: PCT_COLORS[c.label] || COLORS[k % COLORS.length],
            width: 1.5,
            spanGaps: false,
            value: (u, v) => fmt(v),
            points: { show: false },
          });
        });
        const width = Math.max(280, plotDiv.clientWidth || box.clientWidth || 480);
        const plot = new uPlot({
          width,
          height: this.opts.height || 200,
          series,
          scales: { x: { time: false }, y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.05 : 1] } },
          axes: [
            { values: (u, vals) => vals.map((v) => dur(v)) },
            { size: 78, values: (u, vals) => vals.map((v) => fmt(v)) },
          ],
          legend: { live: true },
          cursor: { drag: { x: true, y: false } },
        }, [[], ...cols.map(() => [])], plotDiv);
        this.plots.push({ id: chart.id, cols, plot, box, plotDiv, empty });
      }
      window.msgbench = window.msgbench || {};
      window.msgbench.charts = window.msgbench.charts || {};
      for (const p of this.plots) window.msgbench.charts[(this.opts.prefix || "") + p.id] = p.plot;
      this.onResize = () => {
        for (const p of this.plots) p.plot.setSize({ width: Math.max(280, p.plotDiv.clientWidth), height: this.opts.height || 200 });
      };
      window.addEventListener("resize", this.onResize);
    }
    update(rows) {
      const xs = rows.map((r) => r[0]);
      for (const p of this.plots) {
        let values = 0;
        const ys = p.cols.map((i) => rows.map((r) => { const v = r[i]; if (v !== null) values++; return v; }));
        p.plot.setData([xs, ...ys]);
        p.box.dataset.points = String(xs.length);
        p.box.dataset.values = String(values);
        p.empty.hidden = values > 0;
      }
    }
    destroy() {
      window.removeEventListener("resize", this.onResize);
      for (const p of this.plots) p.plot.destroy();
      this.plots = [];
    }
  }

  return { token, url, api, el, num, count, ms, ns, bytes, dur, when, Series, Charts };
})();
