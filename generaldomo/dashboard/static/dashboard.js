/* generaldomo dashboard: renders the frames the dashboard streams (server-sent events at "events").
 *
 * Rules: no build step and no network beyond this page's own origin (uPlot ships beside this file); every
 * text from the broker goes into the page as text (textContent), never as markup; each number shown keeps
 * the broker's raw value in a data-value attribute. Names from the broker (services) are keys of Map objects
 * only, never of plain objects (where "constructor" or "__proto__" would find the object's own machinery).
 * The flow form has the fields the page's "flow-limits" meta tag lists (the dashboard makes them from the
 * flow limits' declarations) and sends only the limits changed in it, with the page's CSRF token. Memory is bounded:
 * WINDOW_MAX seconds of samples and bars per service charted. Each chart is as wide as its card, whenever
 * the card's width changes (a ResizeObserver), and its time axis keeps TICK_SPACE pixels between two
 * labels, wider than any label, so labels never overlap.
 */
"use strict";

(function () {
  const WINDOW_MAX = 300; // seconds the charts may show (the dashboard keeps as much history)
  const STALE_AFTER = 4; // seconds without a frame before the page says so
  const REFUSED_RETRY = 10; // seconds before a page whose stream was refused asks again
  const MIN_ROWS = 20; // rows a timeline has at least (one per task in the window)
  const TICK_SPACE = 90; // pixels at least between two time labels (a label, "23:59:59", is about 55)
  const COLOURS = { queued: "#1f77b4", processing: "#ff7f0e", inFlight: "#2ca02c", cap: "#d62728" };
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  // the flow form's fields, as the dashboard serves them (made from the flow limits' declarations): name, label,
  // fields (a range has two: NAME_min and NAME_max), whole, placeholder, size, summary and format
  const CONTROLS = JSON.parse(document.querySelector('meta[name="flow-limits"]').content);
  const FIELDS = CONTROLS.flatMap((c) => c.fields);

  const state = {
    last: null, // the last frame
    lastAt: 0, // when it came (browser clock, seconds)
    services: new Map(), // name -> {samples: [[at, queued, in_flight, cap, rate]], bars: [[arrived, dispatched, ended, row]], rows}
    charted: new Set(JSON.parse(localStorage.getItem("generaldomo-charted") || "null") || []),
    chosen: localStorage.getItem("generaldomo-charted") !== null, // the user picked the charts
    charts: new Map(), // name -> {panel, timeline, flow}
    window: Number(localStorage.getItem("generaldomo-window") || 60),
    editing: null, // the service in the flow form, and the values it was filled with
  };

  const $ = (selector) => document.querySelector(selector);
  const mapOf = (object) => new Map(Object.entries(object || {})); // JSON keyed by names, as a Map

  function element(tag, attributes, text) {
    const made = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value !== undefined && value !== null) made.setAttribute(key, value);
    }
    if (text !== undefined && text !== null) made.textContent = String(text);
    return made;
  }

  // ------------------------------------------------------------------------------------- formatting

  const fmt = {
    count: (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US")),
    rate: (n) => (n === null || n === undefined ? "–" : Number(n).toFixed(n < 10 ? 2 : 1)),
    ms: (s) => (s === null || s === undefined ? "–" : (s * 1000).toFixed(s < 0.01 ? 2 : 1)),
    seconds: (s) => (s === null || s === undefined ? "–" : Number(s).toFixed(1)),
    bytes: (n) => {
      if (n === null || n === undefined) return "–";
      const units = ["B", "KiB", "MiB", "GiB"];
      let value = n, unit = 0;
      while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
      return (unit ? value.toFixed(1) : value) + " " + units[unit];
    },
    uptime: (s) => {
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
      return (h ? h + " h " : "") + (h || m ? m + " min " : "") + sec + " s";
    },
    text: (t) => (t === null || t === undefined || t === "" ? "–" : String(t)),
  };

  function cell(field, value, format, extra) {
    const td = element("td", { "data-field": field, "data-value": value === null || value === undefined ? "" : String(value), class: extra }, format(value));
    return td;
  }

  // ------------------------------------------------------------------------------------- the stream

  function connect() {
    const source = new EventSource("events");
    source.addEventListener("history", (event) => history(JSON.parse(event.data)));
    source.addEventListener("frame", (event) => frame(JSON.parse(event.data)));
    source.addEventListener("trouble", (event) => trouble(JSON.parse(event.data).error));
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) {
        setState("disconnected", "the dashboard does not answer; retrying…");
        return;
      }
      // refused (too many pages open at once, or a token that no longer holds): ask again later
      setState("disconnected", "the dashboard refused this page's stream (too many pages open?); retrying in " + REFUSED_RETRY + " s…");
      setTimeout(connect, REFUSED_RETRY * 1000);
    };
  }

  function history(data) {
    state.services.clear();
    for (const [name, samples] of mapOf(data.samples)) {
      const service = known(name);
      service.samples = samples;
    }
    for (const [name, bars] of mapOf(data.bars)) addBars(known(name), bars);
    if (data.last && data.last.kind === "frame") frame(data.last, true);
    else if (data.last) trouble(data.last.error);
  }

  function known(name) {
    let service = state.services.get(name);
    if (!service) {
      service = { samples: [], bars: [], rows: 0 };
      state.services.set(name, service);
    }
    return service;
  }

  function addBars(service, bars) {
    for (const [arrived, dispatched, ended] of bars) service.bars.push([arrived, dispatched, ended, service.rows++]);
  }

  function frame(data, replayed) {
    state.last = data;
    state.lastAt = Date.now() / 1000;
    if (!replayed) {
      for (const s of data.services) {
        known(s.name).samples.push([data.at, s.queued, s.in_flight, s.cap, s.observed_rate]);
      }
      for (const [name, bars] of mapOf(data.bars)) addBars(known(name), bars);
    }
    const shown = new Set(data.services.map((s) => s.name));
    for (const name of [...state.services.keys()]) if (!shown.has(name)) state.services.delete(name);
    for (const service of state.services.values()) prune(service, data.at - WINDOW_MAX);
    if (!state.chosen) state.charted = new Set(data.services.slice(0, 4).map((s) => s.name));
    const slow = data.every > 1.5 ? " (every " + data.every.toFixed(1) + " s: a large report)" : "";
    setState("live", "live: " + new Date(data.at * 1000).toLocaleTimeString() + slow);
    renderBroker(data);
    renderServices(data);
    renderWorkers(data);
    renderControl(data);
    renderCharts(data);
  }

  function prune(service, oldest) {
    while (service.samples.length && service.samples[0][0] < oldest) service.samples.shift();
    while (service.bars.length && service.bars[0][2] < oldest) service.bars.shift();
  }

  function trouble(text) {
    setState("stale", text);
  }

  function setState(kind, text) {
    const box = $("#state");
    box.dataset.state = kind;
    box.textContent = text;
  }

  setInterval(() => {
    const late = STALE_AFTER + (state.last ? state.last.every : 0);
    if (state.last && Date.now() / 1000 - state.lastAt > late && $("#state").dataset.state === "live") {
      setState("stale", "no news from the broker for " + Math.round(Date.now() / 1000 - state.lastAt) + " s");
    }
  }, 1000);

  // ------------------------------------------------------------------------------------- broker and counters

  function renderBroker(data) {
    const b = data.broker;
    $("#broker-instance").textContent = b.instance || "–";
    $("#broker-uptime").textContent = fmt.uptime(b.uptime);
    $("#broker-endpoints").textContent = b.endpoints.join(", ") || "–";
    const pair = b.pair;  // null: a broker alone
    $("#broker-pair").textContent = !pair ? "–" : pair.role + ", " + pair.state + "; peer " +
      (pair.last_contact == null ? "never heard" : (pair.peer_state || "?") + ", heard " + pair.last_contact.toFixed(1) + " s ago") +
      (pair.lag_records == null ? "" : "; replication lag " + fmt.count(pair.lag_records) + " records, " +
        pair.lag_seconds.toFixed(1) + " s") +
      (pair.state === "active" || pair.state === "passive" ? "; replicated " + fmt.count(pair.replicated_requests) +
        " requests, " + fmt.count(pair.replicated_answers) + " answers" : "");
    $("#broker-pair").dataset.state = pair ? pair.state : "";
    const totals = $("#totals");
    totals.replaceChildren();
    const cards = [
      ["services", "services", b.services, fmt.count],
      ["workers", "workers", b.workers, fmt.count],
      ["queued", "queued", b.queued, fmt.count],
      ["in_flight", "in flight", b.in_flight, fmt.count],
      ["queued_bytes", "bytes held", b.queued_bytes, fmt.bytes],
      ["kept_answers", "kept answers", b.kept_answers, fmt.count],
      ["dead_letters", "dead letters", b.dead_letters, fmt.count],
    ];
    for (const [field, label, value, format] of cards) {
      const card = element("div", { class: "card", "data-field": field, "data-value": String(value) });
      card.append(element("span", { class: "value" }, format(value)), element("span", { class: "label" }, label));
      totals.append(card);
    }
    renderDead(b);
    for (const group of ["totals", "refused", "dropped"]) {
      const list = $("#counters-" + group);
      list.replaceChildren();
      const entries = Object.entries(data.counters[group] || {});
      if (!entries.length) list.append(element("li", { class: "none" }, "none"));
      for (const [name, value] of entries) {
        const item = element("li", { "data-counter": name, "data-value": String(value) });
        item.append(element("span", {}, name.replaceAll("_", " ")), element("b", {}, fmt.count(value)));
        list.append(item);
      }
    }
  }

  function renderDead(b) {
    // the services with the most dead letters (the report names at most ten), and how many services have any
    const list = $("#dead-services");
    list.replaceChildren();
    const services = b.dead_services || [];
    $("#dead-count").textContent = b.dead_service_count > services.length
      ? "(" + services.length + " of " + b.dead_service_count + " services)" : "";
    if (!services.length) list.append(element("li", { class: "none" }, "none"));
    for (const s of services) {
      const item = element("li", { "data-dead-service": s.service, "data-value": String(s.count), title: "newest " + Math.round(s.newest_age) + " s ago; generaldomo dead list " + s.service });
      item.append(element("span", {}, s.service), element("b", {}, fmt.count(s.count)));
      list.append(item);
    }
  }

  // ------------------------------------------------------------------------------------- services

  function limitsText(s) {
    const f = s.flow, parts = [];
    for (const c of CONTROLS) {
      const value = f[c.name];
      if (value === null || value === undefined) continue;
      const shown = (key) => (key === "value" ? (fmt[c.format] || fmt.count)(value) : fmt.text(value[key]));
      parts.push(c.summary.replace(/\{(\w+)\}/g, (_, key) => shown(key)));
    }
    return parts.join(", ") || "none";
  }

  function buildControls() {
    const holder = $("#control-limits");
    for (const c of CONTROLS) {
      c.fields.forEach((field, index) => {
        const label = c.fields.length === 1 ? c.label : index ? "max" : c.label + " min";
        const input = element("input", { id: "limit-" + field, inputmode: c.whole ? "numeric" : "decimal", placeholder: c.placeholder, size: String(c.size), title: c.help });
        const wrapper = element("label", {}, label + " ");
        wrapper.append(input);
        holder.append(wrapper, " ");
      });
    }
  }

  function renderServices(data) {
    const body = $("#services tbody");
    body.replaceChildren();
    $("#services-count").textContent = data.services_total > data.services.length
      ? "(" + data.services.length + " of " + data.services_total + ")" : "(" + data.services_total + ")";
    for (const s of data.services) {
      const row = element("tr", { "data-service": s.name });
      const toggle = element("input", { type: "checkbox", title: "chart this service", "aria-label": "chart " + s.name });
      toggle.checked = state.charted.has(s.name);
      toggle.addEventListener("change", () => {
        if (toggle.checked) state.charted.add(s.name); else state.charted.delete(s.name);
        state.chosen = true;
        localStorage.setItem("generaldomo-charted", JSON.stringify([...state.charted]));
        renderCharts(state.last);
      });
      const pick = element("td", { class: "pick" });
      pick.append(toggle);
      row.append(
        pick,
        cell("name", s.name, fmt.text, "name"),
        cell("workers", s.workers, fmt.count),
        cell("waiting", s.waiting, fmt.count),
        cell("queued", s.queued, fmt.count),
        cell("in_flight", s.in_flight, fmt.count),
        cell("cap", s.cap, fmt.count),
        cell("completed", s.completed, fmt.count),
        cell("failed", s.failed, fmt.count),
        cell("reissued", s.reissued, fmt.count),
        cell("expired", s.expired, fmt.count),
        cell("observed_rate", s.observed_rate, fmt.rate),
        cell("queue_p50", s.queue_time.p50, fmt.ms),
        cell("queue_p90", s.queue_time.p90, fmt.ms),
        cell("queue_p99", s.queue_time.p99, fmt.ms),
        cell("service_p50", s.service_time.p50, fmt.ms),
        cell("service_p90", s.service_time.p90, fmt.ms),
        cell("service_p99", s.service_time.p99, fmt.ms),
        element("td", { "data-field": "limits", class: "limits" }, limitsText(s)),
      );
      if (data.control) {
        const edit = element("button", { type: "button", class: "edit", "data-edit": s.name }, "limits…");
        edit.addEventListener("click", () => choose(s.name));
        const td = element("td");
        td.append(edit);
        row.append(td);
      }
      body.append(row);
    }
    $("#services").classList.toggle("with-control", Boolean(data.control));
  }

  // ------------------------------------------------------------------------------------- workers

  function renderWorkers(data) {
    const body = $("#workers tbody");
    body.replaceChildren();
    $("#workers-count").textContent = data.workers_total > data.workers.length
      ? "(" + data.workers.length + " of " + data.workers_total + ")" : "(" + data.workers_total + ")";
    for (const w of data.workers) {
      const row = element("tr", { "data-peer": w.peer });
      row.append(
        cell("host", w.host, fmt.text),
        cell("pid", w.pid, fmt.text),
        cell("service", w.service, fmt.text, "name"),
        cell("state", w.state, fmt.text, "state-" + w.state),
        cell("tasks_done", w.tasks_done, fmt.count),
        cell("last_seen", w.last_seen, fmt.seconds),
        cell("dialect", w.dialect, fmt.text),
        cell("peer", w.peer, fmt.text, "peer"),
      );
      body.append(row);
    }
  }

  // ------------------------------------------------------------------------------------- flow control

  function current(name) {
    return state.last && state.last.services.find((s) => s.name === name);
  }

  function values(s) {
    const f = s ? s.flow : {};
    const text = (v) => (v === null || v === undefined ? "" : String(v));
    const filled = {};
    for (const c of CONTROLS) {
      const value = f[c.name];
      if (c.fields.length === 1) filled[c.name] = text(value);
      else [filled[c.fields[0]], filled[c.fields[1]]] = [text(value && value.min), text(value && value.max)];
    }
    return filled;
  }

  function choose(name) {
    const select = $("#control-service");
    select.value = name;
    const filled = values(current(name));
    for (const key of FIELDS) $("#limit-" + key).value = filled[key];
    state.editing = { name, filled };
    $("#control-result").textContent = "";
    $("#control").scrollIntoView({ block: "nearest" });
  }

  function renderControl(data) {
    const section = $("#control");
    section.hidden = !data.control;
    if (!data.control) return;
    const select = $("#control-service");
    const names = data.services.map((s) => s.name);
    const had = [...select.options].map((o) => o.value);
    if (names.join("\n") !== had.join("\n")) {
      const keep = select.value;
      select.replaceChildren(...names.map((n) => element("option", { value: n }, n)));
      if (names.includes(keep)) select.value = keep;
    }
    if (!state.editing && names.length) choose(names[0]);
  }

  function number(text, whole) {
    const trimmed = text.trim();
    if (trimmed === "" || trimmed.toLowerCase() === "none") return null;
    const value = Number(trimmed);
    if (!Number.isFinite(value) || (whole && !Number.isInteger(value))) throw new Error("not a " + (whole ? "whole " : "") + "number: " + trimmed);
    return value;
  }

  function changes() {
    const filled = state.editing.filled, now = {}, limits = {};
    for (const key of FIELDS) now[key] = $("#limit-" + key).value;
    for (const c of CONTROLS) {
      if (!c.fields.some((key) => now[key].trim() !== filled[key])) continue;
      if (c.fields.length === 1) {
        limits[c.name] = number(now[c.name], c.whole);
        continue;
      }
      const min = number(now[c.fields[0]], c.whole), max = number(now[c.fields[1]], c.whole);
      limits[c.name] = min === null && max === null ? null : Object.fromEntries(
        Object.entries({ min, max }).filter(([, v]) => v !== null));
    }
    return limits;
  }

  async function apply(event) {
    event.preventDefault();
    const result = $("#control-result");
    const name = $("#control-service").value;
    if (!state.editing || state.editing.name !== name) choose(name);
    let limits;
    try {
      limits = changes();
    } catch (error) {
      result.dataset.outcome = "error";
      result.textContent = error.message;
      return;
    }
    if (!Object.keys(limits).length) {
      result.dataset.outcome = "error";
      result.textContent = "nothing changed";
      return;
    }
    result.dataset.outcome = "pending";
    result.textContent = "asking the broker…";
    const answer = await fetch("api/flow", {
      method: "POST",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify({ service: name, limits }),
      credentials: "same-origin",
    });
    const data = await answer.json().catch(() => ({ error: answer.statusText }));
    if (answer.ok) {
      result.dataset.outcome = "ok";
      result.textContent = "in force for " + name + ": " + limitsText({ flow: data });
      state.editing = { name, filled: values({ flow: data }) };
    } else {
      result.dataset.outcome = "error";
      result.textContent = answer.status + ": " + (data.error || answer.statusText);
    }
  }

  // ------------------------------------------------------------------------------------- charts

  function renderCharts(data) {
    if (typeof uPlot === "undefined" || !data) return;
    const names = data.services.map((s) => s.name).filter((n) => state.charted.has(n));
    for (const [name, chart] of [...state.charts]) {
      if (!names.includes(name)) {
        chart.resized.disconnect();
        chart.timeline.destroy();
        chart.flow.destroy();
        chart.panel.remove();
        state.charts.delete(name);
      }
    }
    const hi = data.at, lo = hi - state.window, missed = mapOf(data.bars_missed);
    for (const name of names) {
      const service = known(name), s = current(name);
      const chart = state.charts.get(name) || makeChart(name, { lo, hi, service });
      chart.view = { lo, hi, service };
      chart.caption.textContent = captionText(name, s, missed.get(name));
      const samples = service.samples.filter((p) => p[0] >= lo - 1);
      chart.flow.setData([samples.map((p) => p[0]), samples.map((p) => p[1]), samples.map((p) => p[2]), samples.map((p) => p[3])]);
      chart.timeline.setData([[lo, hi], [null, null]]);
    }
  }

  function captionText(name, s, missed) {
    const parts = [name + ": " + fmt.count(s.in_flight) + " in flight" + (s.cap !== null ? " of " + s.cap : " (no cap)"), fmt.count(s.queued) + " queued", fmt.rate(s.observed_rate) + " done/s"];
    if (missed) parts.push("last second: " + missed + " completions not drawn");
    return parts.join(" · ");
  }

  function width(panel) {
    const style = getComputedStyle(panel);
    return Math.max(100, Math.floor(panel.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)));
  }

  function clock(seconds) {
    const t = new Date(seconds * 1000), two = (n) => String(n).padStart(2, "0");
    return two(t.getHours()) + ":" + two(t.getMinutes()) + ":" + two(t.getSeconds());
  }

  function timeAxis() {
    return { space: TICK_SPACE, values: (u, splits) => splits.map((t) => (t === null ? null : clock(t))) };
  }

  function fit(chart) {
    const now = width(chart.panel);
    if (now === chart.width) return;
    chart.width = now;
    chart.timeline.setSize({ width: now, height: 200 });
    chart.flow.setSize({ width: now, height: 130 });
  }

  function makeChart(name, view) {
    const panel = element("div", { class: "chart", "data-chart": name });
    const caption = element("div", { class: "caption" });
    const legend = element("div", { class: "legend" });
    for (const [label, colour] of [["queued", COLOURS.queued], ["processing", COLOURS.processing], ["in flight", COLOURS.inFlight], ["cap", COLOURS.cap]]) {
      const key = element("span", { class: "key" });
      const swatch = element("i");
      swatch.style.background = colour;
      key.append(swatch, document.createTextNode(label));
      legend.append(key);
    }
    const timelineBox = element("div"), flowBox = element("div");
    panel.append(caption, legend, timelineBox, flowBox);
    $("#charts").append(panel);
    const chart = { panel, caption, view, width: width(panel) };
    const range = () => [chart.view.lo, chart.view.hi];
    chart.timeline = new uPlot({
      width: chart.width, height: 200,
      legend: { show: false }, cursor: { show: false },
      scales: { x: { time: true, range }, y: { range: [0, 1] } },
      axes: [timeAxis(), { show: true, label: "tasks (by end)", values: () => [], size: 40 }],
      series: [{}, { stroke: "transparent", points: { show: false } }],
      hooks: { draw: [(u) => drawBars(u, chart)] },
    }, [[0, 1], [null, null]], timelineBox);
    chart.flow = new uPlot({
      width: chart.width, height: 130,
      legend: { show: false },
      scales: { x: { time: true, range }, y: { range: (u, min, max) => [0, Math.max(1, (max || 0) * 1.2)] } },
      axes: [timeAxis(), { label: "tasks", size: 40 }],
      series: [
        {},
        { label: "queued", stroke: COLOURS.queued, width: 1.5, points: { show: false } },
        { label: "in flight", stroke: COLOURS.inFlight, width: 2, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
        { label: "cap", stroke: COLOURS.cap, width: 1.5, dash: [6, 4], paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } },
      ],
    }, [[], [], [], []], flowBox);
    chart.resized = new ResizeObserver(() => fit(chart)); // a card's width changes with the others and the window
    chart.resized.observe(panel);
    state.charts.set(name, chart);
    return chart;
  }

  function drawBars(u, chart) {
    if (!chart.view) return;
    const { lo, hi, service } = chart.view;
    const visible = service.bars.filter((b) => b[2] >= lo && b[0] <= hi);
    if (!visible.length) return;
    const first = visible[0][3], last = visible[visible.length - 1][3];
    const rows = last - first + 1;
    const { left, top, width: w, height: h } = u.bbox;
    const rowHeight = h / Math.max(rows, MIN_ROWS); // a few tasks are thin bars too, not blocks
    const ctx = u.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, w, h);
    ctx.clip();
    const thick = Math.max(1, rowHeight * 0.8);
    for (const [arrived, dispatched, ended, row] of visible) {
      const y = top + (row - first) * rowHeight;
      const x0 = u.valToPos(arrived, "x", true), x1 = u.valToPos(dispatched, "x", true), x2 = u.valToPos(ended, "x", true);
      ctx.fillStyle = COLOURS.queued;
      ctx.fillRect(x0, y, Math.max(1, x1 - x0), thick);
      ctx.fillStyle = COLOURS.processing;
      ctx.fillRect(x1, y, Math.max(1, x2 - x1), thick);
    }
    ctx.restore();
  }

  // ------------------------------------------------------------------------------------- start

  document.addEventListener("DOMContentLoaded", () => {
    const windowSelect = $("#window");
    windowSelect.value = String(state.window);
    windowSelect.addEventListener("change", () => {
      state.window = Number(windowSelect.value);
      localStorage.setItem("generaldomo-window", windowSelect.value);
      renderCharts(state.last);
    });
    buildControls();
    $("#control-form").addEventListener("submit", apply);
    $("#control-service").addEventListener("change", () => choose($("#control-service").value));
    connect();
  });
})();
