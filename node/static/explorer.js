// dagchain explorer: vanilla JS, no build step, no external assets.
// Data: GET /v1/dag (recent level sets + pending blocks), live updates from the /v1/events
// WebSocket, lookups through /v1/blocks, /v1/txs and /v1/addresses.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const KEEP_LEVEL_SETS = 24;      // level sets kept in the DAG view
const MAX_PENDING = 400;         // pending blocks kept (newest)
const MILESTONE_ROWS = 20;
const STEP = 26, LANE_H = 38, LEFT = 96, TOP = 26, R = 6, R_MS = 8;

const state = {
  blocks: new Map(),       // hash -> block summary (DagBlock shape)
  lanes: new Map(),        // peer-chain root -> lane index
  seen: new Set(),         // hashes drawn once already (for the "new" animation)
  bestHeight: 0,
  selected: null,
  followRight: true,
  renderQueued: false,
};

// ---------------------------------------------------------------------------- helpers

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function short(hash) { return hash ? `${hash.slice(0, 8)}…${hash.slice(-4)}` : ""; }
function time(ms) { return new Date(ms).toISOString().replace("T", " ").replace("Z", ""); }
const NULL_HASH = "0".repeat(64);

async function api(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  let body = null;
  try { body = await resp.json(); } catch (_) { body = null; }
  return { status: resp.status, body };
}

function tipList(tips) {
  if (!tips.length) return el("span", { class: "muted" }, "none");
  const box = el("span", { class: "tip-list" });
  tips.forEach((t, i) => {
    if (i) box.append(document.createElement("br"));
    box.append(hashLink(t));
  });
  return box;
}

function hashLink(hash, label) {
  if (!hash || hash === NULL_HASH) return el("span", { class: "h muted" }, "none");
  return el("a", { class: "h lookup-link", href: `#${hash}`, dataset: { q: hash } }, label || hash);
}

// ---------------------------------------------------------------------------- network status

async function refreshStatus() {
  try {
    const { status, body } = await api("/v1/status");
    if (status !== 200) return;
    const s = body;
    $("network").textContent = s.network;
    $("st-height").textContent = s.best_milestone.height;
    $("st-height").title = s.best_milestone.hash;
    $("st-blocks").textContent = s.blocks;
    $("st-pending").textContent = s.pending_blocks;
    $("st-mempool").textContent = `${s.mempool.size} tx`;
    $("st-peers").textContent = s.peers;
    $("st-synced").textContent = s.synced ? "yes" : "no";
    $("st-version").textContent = s.version;
    const metrics = await fetch("/metrics").then((r) => r.text());
    const tps = /^dagchain_tps (\S+)$/m.exec(metrics);
    if (tps) $("st-tps").textContent = Number(tps[1]).toFixed(2);
  } catch (_) { /* node restarting: next tick */ }
}

async function refreshPeers() {
  try {
    const { status, body } = await api("/v1/peers");
    if (status !== 200) return;
    const rows = body.map((p) => el("tr", {},
      el("td", { class: "h" }, p.address),
      el("td", {}, p.direction),
      el("td", { class: "num" }, p.best_milestone_height),
      el("td", { class: "num" }, p.score),
      el("td", { class: "num" }, `${Math.round(p.connected_s)} s`)));
    $("peers").tBodies[0].replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no peers connected"))]));
  } catch (_) { /* next tick */ }
}

// ---------------------------------------------------------------------------- milestones

function milestoneRow(m) {
  return el("tr", { dataset: { height: m.height } },
    el("td", { class: "num" }, m.height),
    el("td", {}, hashLink(m.hash, short(m.hash))),
    el("td", { class: "num" }, m.level_set_size),
    el("td", { class: "small" }, time(m.timestamp_ms)));
}

async function loadMilestones() {
  const start = Math.max(0, state.bestHeight - MILESTONE_ROWS + 1);
  const { status, body } = await api(`/v1/milestones?start=${start}&limit=${MILESTONE_ROWS}`);
  if (status !== 200) return;
  $("milestones").tBodies[0].replaceChildren(...body.reverse().map(milestoneRow));
}

function addMilestoneRow(m) {
  const tbody = $("milestones").tBodies[0];
  for (const row of [...tbody.rows]) {
    if (Number(row.dataset.height) >= m.height) row.remove();  // a reorg replaced these
  }
  tbody.prepend(milestoneRow(m));
  while (tbody.rows.length > MILESTONE_ROWS) tbody.lastElementChild.remove();
}

// ---------------------------------------------------------------------------- DAG model

function laneOf(root) {
  if (!state.lanes.has(root)) state.lanes.set(root, state.lanes.size);
  return state.lanes.get(root);
}

