// msgbench live page: the run's charts, fed by server-sent events from /api/live/events.
// `hello` replaces everything (first message of each connection); `point` adds one raw row
// to the local downsampler; `event` and `end` update the log and the summary.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  let series = null, charts = null, source = null, finished = false, lastRow = null;
  let redraw = false;

  function tile(k, v) { return MB.el("div", { class: "tile" }, MB.el("div", { class: "k" }, k), MB.el("div", { class: "v" }, v)); }

  function showTotals(t, phase) {
    $("phase").textContent = phase || "running";
    $("phase").className = "badge" + (finished ? " done" : "");
    const schema = series ? series.schema : null;
    const col = (key) => (schema && lastRow ? lastRow[schema.columns.findIndex((c) => c.key === key)] : null);
    $("tiles").replaceChildren(
      tile("elapsed", MB.dur(t.elapsed_s)),
      tile("sent", MB.count(t.sent)),
      tile("received", MB.count(t.received)),
      tile("sent/s now", MB.num(col("sent_per_s"))),
      tile("received/s now", MB.num(col("received_per_s"))),
      tile("e2e p99 now", MB.ms(col("e2e.p99"))),
      tile("errors", MB.count(t.errors)),
      tile("open gaps", MB.count(t.open_gaps)),
      tile("duplicated", MB.count(t.duplicated)),
      tile("reordered", MB.count(t.reordered)),
    );
  }

  function addEvent(e) {
    const box = $("events");
    if (box.firstChild && box.firstChild.classList && box.firstChild.classList.contains("muted")) box.textContent = "";
    box.prepend(MB.el("div", { class: e.kind }, `[${e.at_s.toFixed(1)}s] ${e.kind}: ${e.detail}`));
    while (box.childNodes.length > 200) box.lastChild.remove();
  }

  function showEnd(end) {
    finished = true;
    const i = end.integrity;
    const card = MB.el("div", { class: "card", id: "end-card" },
      MB.el("h2", {}, end.interrupted ? "Run interrupted" : "Run finished"),
      MB.el("div", {}, `duration ${MB.dur(end.duration_s)} · delivered ${MB.count(i.delivered)} of ${MB.count(i.expected)} expected · lost ${MB.count(i.lost)} · duplicated ${MB.count(i.duplicated)} · reordered ${MB.count(i.reordered)}`),
      end.warnings.length ? MB.el("ul", { class: "warnings" }, end.warnings.map((w) => MB.el("li", {}, w))) : null,
      MB.el("div", { class: "muted" }, "The results file holds everything shown here; `msgbench dashboard` shows it with the run history."));
    $("end").replaceChildren(card);
    $("phase").textContent = end.interrupted ? "interrupted" : "finished";
    $("phase").className = "badge " + (end.interrupted ? "warn" : "done");
  }

  function hello(h) {
    finished = false;
    $("end").textContent = "";
    $("events").replaceChildren(MB.el("span", { class: "muted" }, "none yet"));
    if (charts) { charts.destroy(); charts = null; }
    series = null; lastRow = null;
    if (h.meta) {
      $("title").textContent = `${h.meta.name || "run"} · ${h.meta.target} · ${h.meta.tool} on ${h.meta.hostname} (${h.meta.cpus} CPUs) · started ${MB.when(h.meta.started_unix_ms)}`;
      document.title = `msgbench live: ${h.meta.name || h.meta.target}`;
    }
    if (h.series) {
      series = new MB.Series(h.series);
      charts = new MB.Charts($("charts"), h.series.schema, {});
      const rows = series.rows();
      lastRow = rows.length ? rows[rows.length - 1] : null;
      charts.update(rows);
    }
    for (const e of h.events) addEvent(e);
    showTotals(h.totals, h.phase);
    if (h.end) showEnd(h.end);
    window.msgbench.ready = true;
  }

  function point(p) {
    if (!series) return;
    series.push(p.row);
    lastRow = p.row;
    showTotals(p.totals, p.phase);
    redraw = true;
  }

  // Redraw at most once per animation frame, whatever the tick.
  function frame() {
    if (redraw && charts) { redraw = false; charts.update(series.rows()); }
    requestAnimationFrame(frame);
  }
  requestAnimationFrame(frame);

  function connect() {
    source = new EventSource(MB.url("/api/live/events"));
    source.addEventListener("hello", (e) => hello(JSON.parse(e.data)));
    source.addEventListener("point", (e) => point(JSON.parse(e.data)));
    source.addEventListener("event", (e) => addEvent(JSON.parse(e.data)));
    source.addEventListener("end", (e) => { showEnd(JSON.parse(e.data)); });
    source.onopen = () => { $("error").textContent = ""; };
    source.onerror = () => {
      if (finished) {
        // The run is over and its process has gone: keep the page as it is.
        source.close();
        return;
      }
      $("error").replaceChildren(MB.el("div", { class: "error-box" }, "Connection to msgbench lost; retrying…"));
    };
  }
  window.msgbench = window.msgbench || {};
  connect();
})();
