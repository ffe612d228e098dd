// skewwatch live view. Reads /api/v1/history and /api/v1/alerts (GET only) every window and
// draws them. Every name from input is written with textContent, never as markup.
"use strict";

const ROW_PX = 12;
const HOT_SPAN = 8; // cells at 8x the noise floor's ratio or more are drawn at full brightness
const view = { group: null, shard: null, data: null, alerts: [], failures: 0, since: null };

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(x < 0.1 ? 2 : 1) + "%");
const num = (x, d = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (!r.ok) throw new Error(path + " answered " + r.status);
  return r.json();
}

async function poll() {
  let wait = 2;
  try {
    const q = view.group === null ? "" : "?group=" + encodeURIComponent(view.group);
    const [data, alerts] = await Promise.all([getJson("/api/v1/history" + q), getJson("/api/v1/alerts")]);
    view.data = data;
    view.alerts = alerts.data.alerts;
    view.failures = 0;
    view.since = null;
    if (view.group === null && data.group !== null) view.group = data.group;
    render();
    wait = Math.min(Math.max(data.window_secs, 1), 30);
  } catch (e) {
    view.failures += 1;
    if (view.since === null) view.since = new Date();
    offline(e);
  }
  setTimeout(poll, wait * 1000);
}

function offline(e) {
  document.body.dataset.state = "offline";
  const b = $("banner");
  b.hidden = false;
  b.textContent = "The agent stopped answering at " + view.since.toLocaleTimeString() +
    " (" + view.failures + " failed polls: " + e.message + "). Showing the last data it sent; retrying.";
}

function render() {
  const d = view.data;
  document.body.dataset.state = "live";
  $("banner").hidden = true;
  renderGroups(d);
  const last = d.windows.length ? d.windows[d.windows.length - 1] : null;
  $("updated").textContent = last
    ? "window ending " + new Date(last.end * 1000).toLocaleTimeString() + " · " +
      d.window_secs + " s windows · " + d.windows.length + " of " + d.capacity + " kept"
    : "no window with traffic yet";
  if (view.shard === null || !d.shards.includes(view.shard)) view.shard = d.shards[0] ?? null;
  renderHeadline(d, last);
  renderHeatmap(d);
  renderSkew(d);
  renderAlerts();
  renderCache(d);
  renderWhatIf(d);
  renderKeys(d);
}

function renderGroups(d) {
  const sel = $("group");
  const names = d.groups.includes(d.group) || d.group === null ? d.groups : [d.group, ...d.groups];
  if (sel.dataset.names === JSON.stringify(names)) return;
  sel.dataset.names = JSON.stringify(names);
  clear(sel);
  for (const g of names) {
    const o = el("option", g);
    o.value = g;
    o.selected = g === d.group;
    sel.appendChild(o);
  }
}

function renderHeadline(d, last) {
  const h = $("headline");
  clear(h);
  if (!last || !d.shards.length) {
    h.textContent = "No traffic for this group in the windows kept.";
    $("figures").textContent = "";
    return;
  }
  const hot = d.shards[0];
  const share = last.cells[0] ? last.cells[0][0] : null;
  const beyond = share !== null && last.top1_noise_floor !== null && share > last.top1_noise_floor;
  h.appendChild(el("span", "Busiest shard "));
  const name = el("span", hot, "shard");
  name.id = "hot-shard";
  h.appendChild(name);
  h.appendChild(el("span", ": " + pct(share) + " of requests, fair share " + pct(last.fair_share) +
    (beyond ? " — beyond what noise explains (" : " — within noise (") + "≤ " + pct(last.top1_noise_floor) + ")."));
  $("figures").textContent = num(last.requests_per_second, 0) + " req/s over " + d.shards_total +
    " shards · Gini " + num(last.gini, 3) + " (noise " + num(last.gini_noise_floor, 3) + ") · errors " +
    pct(last.error_ratio) + " · p99 " + num(last.p99_ms, 1) + " ms";
}

// A window's column: the newest on the right edge, each placed by its end time, so windows in
// which the group had no traffic leave a gap rather than squeezing time together.
function column(d, w) {
  const newest = d.windows[d.windows.length - 1].end;
  const back = Math.round((newest - w.end) / d.window_secs);
  return Math.max(d.capacity, 1) - 1 - back;
}

// Brightness of a cell: its share over fair share against the ratio noise explains.
function heat(share, w) {
  if (!(w.fair_share > 0)) return { level: 0, hot: false };
  const ratio = share / w.fair_share;
  const noise = w.top1_noise_floor !== null ? w.top1_noise_floor / w.fair_share : 1;
  if (ratio <= noise) return { level: 0.35 * Math.min(ratio / noise, 1), hot: false };
  const over = Math.min(Math.log(ratio / noise) / Math.log(HOT_SPAN), 1);
  return { level: 0.45 + 0.55 * over, hot: true };
}