function addBlock(b) {
  const old = state.blocks.get(b.hash);
  if (old && old.level_set_height !== null && b.level_set_height === null) return;
  state.blocks.set(b.hash, { ...old, ...b });
  laneOf(b.root);
}

async function loadDag() {
  const { status, body } = await api(`/v1/dag?limit=${KEEP_LEVEL_SETS}`);
  if (status !== 200) return;
  state.blocks.clear();
  state.bestHeight = body.best_height;
  for (const b of body.blocks) { addBlock(b); state.seen.add(b.hash); }
  scheduleRender();
}

async function applyLevelSet(height) {
  const { status, body } = await api(`/v1/milestones/${height}/level-set`);
  if (status !== 200) return;
  for (const hash of body) {
    let b = state.blocks.get(hash);
    if (!b) {
      const r = await api(`/v1/blocks/${hash}`);
      if (r.status !== 200) continue;
      b = { ...r.body, txs: r.body.txids.length };
    }
    addBlock({ ...b, level_set_height: height });
  }
  prune();
  scheduleRender();
}

function prune() {
  const floor = state.bestHeight - KEEP_LEVEL_SETS + 1;
  const pending = [];
  for (const [hash, b] of state.blocks) {
    if (b.level_set_height === null) pending.push(hash);
    else if (b.level_set_height < floor) state.blocks.delete(hash);
  }
  for (const hash of pending.slice(0, Math.max(0, pending.length - MAX_PENDING))) {
    state.blocks.delete(hash);
  }
  if (state.seen.size > 5000) state.seen = new Set(state.blocks.keys());
}

// ---------------------------------------------------------------------------- DAG layout + render

function layout() {
  // Bands: one per level set (ascending height), then one for the pending blocks. Inside a band
  // each lane's blocks sit left to right by peer height; the band is as wide as its fullest lane.
  const present = new Set([...state.blocks.values()].map((b) => b.root));
  for (const r of [...state.lanes.keys()]) if (!present.has(r)) state.lanes.delete(r);
  const lanes = new Map([...state.lanes.keys()].map((r, i) => [r, i]));
  const bands = new Map();
  for (const b of state.blocks.values()) {
    const key = b.level_set_height === null ? Infinity : b.level_set_height;
    if (!bands.has(key)) bands.set(key, []);
    bands.get(key).push(b);
  }
  const keys = [...bands.keys()].sort((a, b) => a - b);
  const pos = new Map();
  const shades = [];
  let x = LEFT;
  for (const key of keys) {
    const perLane = new Map();
    for (const b of bands.get(key).sort((p, q) => p.peer_height - q.peer_height
      || p.timestamp_ms - q.timestamp_ms)) {
      const lane = lanes.get(b.root);
      const k = perLane.get(lane) || 0;
      perLane.set(lane, k + 1);
      pos.set(b.hash, { x: x + STEP / 2 + k * STEP, y: TOP + LANE_H / 2 + lane * LANE_H, b });
    }
    const width = Math.max(1, ...perLane.values()) * STEP;
    shades.push({ key, x, width });
    x += width + 6;
  }
  return { pos, shades, lanes, width: x + 30, height: TOP + lanes.size * LANE_H + 8 };
}

function edgePath(a, b) {
  if (a.y === b.y) return `M${a.x},${a.y} L${b.x},${b.y}`;
  const mx = (a.x + b.x) / 2;
  return `M${a.x},${a.y} C${mx},${a.y} ${mx},${b.y} ${b.x},${b.y}`;
}

