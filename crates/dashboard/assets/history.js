// msgbench history pages: the runs list (search, pick two to compare), one run (rendered
// from its results file by the server), and the comparison of two runs.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const el = MB.el;
  window.msgbench = window.msgbench || {};

  function fail(e) {
    $("error").replaceChildren(el("div", { class: "error-box" }, String(e.message || e)));
    window.msgbench.ready = true;
  }
  function tile(k, v) { return el("div", { class: "tile" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v)); }
  function tags(list) { return el("span", { class: "tags" }, (list || []).map((t) => el("span", {}, t))); }
  function status(s) {
    if (!s.complete) return el("span", { class: "badge bad" }, "incomplete");
    if (s.interrupted) return el("span", { class: "badge warn" }, "interrupted");
    return el("span", { class: "badge done" }, "complete");
  }

  // ---- runs list ----
  async function runsPage() {
    const q = $("q"), table = $("runs"), btn = $("compare");
    const picked = new Set();
    q.value = new URLSearchParams(location.search).get("q") || "";
    btn.addEventListener("click", () => {
      const [a, b] = [...picked];
      location.href = MB.url("/compare", { a, b });
    });
    const head = el("tr", {}, el("th", {}, ""), el("th", {}, "name"), el("th", {}, "tags"), el("th", {}, "target"),
      el("th", {}, "started"), el("th", { class: "num" }, "duration"), el("th", { class: "num" }, "sent/s"),
      el("th", { class: "num" }, "received/s"), el("th", { class: "num" }, "e2e p50"), el("th", { class: "num" }, "e2e p99"),
      el("th", { class: "num" }, "e2e max"), el("th", { class: "num" }, "publish p99"), el("th", { class: "num" }, "lost"),
      el("th", { class: "num" }, "dup"), el("th", {}, ""));
    let seq = 0;
    async function load() {
      const mine = ++seq;
      try {
        const r = await MB.api("/api/runs", { q: q.value.trim() });
        if (mine !== seq) return;
        $("error").textContent = "";
        $("count").textContent = `${r.runs.length} of ${r.total} runs · ${r.db}`;
        $("title").textContent = r.db;
        const rows = r.runs.map((s) => {
          const box = el("input", { type: "checkbox", "data-id": s.id });
          box.checked = picked.has(String(s.id));
          box.addEventListener("change", () => {
            if (box.checked) picked.add(String(s.id)); else picked.delete(String(s.id));
            btn.disabled = picked.size !== 2;
          });
          return el("tr", { "data-run": s.id },
            el("td", {}, box),
            el("td", {}, el("a", { href: MB.url("/run/" + s.id) }, s.name || "(unnamed)")),
            el("td", {}, tags(s.tags)), el("td", {}, s.target), el("td", {}, MB.when(s.started_unix_ms)),
            el("td", { class: "num" }, MB.dur(s.duration_s)), el("td", { class: "num" }, MB.num(s.sent_per_s)),
            el("td", { class: "num" }, MB.num(s.received_per_s)), el("td", { class: "num" }, MB.ns(s.e2e_p50_ns)),
            el("td", { class: "num" }, MB.ns(s.e2e_p99_ns)), el("td", { class: "num" }, MB.ns(s.e2e_max_ns)),
            el("td", { class: "num" }, MB.ns(s.publish_p99_ns)), el("td", { class: "num" }, MB.count(s.lost)),
            el("td", { class: "num" }, MB.count(s.duplicated)), el("td", {}, status(s)));
        });
        table.replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 15, class: "muted" },
          r.total ? "no run matches" : "no runs yet: every `msgbench run` that writes a results file is recorded here"))]));
        window.msgbench.runs = r.runs.length;
        window.msgbench.ready = true;
      } catch (e) { fail(e); }
    }
    let timer = null;
    q.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const u = new URL(location.href);
        if (q.value.trim()) u.searchParams.set("q", q.value.trim()); else u.searchParams.delete("q");
        history.replaceState(null, "", u);
        load();
      }, 200);
    });
    await load();
  }

  // ---- one run ----
  function latencyRow(name, l) {
    return el("tr", {}, el("td", {}, name), ...["p50", "p90", "p99", "p999", "max"].map((k) => el("td", { class: "num" }, MB.ns(l[k]))),
      el("td", { class: "num" }, MB.count(l.count)));
  }
  function details(d) {
    const r = d.report, res = r.result;
    const parts = [];
    if (res) {
      const t = el("table", {}, el("tr", {}, el("th", {}, "latency"), ...["p50", "p90", "p99", "p99.9", "max", "count"].map((h) => el("th", { class: "num" }, h))));
      if (res.e2e.count) t.append(latencyRow("end-to-end", res.e2e));
      if (res.publish.count) t.append(latencyRow("publish", res.publish));
      if (res.send_delay.count) t.append(latencyRow("send delay", res.send_delay));
      for (const s of r.stages || []) t.append(latencyRow(`stage ${s.name}`, s.latency));
      parts.push(el("div", { class: "card" }, el("h2", {}, "Latency (measure phase and drain)"), t));
    }
    const i = r.integrity;
    parts.push(el("div", { class: "card" }, el("h2", {}, "Delivery"),
      el("div", {}, `expected ${MB.count(i.expected)} · delivered ${MB.count(i.delivered)} · lost ${MB.count(i.lost)} · duplicated ${MB.count(i.duplicated)} · reordered ${MB.count(i.reordered)} · foreign ${MB.count(i.foreign)}`),
      r.warnings.length ? el("ul", { class: "warnings" }, r.warnings.map((w) => el("li", {}, w))) : null));
    parts.push(el("div", { class: "card" }, el("h2", {}, "Configuration"),
      el("div", { class: "muted" }, `${r.begin.tool} on ${r.begin.host.hostname} (${r.begin.host.cpus} CPUs) · results file ${d.summary.results_path}`),
      el("details", {}, el("summary", {}, "plan"), el("pre", {}, JSON.stringify(r.begin.plan, null, 2)))));
    return parts;
  }
  function headTiles(d) {
    const r = d.report.result || {};
    return [
      tile("sent/s", MB.num(r.sent_per_s)), tile("received/s", MB.num(r.received_per_s)),
      tile("e2e p50", MB.ns(r.e2e && r.e2e.p50)), tile("e2e p99", MB.ns(r.e2e && r.e2e.p99)),
      tile("e2e max", MB.ns(r.e2e && r.e2e.max)), tile("publish p99", MB.ns(r.publish && r.publish.p99)),
      tile("duration", MB.dur(d.report.duration_s)), tile("lost", MB.count(d.report.integrity.lost)),
    ];
  }
  function rowsOf(snap) { return new MB.Series(snap).rows(); }

  async function runPage() {
    const id = location.pathname.split("/").pop();
    try {
      const d = await MB.api("/api/runs/" + id);
      $("title").textContent = `${d.summary.name || "run"} · ${d.summary.target} · ${MB.when(d.summary.started_unix_ms)}`;
      document.title = "msgbench: " + (d.summary.name || d.summary.target);
      $("tiles").replaceChildren(...headTiles(d), el("div", { class: "tile" }, el("div", { class: "k" }, "status"), status(d.summary)));
      $("details").replaceChildren(...details(d));
      new MB.Charts($("charts"), d.series.schema, {}).update(rowsOf(d.series));
      window.msgbench.ready = true;
    } catch (e) { fail(e); }
  }

  // ---- two runs ----
  function fmtDelta(d, v) {
    switch (d.unit) {
      case "ns": return MB.ns(v);
      case "s": return v.toFixed(3) + " s";
      case "count": return MB.count(v);
      default: return MB.num(v) + " " + d.unit;
    }
  }
  async function comparePage() {
    const p = new URLSearchParams(location.search);
    try {
      const c = await MB.api("/api/compare", { a: p.get("a"), b: p.get("b") });
      $("title").textContent = `A: ${c.a.summary.name || c.a.summary.target}  ·  B: ${c.b.summary.name || c.b.summary.target}`;
      const t = $("deltas");
      t.append(el("tr", {}, el("th", {}, "metric"), el("th", { class: "num" }, "A"), el("th", { class: "num" }, "B"),
        el("th", { class: "num" }, "change"), el("th", {}, "better is"), el("th", {}, "")));
      for (const d of c.deltas) {
        const ch = d.change === null ? (d.a === d.b ? "0%" : "new") : ((d.change >= 0 ? "+" : "") + (d.change * 100).toFixed(1) + "%");
        t.append(el("tr", { "data-metric": d.metric }, el("td", {}, d.metric), el("td", { class: "num" }, fmtDelta(d, d.a)),
          el("td", { class: "num" }, fmtDelta(d, d.b)), el("td", { class: "num " + d.verdict }, ch),
          el("td", { class: "muted" }, d.better), el("td", { class: d.verdict }, d.verdict)));
      }
      for (const [k, d] of [["a", c.a], ["b", c.b]]) {
        $(k + "-head").replaceChildren(el("h2", {}, `${k.toUpperCase()}: `, el("a", { href: MB.url("/run/" + d.summary.id) }, d.summary.name || "(unnamed)")),
          el("div", { class: "muted" }, `${d.summary.target} · ${MB.when(d.summary.started_unix_ms)} · ${MB.dur(d.report.duration_s)}`),
          el("div", { class: "tiles" }, ...headTiles(d).slice(0, 4)));
        new MB.Charts($(k + "-charts"), d.series.schema, { prefix: k + ":", height: 170 }).update(rowsOf(d.series));
      }
      window.msgbench.ready = true;
    } catch (e) { fail(e); }
  }

  const page = document.body.dataset.page;
  if (page === "runs") runsPage();
  else if (page === "run") runPage();
  else if (page === "compare") comparePage();
})();