function colour(h) {
  if (!h.hot) return "hsl(210, 35%, " + (10 + 40 * h.level / 0.35).toFixed(1) + "%)";
  return "hsl(" + (28 + 32 * h.level).toFixed(1) + ", 100%, " + (40 + 55 * (h.level - 0.45) / 0.55).toFixed(1) + "%)";
}

function renderHeatmap(d) {
  const canvas = $("heatmap");
  const cols = Math.max(d.capacity, 1);
  const cellW = canvas.width / cols;
  canvas.height = Math.max(d.shards.length, 1) * ROW_PX;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#0b0d10";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const matrix = d.shards.map(() => []);
  d.windows.forEach((w, c) => {
    w.cells.forEach((cell, r) => {
      const h = cell ? heat(cell[0], w) : null;
      matrix[r].push(h ? Number(h.level.toFixed(4)) : null);
      if (!h) return;
      ctx.fillStyle = colour(h);
      ctx.fillRect(column(d, w) * cellW, r * ROW_PX, Math.ceil(cellW), ROW_PX - 1);
    });
  });
  // What the tests and curious readers can check against the picture.
  canvas.dataset.matrix = JSON.stringify(matrix);
  canvas.dataset.geometry = JSON.stringify({ cellW, rowPx: ROW_PX, columns: cols });
  const rows = $("heatmap-rows");
  clear(rows);
  d.shards.forEach((s) => {
    const li = el("li", s, s === view.shard ? "selected" : "");
    li.title = s;
    li.addEventListener("click", () => { view.shard = s; render(); });
    rows.appendChild(li);
  });
  renderLegend(d);
}

function renderLegend(d) {
  const c = $("legend");
  const ctx = c.getContext("2d");
  const last = d.windows[d.windows.length - 1];
  const noise = last && last.top1_noise_floor !== null ? last.top1_noise_floor / last.fair_share : 1;
  const maxRatio = noise * HOT_SPAN;
  for (let x = 0; x < c.width; x++) {
    const ratio = (x / c.width) * maxRatio;
    ctx.fillStyle = colour(heat(ratio, { fair_share: 1, top1_noise_floor: noise }));
    ctx.fillRect(x, 0, 1, c.height);
  }
  // The noise floor marked on the scale.
  const nx = Math.round((noise / maxRatio) * c.width);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(nx, 0, 2, c.height);
  $("legend-text").textContent = "0 … " + num(maxRatio, 1) + "× fair share; white mark: noise floor at " +
    num(noise, 2) + "× fair share (the largest share noise explains now)";
}

function renderSkew(d) {
  const c = $("skew");
  const ctx = c.getContext("2d");
  ctx.fillStyle = "#0b0d10";
  ctx.fillRect(0, 0, c.width, c.height);
  const ws = d.windows;
  const cols = Math.max(d.capacity, 1);
  const cellW = c.width / cols;
  const vals = ws.flatMap((w) => [w.gini, w.gini_noise_floor, w.top1_share, w.top1_noise_floor]).filter((v) => v !== null);
  const top = Math.min(1, Math.max(0.1, ...vals) * 1.1);
  ctx.fillStyle = "#8b96a3";
  ctx.font = "10px DejaVu Sans, sans-serif";
  ctx.fillText(num(top, 2), 2, 10);
  ctx.fillText("0", 2, c.height - 2);
  const line = (key, colourName, dashed) => {
    ctx.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue(colourName);
    ctx.setLineDash(dashed ? [4, 3] : []);
    ctx.lineWidth = dashed ? 1 : 2;
    ctx.beginPath();
    let open = false;
    ws.forEach((w) => {
      const v = w[key];
      if (v === null) { open = false; return; }
      const x = (column(d, w) + 0.5) * cellW;
      const y = c.height - (v / top) * (c.height - 4);
      if (open) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      open = true;
    });
    ctx.stroke();
  };
  line("gini_noise_floor", "--gini", true);
  line("top1_noise_floor", "--top1", true);
  line("gini", "--gini", false);
  line("top1_share", "--top1", false);
  ctx.setLineDash([]);
}