function render() {
  state.renderQueued = false;
  const wrap = $("dag-wrap");
  state.followRight = wrap.scrollLeft + wrap.clientWidth >= wrap.scrollWidth - 40;
  const { pos, shades, lanes, width, height } = layout();
  const root = $("dag");
  root.setAttribute("width", Math.max(width, wrap.clientWidth));
  root.setAttribute("height", height);
  const bandLayer = svg("g", { class: "bands" });
  shades.forEach((s, i) => {
    const pending = s.key === Infinity;
    bandLayer.append(svg("rect", {
      x: s.x, y: 0, width: s.width, height,
      class: pending ? "ls-pending" : `ls-${i % 2}`,
      "data-level-set": pending ? "pending" : s.key,
    }));
    const label = svg("text", { x: s.x + 3, y: 12, class: "ls-label" });
    label.textContent = pending ? "pending" : `L${s.key}`;
    bandLayer.append(label);
  });
  const laneLayer = svg("g", { class: "lanes" });
  for (const [rootHash, lane] of lanes) {
    const y = TOP + LANE_H / 2 + lane * LANE_H;
    laneLayer.append(svg("line", { x1: LEFT, x2: width, y1: y, y2: y, class: "lane-line" }));
    const label = svg("text", { x: 6, y: y + 4, class: "lane-label" });
    label.textContent = `chain ${rootHash.slice(0, 6)}`;
    const title = svg("title", {});
    title.textContent = `peer chain ${rootHash}`;
    label.append(title);
    laneLayer.append(label);
  }
  const edgeLayer = svg("g", { class: "edges" });
  const nodeLayer = svg("g", { class: "nodes" });
  for (const p of pos.values()) {
    const b = p.b;
    const prev = pos.get(b.previous_link);
    if (prev) edgeLayer.append(svg("path", { d: edgePath(prev, p), class: "edge-prev" }));
    const tips = b.tip_links || [];  // PROTOCOL.md v2: 1..max_tip_links tip links, all drawn
    for (const t of tips) {
      const tip = pos.get(t);
      if (tip && t !== b.previous_link) {
        edgeLayer.append(svg("path", { d: edgePath(tip, p), class: "edge-tip" }));
      }
    }
    const ms = pos.get(b.milestone_link);
    if (ms && b.milestone_link !== b.previous_link && !tips.includes(b.milestone_link)) {
      edgeLayer.append(svg("path", { d: edgePath(ms, p), class: "edge-ms" }));
    }
    const classes = ["blk", "block"];
    if (b.is_milestone) classes.push("ms");
    if (b.level_set_height === null) classes.push("pending");
    if (!state.seen.has(b.hash)) { classes.push("new"); state.seen.add(b.hash); }
    if (state.selected === b.hash) classes.push("selected");
    const circle = svg("circle", {
      cx: p.x, cy: p.y, r: b.is_milestone ? R_MS : R, class: classes.join(" "),
      "data-hash": b.hash,
    });
    const title = svg("title", {});
    title.textContent = `${b.is_milestone ? "milestone" : "block"} ${b.hash}\n`
      + `peer chain ${short(b.root)} height ${b.peer_height}\n`
      + `level set ${b.level_set_height === null ? "pending" : b.level_set_height} · ${b.txs} tx`;
    circle.append(title);
    nodeLayer.append(circle);
  }
  root.replaceChildren(bandLayer, laneLayer, edgeLayer, nodeLayer);
  root.dataset.blocks = String(pos.size);
  if (state.followRight) wrap.scrollLeft = wrap.scrollWidth;
}

function scheduleRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(render);
}

// ---------------------------------------------------------------------------- live events

let socket = null;
let retryMs = 1000;

function connectEvents() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(`${proto}//${location.host}/v1/events`);
  socket.onopen = () => {
    retryMs = 1000;
    setLive(true);
    loadDag().catch(() => {});     // catch up on what happened while disconnected
  };
  socket.onmessage = (msg) => {
    let event;
    try { event = JSON.parse(msg.data); } catch (_) { return; }
    onEvent(event).catch(() => {});
  };
  socket.onclose = () => {
    setLive(false);
    setTimeout(connectEvents, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  };
  socket.onerror = () => { /* onclose follows and reconnects */ };
}

function setLive(on) {
  const badge = $("live");
  badge.className = `badge ${on ? "on" : "off"}`;
  badge.textContent = on ? "live" : "reconnecting…";
}

async function onEvent(event) {
  if (event.type === "block") {
    addBlock({
      hash: event.hash, root: event.root, peer_height: event.peer_height,
      previous_link: event.previous_link, tip_links: event.tip_links || [],
      milestone_link: event.milestone_link, is_milestone: event.is_milestone,
      timestamp_ms: event.timestamp_ms, txs: event.txs, level_set_height: null,
    });
    prune();
    scheduleRender();
  } else if (event.type === "milestone") {
    state.bestHeight = Math.max(state.bestHeight, event.height);
    addMilestoneRow(event);
    await applyLevelSet(event.height);
    refreshStatus();
  } else if (event.type === "reorg") {
    await loadDag();
    await loadMilestones();
  }
}

// ---------------------------------------------------------------------------- lookup

function fieldTable(rows) {
  return el("table", { class: "fields" }, ...rows.map(([k, v]) => el("tr", { dataset: { field: k } },
    el("td", {}, k), el("td", {}, v))));
}

function statusBadge(status) {
  const kind = status.split(":")[0];
  return el("span", { class: `status status-${kind}` }, status);
}

function showResult(title, body) {
  $("result-title").textContent = title;
  $("result-body").replaceChildren(body);
  $("result").hidden = false;
}

