// msgbench HTML reports: draws the charts of a run report or of a comparison from the JSON in
// <script id="msgbench-data"> with uPlot (inlined before this script). No network access.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('msgbench-data').textContent);
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
    '#8c564b', '#e377c2', '#17becf', '#bcbd22', '#7f7f7f'];
  var LAT = [['p50', 'p50'], ['p90', 'p90'], ['p99', 'p99'], ['p999', 'p99.9'], ['max', 'max']];
  var charts = [];

  function fmtNum(v) {
    if (v == null || isNaN(v)) return '-';
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(2) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100 || v === Math.round(v)) return Math.round(v).toString();
    return v.toFixed(2);
  }
  function fmtMs(v) {
    if (v == null || isNaN(v)) return '-';
    if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
    if (v >= 1) return v.toFixed(2) + ' ms';
    if (v >= 0.001) return (v * 1000).toFixed(1) + ' µs';
    return (v * 1e6).toFixed(0) + ' ns';
  }
  function fmtPct(v) { return v == null ? '-' : v.toFixed(0) + '%'; }
  function width(el) { return Math.max(320, Math.min(1200, (el.clientWidth || 900) - 8)); }

  // Shades the warm-up and drain phases behind the series.
  function phasePlugin(phases) {
    return {
      hooks: {
        drawClear: [function (u) {
          var ctx = u.ctx;
          (phases || []).forEach(function (p) {
            if (p[0] === 'measure') return;
            var x0 = u.valToPos(p[1], 'x', true), x1 = u.valToPos(p[2], 'x', true);
            var l = Math.max(u.bbox.left, Math.min(x0, x1));
            var r = Math.min(u.bbox.left + u.bbox.width, Math.max(x0, x1));
            if (r <= l) return;
            ctx.save();
            ctx.fillStyle = p[0] === 'warmup' ? 'rgba(255,200,0,0.12)'
              : p[0] === 'saturated' ? 'rgba(220,0,0,0.14)' : 'rgba(120,120,255,0.12)';
            ctx.fillRect(l, u.bbox.top, r - l, u.bbox.height);
            ctx.restore();
          });
        }]
      }
    };
  }

  function add(parent, opts, data) {
    var el = document.createElement('div');
    el.className = 'chart';
    parent.appendChild(el);
    opts.width = width(parent);
    opts.height = opts.height || 260;
    var u = new uPlot(opts, data, el);
    charts.push({ u: u, parent: parent });
    return u;
  }

  // series: [{label, values, color?, dash?}] over the x values t (seconds since start).
  function timeChart(parent, title, yLabel, fmt, t, series, phases) {
    series = series.filter(function (s) { return s.values && s.values.length; });
    if (!series.length || !t.length) return;
    // The x axis starts where the first phase does (the first point is the end of a tick).
    var x0 = (phases || []).reduce(function (m, p) { return Math.min(m, p[1]); }, t[0]);
    add(parent, {
      title: title,
      scales: { x: { time: false, range: function (u, min, max) { return [Math.min(min, x0), max]; } } },
      series: [{ label: 'time', value: function (u, v) { return v == null ? '-' : v.toFixed(1) + ' s'; } }]
        .concat(series.map(function (s, i) {
          return {
            label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5,
            dash: s.dash, spanGaps: !!s.spanGaps, points: { show: t.length < 60 },
            value: function (u, v) { return fmt(v); }
          };
        })),
      axes: [{ label: 'seconds since start' },
        { label: yLabel, size: 70, values: function (u, s) { return s.map(fmt); } }],
      plugins: [phasePlugin(phases)]
    }, [t].concat(series.map(function (s) { return s.values; })));
  }

  function latencySeries(prefix, lat, dash) {
    return LAT.map(function (k, i) {
      return { label: prefix + k[1], values: lat[k[0]], color: COLORS[i], dash: dash };
    });
  }
  function hasValues(arr) { return (arr || []).some(function (v) { return v != null && v !== 0; }); }

  // x of a percentile on the nines axis: 1 / (1 - q).
  function ninesX(p) { return 100 / Math.max(100 - p, 1e-9); }
  function ninesLabel(x) {
    if (x <= 1.0001) return '0%';
    var n = Math.round(Math.log10(x));
    return (100 - Math.pow(10, 2 - n)).toFixed(Math.max(0, n - 2)) + '%';
  }

  // curves: [{name, points: [{percentile, ns}], color?, dash?}] on one log "nines" axis.
  function percentileChart(parent, title, curves) {
    curves = curves.filter(function (c) { return c.points && c.points.length; });
    if (!curves.length) return;
    var keys = {};
    curves.forEach(function (c) { c.points.forEach(function (p) { keys[p.percentile.toFixed(7)] = p.percentile; }); });
    var ps = Object.keys(keys).map(function (k) { return keys[k]; }).sort(function (a, b) { return a - b; });
    var index = {};
    ps.forEach(function (p, i) { index[p.toFixed(7)] = i; });
    var xs = ps.map(ninesX);
    var data = [xs].concat(curves.map(function (c) {
      var ys = ps.map(function () { return null; });
      c.points.forEach(function (p) { ys[index[p.percentile.toFixed(7)]] = p.ns / 1e6; });
      return ys;
    }));
    add(parent, {
      title: title,
      height: 320,
      scales: { x: { time: false, distr: 3, log: 10 } },
      series: [{ label: 'percentile', value: function (u, v) { return v == null ? '-' : (100 - 100 / v).toFixed(4) + '%'; } }]
        .concat(curves.map(function (c, i) {
          return {
            label: c.name, stroke: c.color || COLORS[i % COLORS.length], width: 1.5, dash: c.dash,
            spanGaps: true, points: { show: false }, value: function (u, v) { return fmtMs(v); }
          };
        })),
      axes: [{
        label: 'percentile',
        splits: function (u) {
          var out = [], max = u.scales.x.max;
          for (var v = 1; v <= max * 1.0001; v *= 10) out.push(v);
          return out;
        },
        values: function (u, s) { return s.map(ninesLabel); }
      }, { label: 'latency', size: 70, values: function (u, s) { return s.map(fmtMs); } }]
    }, data);
  }

  function section(id, title) {
    var host = document.getElementById(id);
    if (!host) return null;
    if (!title) return host;
    var h = document.createElement('h3');
    h.textContent = title;
    host.appendChild(h);
    var d = document.createElement('div');
    host.appendChild(d);
    return d;
  }

  // A capacity search: x is the offered rate, one point per rate tried.
  function kneeChart(parent, title, yLabel, fmt, knee, series) {
    var xs = knee.map(function (k) { return k.offered; });
    return add(parent, {
      title: title,
      scales: { x: { time: false } },
      series: [{ label: 'offered', value: function (u, v) { return v == null ? '-' : fmtNum(v) + '/s'; } }]
        .concat(series.map(function (s, i) {
          return {
            label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5, dash: s.dash,
            points: { show: true, size: 6 }, value: function (u, v) { return fmt(v); }
          };
        })),
      axes: [{ label: 'offered msgs/s', values: function (u, s) { return s.map(fmtNum); } },
        { label: yLabel, size: 70, values: function (u, s) { return s.map(fmt); } }]
    }, [xs].concat(series.map(function (s) { return s.values; })));
  }

  function drawKnee(knee) {
    var host = section('knee');
    if (!host || !knee || !knee.length) return;
    kneeChart(host, 'Achieved against offered', 'msgs/s', fmtNum, knee, [
      { label: 'all of it', values: knee.map(function (k) { return k.offered; }), color: '#999', dash: [4, 4] },
      { label: 'achieved/s', values: knee.map(function (k) { return k.received; }), color: COLORS[0] }]);
    kneeChart(host, 'End-to-end latency against offered', 'latency', fmtMs, knee, [
      { label: 'p50', values: knee.map(function (k) { return k.p50_ms; }), color: COLORS[0] },
      { label: 'p99', values: knee.map(function (k) { return k.p99_ms; }), color: COLORS[1] },
      { label: 'p99.9', values: knee.map(function (k) { return k.p999_ms; }), color: COLORS[2] }]);
  }

  function drawRun(r) {
    drawKnee(r.knee);
    var c = r.chart, t = c.t, host = section('timeseries');
    var ph = c.phases.concat((c.saturated || []).map(function (s) { return ['saturated', s[0], s[1]]; }));
    timeChart(host, 'Throughput', 'msgs/s', fmtNum, t, [
      { label: 'sent/s', values: c.sent_per_s },
      { label: 'received/s', values: c.received_per_s }], ph);
    if (c.stages.length) {
      timeChart(host, 'Stages reached', 'msgs/s', fmtNum, t, c.stages.map(function (s) {
        return { label: s.name + '/s', values: s.reached_per_s };
      }), ph);
    }
    [['Publish latency', c.publish], ['End-to-end latency', c.e2e], ['Connect latency', c.connect]]
      .forEach(function (x) {
        if (hasValues(x[1].max)) timeChart(host, x[0], 'latency', fmtMs, t, latencySeries('', x[1]), ph);
      });
    c.stages.forEach(function (s) {
      if (hasValues(s.latency.max)) {
        timeChart(host, 'Stage ' + s.name + ': latency from the intended send time', 'latency', fmtMs, t,
          latencySeries('', s.latency), ph);
      }
    });
    var errs = c.errors.map(function (e) { return { label: e[0], values: e[1] }; });
    if (c.stages.some(function (s) { return hasValues(s.failed_per_s); })) {
      c.stages.forEach(function (s) {
        if (hasValues(s.failed_per_s)) errs.push({ label: s.name + ' failed/s', values: s.failed_per_s });
      });
    }
    if (errs.length) timeChart(host, 'Errors per interval', 'errors', fmtNum, t, errs, ph);
    else appendNote(host, 'No errors.');
    timeChart(host, 'Integrity (so far)', 'messages', fmtNum, t, [
      { label: 'lost (open gaps)', values: c.lost, color: COLORS[1] },
      { label: 'duplicated', values: c.duplicated, color: COLORS[3] },
      { label: 'reordered', values: c.reordered, color: COLORS[4] }], ph);
    timeChart(host, 'Generator CPU', '% of one core', fmtPct, t, [
      { label: 'cpu', values: c.cpu_pct }], ph);
    if (c.held) timeChart(host, 'Connections held', 'connections', fmtNum, t, [
      { label: 'held', values: c.held }], ph);
    if (c.host) {
      timeChart(host, 'Host CPU and memory', '% busy / % in use', fmtPct, t, [
        { label: 'cpu', values: c.host.cpu_pct, color: COLORS[0] },
        { label: 'memory', values: c.host.mem_pct, color: COLORS[2] }], ph);
      timeChart(host, 'Host network (every interface)', 'MB/s', fmtNum, t, [
        { label: 'received', values: c.host.rx_mb_per_s, color: COLORS[0] },
        { label: 'sent', values: c.host.tx_mb_per_s, color: COLORS[1] }], ph);
      timeChart(host, 'Host load average', 'runnable tasks (1 min)', fmtNum, t, [
        { label: 'load1', values: c.host.load1 }], ph);
    }
    var dist = section('percentiles');
    percentileChart(dist, 'Latency by percentile', r.distributions);
    percentileChart(dist, 'Stages: latency from the intended send time by percentile', r.stage_distributions);
  }

  function appendNote(host, text) {
    var p = document.createElement('p');
    p.className = 'note';
    p.textContent = text;
    host.appendChild(p);
  }

  // A and B on one chart: the union of their x values, each series joined across the other's.
  function merged(a, b) {
    var all = a.concat(b).sort(function (x, y) { return x - y; }), xs = [];
    all.forEach(function (x) { if (!xs.length || xs[xs.length - 1] !== x) xs.push(x); });
    var at = {};
    xs.forEach(function (x, i) { at[x] = i; });
    return {
      t: xs,
      put: function (t, values) {
        var out = xs.map(function () { return null; });
        t.forEach(function (x, i) { out[at[x]] = values[i]; });
        return out;
      }
    };
  }

  function drawCompare(a, b) {
    var host = section('timeseries'), m = merged(a.chart.t, b.chart.t);
    function pair(title, yLabel, fmt, pick) {
      var va = pick(a.chart), vb = pick(b.chart);
      if (!hasValues(va) && !hasValues(vb)) return;
      timeChart(host, title, yLabel, fmt, m.t, [
        { label: 'A ' + a.label, values: m.put(a.chart.t, va), color: COLORS[0], spanGaps: true },
        { label: 'B ' + b.label, values: m.put(b.chart.t, vb), color: COLORS[1], spanGaps: true }], []);
    }
    pair('Sent per second', 'msgs/s', fmtNum, function (c) { return c.sent_per_s; });
    pair('Received per second', 'msgs/s', fmtNum, function (c) { return c.received_per_s; });
    pair('Publish latency p99', 'latency', fmtMs, function (c) { return c.publish.p99; });
    pair('End-to-end latency p99', 'latency', fmtMs, function (c) { return c.e2e.p99; });
    pair('Connect latency p99', 'latency', fmtMs, function (c) { return c.connect.p99; });
    pair('Generator CPU', '% of one core', fmtPct, function (c) { return c.cpu_pct; });
    var dist = section('percentiles');
    var names = {};
    a.distributions.concat(b.distributions).forEach(function (d) { names[d.name] = true; });
    Object.keys(names).forEach(function (n) {
      var ca = a.distributions.filter(function (d) { return d.name === n; })[0];
      var cb = b.distributions.filter(function (d) { return d.name === n; })[0];
      percentileChart(dist, n + ' latency by percentile', [
        { name: 'A ' + a.label, points: ca ? ca.points : [], color: COLORS[0] },
        { name: 'B ' + b.label, points: cb ? cb.points : [], color: COLORS[1] }]);
    });
  }

  if (D.kind === 'report') drawRun(D.run);
  else if (D.kind === 'compare') drawCompare(D.a, D.b);
  document.body.setAttribute('data-charts', String(charts.length));

  var pending = null;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (c) { c.u.setSize({ width: width(c.parent), height: c.u.height }); });
    }, 100);
  });
})();