function renderAlerts() {
  const list = $("alerts");
  clear(list);
  const mine = view.alerts
    .filter((a) => a.labels.group === view.group || a.labels.group === undefined)
    .sort((a, b) => (a.state === b.state ? 0 : a.state === "firing" ? -1 : 1));
  if (!mine.length) {
    list.appendChild(el("li", "No active alert for this group."));
    return;
  }
  for (const a of mine) {
    const li = el("li", null, a.state);
    const where = ["shard", "key"].filter((k) => a.labels[k] !== undefined).map((k) => k + " " + a.labels[k]);
    li.appendChild(el("div", a.labels.alertname + " · " + a.state + (where.length ? " · " + where.join(" · ") : ""), "title"));
    const ann = a.annotations;
    if (ann.summary) li.appendChild(el("p", ann.summary, "summary"));
    if (ann.description) li.appendChild(el("p", ann.description, "description"));
    if (ann.mitigations) {
      const ul = el("ul", null, "mitigations");
      for (const m of ann.mitigations.split("; ")) ul.appendChild(el("li", m));
      li.appendChild(el("div", "Mitigations:"));
      li.appendChild(ul);
    }
    const dl = el("dl");
    for (const [k, v] of Object.entries(ann)) {
      if (k === "summary" || k === "description" || k === "mitigations") continue;
      dl.appendChild(el("dt", k));
      dl.appendChild(el("dd", v));
    }
    dl.appendChild(el("dt", "active since"));
    dl.appendChild(el("dd", a.activeAt));
    li.appendChild(dl);
    list.appendChild(li);
  }
}

function renderCache(d) {
  const section = $("cache-section");
  section.hidden = d.cache === null;
  if (d.cache === null) return;
  const dl = $("cache");
  clear(dl);
  const rows = [
    ["hit ratio now", pct(d.cache.hit_ratio)],
    ["backend calls per request", num(d.cache.backend_calls_per_request, 3)],
    ["calmest window shown", num(d.cache.calmest_backend_calls_per_request, 3)],
    ["amplification", d.cache.amplification === null ? "–" : num(d.cache.amplification, 1) + "×"],
  ];
  for (const [k, v] of rows) {
    dl.appendChild(el("dt", k));
    dl.appendChild(el("dd", v));
  }
}

// A TTL as the policies write it: 10s, 5m, 1h.
function ttl(secs) {
  if (secs >= 3600 && secs % 3600 === 0) return secs / 3600 + "h";
  if (secs >= 60 && secs % 60 === 0) return secs / 60 + "m";
  return secs + "s";
}