function renderBlock(b) {
  const txs = b.txids.length
    ? el("table", {}, ...b.txids.map((t, i) => el("tr", {},
      el("td", {}, hashLink(t)), el("td", {}, statusBadge(b.tx_status[i])))))
    : el("span", { class: "muted" }, "none");
  showResult(`${b.is_milestone ? "Milestone" : "Block"} ${short(b.hash)}`, fieldTable([
    ["hash", el("span", { class: "h" }, b.hash)],
    ["is_milestone", b.is_milestone ? "yes" : "no"],
    ["level_set_height", b.level_set_height === null ? "pending" : b.level_set_height],
    ["confirmations", b.confirmations],
    ["peer chain (root)", hashLink(b.root)],
    ["peer_height", b.peer_height],
    ["previous_link", hashLink(b.previous_link)],
    ["tip_links", tipList(b.tip_links || [])],
    ["tips_root", el("span", { class: "h" }, b.tips_root)],
    ["milestone_link", hashLink(b.milestone_link)],
    ["merkle_root", el("span", { class: "h" }, b.merkle_root)],
    ["timestamp_ms", `${b.timestamp_ms} (${time(b.timestamp_ms)})`],
    ["target", `0x${b.target.toString(16)}`],
    ["nonce", b.nonce],
    ["version", b.version],
    ["size", `${b.size} bytes`],
    [`txs (${b.txids.length})`, txs],
  ]));
  state.selected = b.hash;
  scheduleRender();
}

function renderTx(t) {
  showResult(`Transaction ${short(t.txid)}`, fieldTable([
    ["txid", el("span", { class: "h" }, t.txid)],
    ["status", statusBadge(t.status)],
    ["block", t.block ? hashLink(t.block) : el("span", { class: "muted" }, "none")],
    ["milestone_height", t.milestone_height === null ? "–" : t.milestone_height],
    ["confirmations", t.confirmations],
    ["reason", t.reason || "–"],
  ]));
}

function renderAddress(a) {
  const utxos = a.utxos.length
    ? el("table", {}, el("tr", {}, el("th", {}, "txid"), el("th", {}, "index"),
      el("th", {}, "amount"), el("th", {}, "confirmations")),
      ...a.utxos.slice(0, 200).map((u) => el("tr", {}, el("td", {}, hashLink(u.txid, short(u.txid))),
        el("td", {}, u.index), el("td", { class: "num" }, u.amount),
        el("td", { class: "num" }, u.confirmations))))
    : el("span", { class: "muted" }, "none");
  showResult(`Address ${a.address.slice(0, 14)}…`, fieldTable([
    ["address", el("span", { class: "h" }, a.address)],
    ["balance", a.balance],
    ["pending_balance", a.pending_balance],
    [`utxos (${a.utxos.length})`, utxos],
  ]));
}

async function lookup(q) {
  q = q.trim();
  if (!q) return;
  $("q").value = q;
  try {
    // /v1/lookup answers 200 for anything, so a miss logs no failed request in the console.
    const found = await api(`/v1/lookup/${encodeURIComponent(q)}`);
    const kind = found.status === 200 ? found.body.kind : "unknown";
    const id = /^[0-9a-fA-F]{64}$/.test(q) ? q.toLowerCase() : encodeURIComponent(q);
    const path = { block: "blocks", transaction: "txs", address: "addresses" }[kind];
    if (!path) {
      return showResult("Not found", el("p", { class: "error" },
        `no block, transaction or address matches ${q}`));
    }
    const { status, body } = await api(`/v1/${path}/${id}`);
    if (status !== 200) {
      const message = body && body.error ? body.error.message : `HTTP ${status}`;
      return showResult("Lookup failed", el("p", { class: "error" }, message));
    }
    if (kind === "block") return renderBlock(body);
    if (kind === "transaction") return renderTx(body);
    return renderAddress(body);
  } catch (err) {
    showResult("Lookup failed", el("p", { class: "error" }, String(err)));
  }
}

// ---------------------------------------------------------------------------- wiring

document.addEventListener("click", (e) => {
  const link = e.target.closest("a.lookup-link");
  if (link) {
    e.preventDefault();
    history.replaceState(null, "", `#${link.dataset.q}`);
    lookup(link.dataset.q);
    return;
  }
  const dot = e.target.closest("circle.block");
  if (dot) {
    history.replaceState(null, "", `#${dot.dataset.hash}`);
    lookup(dot.dataset.hash);
  }
});

$("lookup").addEventListener("submit", (e) => {
  e.preventDefault();
  const q = $("q").value.trim();
  if (q) history.replaceState(null, "", `#${q}`);
  lookup(q);
});

$("result-close").addEventListener("click", () => {
  $("result").hidden = true;
  state.selected = null;
  history.replaceState(null, "", location.pathname);
  scheduleRender();
});

async function start() {
  await refreshStatus();
  try {
    const { body } = await api("/v1/status");
    state.bestHeight = body.best_milestone.height;
  } catch (_) { /* the socket's open handler retries */ }
  await Promise.all([loadMilestones().catch(() => {}), refreshPeers()]);
  connectEvents();
  if (location.hash.length > 1) lookup(decodeURIComponent(location.hash.slice(1)));
  setInterval(refreshStatus, 2000);
  setInterval(refreshPeers, 5000);
}

start();
