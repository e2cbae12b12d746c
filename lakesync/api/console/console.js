// The LakeSync web console: one page that routes between its views by the URL's hash
// (#/, #/gateways/GW, #/gateways/GW/destinations/NAME, #/gateways/GW/runs/N), reads the
// gateway's /console/api/* JSON with the session cookie, and follows the live stream
// (server-sent events) to update numbers and charts. Charts are uPlot's (vendored).
"use strict";

(function () {
  const state = { status: null, history: {}, route: null, charts: [], source: null };
  const HOUR_S = 3600;

  // --- small DOM helpers (text is always set as text, never parsed as HTML) ----------------
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function ago(iso) {
    if (!iso) return "never";
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    return `${Math.round(s / 3600)} h ago`;
  }
  function secs(v) {
    if (v === null || v === undefined) return "–";
    if (v < 90) return `${v.toFixed(1)} s`;
    if (v < 5400) return `${(v / 60).toFixed(1)} min`;
    return `${(v / 3600).toFixed(1)} h`;
  }
  function backlog(b) {
    return b.deltas ? `${b.deltas}${b.capped ? "+" : ""} deltas, ${secs(b.oldest_age_s)}` : "none";
  }
  // An unreachable destination's watermarks could not be read: its lag is unknown, not "none".
  function destinationLag(d) {
    return d.error ? "unknown (unreachable)" : backlog(d.lag);
  }
  function table(headers, rows, id) {
    return h("div", { class: "table-wrap" },
      h("table", { id },
        h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
        h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))
          : h("tr", {}, h("td", { colspan: headers.length, class: "label" }, "none")))));
  }
  function stat(label, value, id) {
    return h("div", { class: "card" }, h("div", { class: "label" }, label),
      h("div", { class: "stat", id }, value));
  }

  // --- server ------------------------------------------------------------------------------
  async function api(path) {
    const r = await fetch(`/console/api/${path}`, { credentials: "same-origin" });
    if (r.status === 401) { showSignIn(); throw new Error("signed out"); }
    if (!r.ok) throw new Error((await r.json()).error || r.statusText);
    return r.json();
  }

  async function signIn(event) {
    event.preventDefault();
    const token = $("token").value.trim();
    $("sign-in-error").textContent = "";
    const r = await fetch("/console/session", {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json" }, body: JSON.stringify({ token }),
    });
    if (!r.ok) {
      $("sign-in-error").textContent = (await r.json()).error || "sign-in failed";
      return;
    }
    $("token").value = "";
    await start();
  }

  async function signOut() {
    await fetch("/console/session", { method: "DELETE", credentials: "same-origin" });
    if (state.source) state.source.close();
    showSignIn();
  }

  function showSignIn() {
    $("sign-in").hidden = false;
    $("sign-out").hidden = true;
    $("view").replaceChildren();
    // Signed out there is no live stream to speak of: no badge.
    $("live").hidden = true;
    $("live").classList.remove("on");
  }

  async function start() {
    // Asked first so a signed-out visit shows the form without a failed (401) request.
    const session = await (await fetch("/console/session", { credentials: "same-origin" })).json();
    if (!session.signed_in) { showSignIn(); return; }
    const [status, history] = await Promise.all([api("status"), api("history")]);
    state.status = status;
    state.history = history;
    $("sign-in").hidden = true;
    $("sign-out").hidden = false;
    $("live").hidden = false;
    render();
    follow();
  }

  function follow() {
    if (state.source) state.source.close();
    const source = new EventSource("/console/api/events");
    state.source = source;
    source.addEventListener("open", () => {
      $("live").textContent = "live";
      $("live").classList.add("on");
    });
    source.addEventListener("error", () => {
      $("live").textContent = "reconnecting";
      $("live").classList.remove("on");
    });
    source.addEventListener("snapshot", (e) => {
      const snap = JSON.parse(e.data);
      state.status = snap.status;
      const cutoff = Date.now() / 1000 - HOUR_S;
      for (const [gw, point] of Object.entries(snap.latest)) {
        const points = (state.history[gw] || []).filter((p) => p.at >= cutoff && p.at < point.at);
        points.push(point);
        state.history[gw] = points;
      }
      update();
    });
  }

  // --- routing -----------------------------------------------------------------------------
  function route() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[0] === "gateways" && parts[1]) {
      if (parts[2] === "destinations" && parts[3]) return { view: "destination", gw: parts[1], name: parts[3] };
      if (parts[2] === "runs" && parts[3]) return { view: "run", gw: parts[1], index: Number(parts[3]) };
      return { view: "gateway", gw: parts[1] };
    }
    return { view: "overview" };
  }
  function gateway(gw) {
    return (state.status?.gateways || []).find((g) => g.gateway === gw);
  }

  function render() {
    if (!state.status) return;
    for (const c of state.charts) c.plot.destroy();
    state.charts = [];
    state.route = route();
    const view = $("view");
    view.replaceChildren();
    const r = state.route;
    if (r.view === "overview") renderOverview(view);
    else if (r.view === "gateway") renderGateway(view, r.gw);
    else if (r.view === "destination") view.append(h("div", { id: "detail" }));
    else if (r.view === "run") view.append(h("div", { id: "detail" }));
    update();
  }

  // Re-fill the parts that change with each snapshot; charts get new data in place.
  function update() {
    const r = state.route;
    if (!r || !state.status) return;
    if (r.view === "overview") fillOverview();
    else if (r.view === "gateway") fillGateway(r.gw);
    else if (r.view === "destination") fillDestination(r.gw, r.name);
    else if (r.view === "run") fillRun(r.gw, r.index);
    for (const c of state.charts) fillChart(c);
  }

  // --- charts ------------------------------------------------------------------------------
  // Each chart says what it shows from its first sample: a time axis of at least a minute
  // ending at the newest sample (uPlot alone spans years around a single point), a value axis
  // from 0 (never 0–100 for zeros), whole-number ticks for counts, and a line of text where
  // there is nothing to draw. What it drew is written on its box (data-x, data-y, data-ticks,
  // data-x-ticks for run numbers, data-series) for the tests and for anyone inspecting the page.
  const MIN_SPAN_S = 60;
  // Series that coincide (pushes/s and deltas/s when each push holds one delta, every series
  // at 0) stay visible: each is thinner and dashed finer than the one drawn before it.
  const STROKES = [{ width: 4 }, { width: 2.5, dash: [10, 5] }, { width: 1.5, dash: [3, 3] }];

  function integerTicks(u, axis, min, max) {
    const step = Math.max(1, Math.ceil((max - min) / 5));
    const ticks = [];
    for (let v = Math.ceil(min); v <= max; v += step) ticks.push(v);
    return ticks;
  }

  function chart(parent, key, title, series, data, opts) {
    const o = opts || {};
    const box = h("div", { class: "card chart", "data-chart": key }, h("h2", {}, title));
    const empty = h("p", { class: "label empty", hidden: true });
    box.append(empty);
    parent.append(box);
    const width = Math.max(240, box.clientWidth - 32);
    const record = (u) => {
      box.dataset.x = JSON.stringify([u.scales.x.min, u.scales.x.max]);
      box.dataset.y = JSON.stringify([u.scales.y.min, u.scales.y.max]);
    };
    const plot = new uPlot({
      width, height: 200,
      series: [{}, ...series.map((s, i) => {
        const color = PALETTE[i % PALETTE.length];
        return o.bars
          ? { label: s, stroke: color, width: 2, paths: uPlot.paths.bars({ size: [0.6, 40] }), fill: color + "88", points: { show: false } }
          : { label: s, stroke: color, spanGaps: true, ...STROKES[Math.min(i, STROKES.length - 1)] };
      })],
      axes: [
        o.bars ? {
          splits: (u, ...range) => (u.data[0].length ? integerTicks(u, ...range) : []),
          values: (u, ticks) => {
            box.dataset.xTicks = JSON.stringify(ticks.map(String));
            return ticks.map(String);
          },
        } : {},
        {
          size: 56,
          ...(o.counts ? { splits: integerTicks } : {}),
          values: (u, ticks) => {
            const labels = ticks.map((v) => (o.counts ? String(v) : String(+v.toFixed(3))));
            box.dataset.ticks = JSON.stringify(labels);
            return labels;
          },
        },
      ],
      scales: {
        x: o.bars
          ? { time: false, range: (u, min, max) => [0.5, Math.max(1, max ?? 0) + 0.5] }
          : { range: (u) => {
            // From the samples themselves: uPlot pads a lone point's range by years.
            const xs = u.data[0];
            const end = xs.length ? xs[xs.length - 1] : Date.now() / 1000;
            return [Math.min(xs.length ? xs[0] : end, end - MIN_SPAN_S), end];
          } },
        y: { range: (u, min, max) => [0, Math.max(1, o.counts ? max ?? 0 : (max ?? 0) * 1.1)] },
      },
      hooks: { draw: [record] },
    }, data(), box);
    box.dataset.series = JSON.stringify(plot.series.slice(1).map((s) => ({
      label: s.label, width: s.width, dash: s.dash || null })));
    state.charts.push({ plot, data, box, empty, emptyText: o.empty });
  }
  const PALETTE = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04"];

  // Draw a chart's data, or say why there is nothing to draw.
  function fillChart(c) {
    const data = c.data();
    c.plot.setData(data);
    const text = c.emptyText ? c.emptyText(data) : null;
    c.empty.hidden = !text;
    c.empty.textContent = text || "";
  }
  const noValues = (data) => data.slice(1).every((s) => s.every((v) => v === null));

  window.addEventListener("resize", () => {
    for (const c of state.charts) c.plot.setSize({ width: Math.max(240, c.box.clientWidth - 32), height: 200 });
  });

  function pointsOf(gw) { return state.history[gw] || []; }
  function col(points, f) { return points.map((p) => { const v = f(p); return v === undefined ? null : v; }); }

  // --- overview ----------------------------------------------------------------------------
  function renderOverview(view) {
    view.append(
      h("h1", {}, "Overview"),
      h("div", { id: "failing" }),
      h("div", { id: "gateways", class: "grid" }),
      h("div", { id: "charts", class: "charts" }),
    );
    const charts = $("charts");
    for (const g of state.status.gateways) {
      const gw = g.gateway;
      chart(charts, "rates", `${gw}: pushes, pulls and deltas per second`, ["pushes/s", "pulls/s", "deltas/s"], () => {
        const p = pointsOf(gw);
        return [col(p, (x) => x.at), col(p, (x) => x.push_rate), col(p, (x) => x.pull_rate), col(p, (x) => x.delta_rate)];
      }, { empty: (d) => (d[0].length < 2 ? "Rates need two samples: the next one comes within seconds." : null) });
      const dests = g.destinations.map((d) => d.name);
      chart(charts, "lag", `${gw}: lag in seconds (last hour)`, ["flush", "pipeline", ...dests], () => {
        const p = pointsOf(gw);
        return [col(p, (x) => x.at), col(p, (x) => x.landing_lag_s), col(p, (x) => x.pipeline_lag_s),
          ...dests.map((d) => col(p, (x) => x.destination_lag_s[d]))];
      }, { empty: (d) => (!d[0].length ? "No sample yet." : noValues(d) ? "No lag known yet." : null) });
      chart(charts, "clients", `${gw}: connected clients, failing connectors`, ["clients", "failing connectors"], () => {
        const p = pointsOf(gw);
        return [col(p, (x) => x.at), col(p, (x) => x.clients), col(p, (x) => x.connectors_failing)];
      }, { counts: true, empty: (d) => (!d[0].length ? "No sample yet." : null) });
      chart(charts, "runs", `${gw}: pipeline run durations (s, oldest → newest)`, ["duration"], () => {
        const runs = (gateway(gw)?.pipeline.runs || []).slice().reverse();
        return [runs.map((_, i) => i + 1), runs.map((r) => r.elapsed_s)];
      }, { bars: true, empty: (d) => (d[0].length ? null
        : "No runs yet: lakesync pipeline run (or server.pipeline_interval) makes one.") });
    }
  }

  function fillOverview() {
    const failing = state.status.failing;
    $("failing").replaceChildren(failing.length
      ? h("div", { class: "card failing", id: "failing-list" }, h("strong", {}, "Failing"),
        h("ul", {}, failing.map((line) => h("li", {}, problemLink(line)))))
      : h("p", { class: "ok", id: "all-well" }, "All is well: nothing is failing."));
    $("gateways").replaceChildren(...state.status.gateways.map((g) => {
      const last = pointsOf(g.gateway).at(-1);
      const run = g.pipeline.runs[0];
      const healthy = g.connectors.filter((c) => !c.failing).length;
      return h("div", { class: "card" + (g.failing.length ? " failing" : ""), "data-gateway": g.gateway },
        h("h2", {}, h("a", { href: `#/gateways/${enc(g.gateway)}` }, g.gateway)),
        h("div", { class: "label" }, "pushes · pulls · deltas"),
        h("div", { class: "stat", "data-metric": "counts" },
          last ? `${last.pushes} · ${last.pulls} · ${last.deltas}` : "–"),
        h("div", { class: "label" }, "connected clients"),
        h("div", { "data-metric": "clients" }, g.clients.reduce((n, c) => n + c.connections, 0)),
        h("div", { class: "label" }, "hot log entries · landing lag"),
        h("div", { "data-metric": "hotlog" }, `${g.hot_log.entries}${g.hot_log.entries_capped ? "+" : ""} · ${backlog(g.landing.lag)}`),
        h("div", { class: "label" }, "pipeline runs · last"),
        h("div", { "data-metric": "runs" }, run
          ? h("a", { href: `#/gateways/${enc(g.gateway)}/runs/0` },
            `${g.pipeline.runs.length} · ${run.ok ? "ok" : "failed"}, ${secs(run.elapsed_s)}, ${ago(run.started_at)}`)
          : "none recorded"),
        h("div", { class: "label" }, "connectors healthy"),
        h("div", { "data-metric": "connectors" }, `${healthy} / ${g.connectors.length}`));
    }));
  }

  // "gw: destination NAME ..." lines link to that destination's page.
  function problemLink(line) {
    const m = /^([^:]+): destination (\S+) /.exec(line);
    if (m) return h("a", { href: `#/gateways/${enc(m[1])}/destinations/${enc(m[2])}` }, line);
    const gw = line.split(":")[0];
    return h("a", { href: `#/gateways/${enc(gw)}` }, line);
  }

  // --- a gateway ---------------------------------------------------------------------------
  function renderGateway(view, gw) {
    view.append(
      h("p", {}, h("a", { href: "#/" }, "← Overview")),
      h("h1", {}, `Gateway ${gw}`),
      h("div", { id: "gw-body" }),
      h("h2", {}, "Tables"), h("div", { id: "gw-tables" }, "loading…"),
      h("h2", {}, "Sync rules"), h("div", { id: "gw-rules" }),
    );
    api(`gateways/${enc(gw)}`).then((d) => {
      $("gw-tables")?.replaceChildren(table(["table", "rows (hot log)", "columns"], d.tables.map((t) => [
        t.table, `${t.rows}${t.rows_capped ? "+" : ""}`,
        t.columns.map((c) => `${c.name} ${c.type}${c.nullable === false ? " not null" : ""}`).join(", "),
      ]), "tables"));
      $("gw-rules")?.replaceChildren(d.rules ? h("pre", {}, JSON.stringify(d.rules, null, 2))
        : h("p", { class: "label" }, "none: every row is visible to every client"));
    }).catch((e) => $("gw-tables")?.replaceChildren(h("p", { class: "error" }, e.message)));
  }

  function fillGateway(gw) {
    const g = gateway(gw);
    const body = $("gw-body");
    if (!g) { body.replaceChildren(h("p", { class: "error" }, `gateway ${gw} is not known here`)); return; }
    body.replaceChildren(
      g.failing.length ? h("div", { class: "card failing" }, h("ul", {}, g.failing.map((l) => h("li", {}, problemLink(l))))) : "",
      h("div", { class: "grid" },
        stat("hot log entries", `${g.hot_log.entries}${g.hot_log.entries_capped ? "+" : ""}`),
        stat("unflushed bytes", g.hot_log.unflushed_bytes),
        stat("last flush", ago(g.landing.last_flush_at)),
        stat("landing lag", backlog(g.landing.lag)),
        stat("pipeline freshness", secs(g.pipeline.freshness_s))),
      h("h2", {}, "Destinations"),
      table(["name", "kind", "lag", "last shipment", "error"], g.destinations.map((d) => [
        h("a", { href: `#/gateways/${enc(gw)}/destinations/${enc(d.name)}` }, d.name), d.kind,
        destinationLag(d), d.last_shipment_at ? `${d.last_rows} rows, ${ago(d.last_shipment_at)}` : "never",
        h("span", { class: "error" }, d.error || d.last_error || ""),
      ]), "destinations"),
      h("h2", {}, "Pipeline runs"),
      table(["started", "duration", "outcome", "rows merged", "rows shipped"], g.pipeline.runs.map((r, i) => [
        h("a", { href: `#/gateways/${enc(gw)}/runs/${i}` }, ago(r.started_at)), secs(r.elapsed_s),
        r.ok ? "ok" : h("span", { class: "error" }, "failed"), r.rows_merged, r.rows_shipped,
      ]), "runs"),
      h("h2", {}, "Connectors"),
      table(["name", "state", "last poll", "rows read", "last error"], g.connectors.map((c) => [
        c.name, c.state, ago(c.last_poll_at), c.rows_read,
        h("span", { class: c.failing ? "error" : "label" }, c.last_error || ""),
      ]), "connectors"),
      h("h2", {}, "Clients"),
      table(["client", "connections", "last seen", "pending outbox", "dead letters"], g.clients.map((c) => [
        c.client_id, c.connections, ago(c.last_seen_at), c.pending_outbox ?? "–", c.dead_letters ?? "–",
      ]), "clients"),
    );
  }

  // --- a destination, a run ------------------------------------------------------------------
  function fillDestination(gw, name) {
    const d = gateway(gw)?.destinations.find((x) => x.name === name);
    const out = [h("p", {}, h("a", { href: `#/gateways/${enc(gw)}` }, `← Gateway ${gw}`)),
      h("h1", {}, `Destination ${name}`)];
    if (!d) out.push(h("p", { class: "error" }, `no destination ${name} on gateway ${gw}`));
    else {
      const errors = [d.error && `unreachable: ${d.error}`, d.last_error && `last shipment failed: ${d.last_error}`].filter(Boolean);
      out.push(
        errors.length ? h("div", { class: "card failing", id: "destination-error" }, h("ul", {}, errors.map((e) => h("li", {}, e))))
          : h("p", { class: "ok" }, "Reachable; the last shipment succeeded."),
        h("div", { class: "grid" },
          stat("kind", d.kind), stat("lag", destinationLag(d), "destination-lag"),
          stat("last shipment", d.last_shipment_at ? `${d.last_rows} rows, ${ago(d.last_shipment_at)}` : "never"),
          stat("last error at", d.last_error_at ? ago(d.last_error_at) : "–")),
        h("h2", {}, "Tables"),
        d.error && !d.tables.length
          ? h("p", { class: "label", id: "destination-tables" }, "Unknown: the destination could not be read just now (its tables' watermarks live there).")
          : table(["table", "watermark", "lag"], d.tables.map((t) => [t.table, t.watermark ?? "never shipped", backlog(t.lag)]), "destination-tables"));
    }
    $("detail").replaceChildren(...out);
  }

  function fillRun(gw, index) {
    const r = gateway(gw)?.pipeline.runs[index];
    const out = [h("p", {}, h("a", { href: `#/gateways/${enc(gw)}` }, `← Gateway ${gw}`)),
      h("h1", {}, `Pipeline run ${index + 1} of ${gw} (newest first)`)];
    if (!r) out.push(h("p", { class: "error" }, "this run is no longer in the recorded history"));
    else out.push(
      r.ok ? h("p", { class: "ok" }, "Succeeded") : h("div", { class: "card failing", id: "run-error" }, r.error || "failed"),
      h("div", { class: "grid" },
        stat("started", new Date(r.started_at).toLocaleString()), stat("duration", secs(r.elapsed_s)),
        stat("rows merged", r.rows_merged), stat("rows shipped", r.rows_shipped),
        stat("complete through", r.position ?? "–")));
    $("detail").replaceChildren(...out);
  }

  // --- start -------------------------------------------------------------------------------
  $("sign-in").addEventListener("submit", (e) => { signIn(e).catch((err) => { $("sign-in-error").textContent = err.message; }); });
  $("sign-out").addEventListener("click", () => { signOut(); });
  window.addEventListener("hashchange", render);
  start().catch(() => showSignIn());
})();