// The simulated cache: hit ratio against TTL (log scale), each point with the sample's error
// bound as a bar; the cache as configured ringed, the cache's own hit ratio dashed, the other
// candidates (serve-stale, negative caching) as diamonds at their TTL.
function renderWhatIf(d) {
  const w = d.whatif;
  $("whatif-section").hidden = !w;
  if (!w) return;
  const c = $("whatif");
  const ctx = c.getContext("2d");
  ctx.fillStyle = "#0b0d10";
  ctx.fillRect(0, 0, c.width, c.height);
  const all = w.ttl_curve.concat(w.others);
  const ttls = all.map((p) => p.ttl_secs);
  const lo = Math.log(Math.min(...ttls)), hi = Math.log(Math.max(...ttls));
  const padX = 34, top = 14, bottom = c.height - 22;
  const x = (t) => (hi > lo ? padX + ((Math.log(t) - lo) / (hi - lo)) * (c.width - 2 * padX) : c.width / 2);
  const y = (h) => bottom - Math.min(Math.max(h, 0), 1) * (bottom - top);
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name);
  ctx.font = "10px DejaVu Sans, sans-serif";
  ctx.fillStyle = css("--dim");
  ctx.strokeStyle = "#2a323b";
  for (const h of [0, 0.5, 1]) {
    ctx.beginPath(); ctx.moveTo(padX, y(h)); ctx.lineTo(c.width - padX / 2, y(h)); ctx.stroke();
    ctx.fillText(pct(h), 2, y(h) + 3);
  }
  for (const t of [...new Set(w.ttl_curve.map((p) => p.ttl_secs))]) ctx.fillText(ttl(t), x(t) - 8, c.height - 6);
  if (w.cache_hit_ratio !== null) {
    ctx.strokeStyle = css("--hot");
    ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(padX, y(w.cache_hit_ratio)); ctx.lineTo(c.width - padX / 2, y(w.cache_hit_ratio)); ctx.stroke();
    ctx.setLineDash([]);
  }
  const bar = (p) => {
    ctx.beginPath();
    ctx.moveTo(x(p.ttl_secs), y(p.hit_ratio - p.error_bound));
    ctx.lineTo(x(p.ttl_secs), y(p.hit_ratio + p.error_bound));
    ctx.stroke();
  };
  ctx.strokeStyle = css("--gini");
  ctx.lineWidth = 2;
  ctx.beginPath();
  w.ttl_curve.forEach((p, i) => (i ? ctx.lineTo(x(p.ttl_secs), y(p.hit_ratio)) : ctx.moveTo(x(p.ttl_secs), y(p.hit_ratio))));
  ctx.stroke();
  ctx.lineWidth = 1;
  for (const p of w.ttl_curve) {
    bar(p);
    ctx.fillStyle = css("--gini");
    ctx.beginPath(); ctx.arc(x(p.ttl_secs), y(p.hit_ratio), 3, 0, 2 * Math.PI); ctx.fill();
  }
  ctx.strokeStyle = css("--top1");
  ctx.fillStyle = css("--top1");
  // Labels of the other candidates stack downwards (upwards near the bottom), so candidates
  // that predict alike stay readable.
  w.others.forEach((p, i) => {
    const px = x(p.ttl_secs), py = y(p.hit_ratio);
    bar(p);
    ctx.beginPath(); ctx.moveTo(px, py - 5); ctx.lineTo(px + 5, py); ctx.lineTo(px, py + 5); ctx.lineTo(px - 5, py); ctx.fill();
    const ly = py > c.height / 2 ? py - 8 - 11 * i : py + 14 + 11 * i;
    ctx.fillText(p.policy, px + 7, ly);
  });
  const obs = w.ttl_curve.find((p) => p.observed);
  if (obs) {
    ctx.strokeStyle = css("--hot");
    ctx.lineWidth = 2;
    ctx.beginPath(); ctx.arc(x(obs.ttl_secs), y(obs.hit_ratio), 7, 0, 2 * Math.PI); ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillStyle = css("--hot");
    const oy = y(obs.hit_ratio);
    // Left of the point: the other candidates label to the right.
    ctx.textAlign = "right";
    ctx.fillText("as configured", x(obs.ttl_secs) - 9, oy < top + 12 ? oy + 16 : oy - 9);
    ctx.textAlign = "left";
  }
  // What the tests and curious readers can check against the picture.
  c.dataset.points = JSON.stringify(all.map((p) => ({
    policy: p.policy, ttl_secs: p.ttl_secs, observed: p.observed, on_curve: w.ttl_curve.includes(p),
    hit_ratio: p.hit_ratio, error_bound: p.error_bound, x: Math.round(x(p.ttl_secs)), y: Math.round(y(p.hit_ratio)),
  })));
  const bound = Math.max(...all.map((p) => p.error_bound));
  $("whatif-note").textContent = "Simulated on " + w.requests + " requests with a cache key in the latest window" +
    (w.sample_rate < 1 ? " (" + pct(w.sample_rate) + " of keys sampled, bars: ± the sample's bound, up to " + num(bound, 3) + ")" : " (every key simulated)") +
    ". Ringed: the cache as configured" +
    (w.cache_hit_ratio === null ? " (the cache reports no hit or miss to check it by)." :
      "; dashed: the hit ratio it reports, " + num(100 * w.check_error, 1) + " points from the simulation.");
  const tbody = $("whatif-table").tBodies[0];
  clear(tbody);
  for (const p of w.ttl_curve.concat(w.others)) {
    const tr = el("tr");
    tr.appendChild(el("td", p.observed ? "as configured (" + ttl(p.ttl_secs) + ")" : p.policy, p.observed ? "observed" : ""));
    tr.appendChild(el("td", pct(p.hit_ratio) + (p.error_bound > 0 ? " ± " + pct(p.error_bound) : ""), "num"));
    tr.appendChild(el("td", num(p.backend_calls_per_request, 3), "num"));
    tbody.appendChild(tr);
  }
}

function keyRows(tbody, keys) {
  clear(tbody);
  if (!keys.length) {
    const tr = el("tr");
    tr.appendChild(el("td", "no keyed requests"));
    tbody.appendChild(tr);
    return;
  }
  for (const k of keys) {
    const tr = el("tr");
    tr.appendChild(el("td", k.label, "key"));
    tr.appendChild(el("td", pct(k.share), "num"));
    tr.appendChild(el("td", k.lower_bound === k.requests ? String(k.requests) : k.lower_bound + " – " + k.requests, "num"));
    tbody.appendChild(tr);
  }
}

function renderKeys(d) {
  keyRows($("group-keys").tBodies[0], d.top_keys);
  $("selected-shard").textContent = view.shard ?? "–";
  const i = d.shards.indexOf(view.shard);
  keyRows($("shard-keys").tBodies[0], i >= 0 ? d.shard_keys[i] : []);
}

document.addEventListener("DOMContentLoaded", () => {
  $("group").addEventListener("change", (e) => {
    view.group = e.target.value;
    view.shard = null;
    poll.now();
  });
  poll();
});

// A group change asks at once; the regular poll keeps its own timer.
poll.now = async () => {
  try {
    const q = "?group=" + encodeURIComponent(view.group);
    view.data = await getJson("/api/v1/history" + q);
    render();
  } catch (e) {
    view.failures += 1;
    if (view.since === null) view.since = new Date();
    offline(e);
  }
};
