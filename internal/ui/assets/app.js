// objwatch ui: plain JavaScript, no framework, nothing from the network.
// Every page reads the app's own JSON endpoints (same origin, cookie).
"use strict";

const MAX_ROWS = 1000; // the live page never holds more events than this (#/live?rows=N lowers it)
const main = document.getElementById("main");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function params() {
  const h = location.hash.replace(/^#/, "");
  const i = h.indexOf("?");
  return { page: (i < 0 ? h : h.slice(0, i)) || "/live", q: new URLSearchParams(i < 0 ? "" : h.slice(i + 1)) };
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  const body = await r.text();
  let v;
  try { v = JSON.parse(body); } catch (e) { v = { error: body }; }
  if (!r.ok) throw new Error(v.error || r.statusText);
  return v;
}

function fmtValue(v) {
  if (typeof v === "string" && v !== "" && !/[\n\r\t"]/.test(v) && v.trim() === v) return v;
  const s = JSON.stringify(v);
  return s && s.length > 120 ? s.slice(0, 119) + "…" : s;
}

function changeLine(c) {
  switch (c.op) {
    case "add": return "+ " + c.path + ": " + fmtValue(c.new);
    case "remove": return "- " + c.path + ": " + fmtValue(c.old);
    case "move": return "> " + c.path + ": moved";
    default: return "~ " + c.path + ": " + fmtValue(c.old) + " → " + fmtValue(c.new);
  }
}

function objectLink(resource, ns, name) {
  const q = new URLSearchParams({ resource, name });
  if (ns) q.set("namespace", ns);
  return el("a", { href: "#/object?" + q }, (ns ? ns + "/" : "") + name);
}

function form(fields, submitLabel, onsubmit) {
  const f = el("form", { class: "bar" });
  for (const [name, label, value, extra] of fields) {
    f.append(el("label", {}, label, el("input", Object.assign({ name, value: value || "", id: "f-" + name }, extra || {}))));
  }
  f.append(el("button", { type: "submit", class: "primary" }, submitLabel));
  f.addEventListener("submit", (ev) => { ev.preventDefault(); onsubmit(new FormData(f)); });
  return f;
}

function setHash(page, data) {
  const q = new URLSearchParams();
  for (const [k, v] of data) if (v) q.set(k, v);
  location.hash = "#" + page + "?" + q;
}

// ---- live changes ----
let live = null; // the open stream: { es, url, lastId, paused }

function stopLive() {
  if (live && live.es) live.es.close();
  if (live && live.timer) clearTimeout(live.timer);
  live = null;
}

function renderLive(q) {
  const resource = q.get("resource") || "configmaps";
  main.replaceChildren(
    el("h1", {}, "Live changes"),
    form([
      ["resource", "Resources (comma-separated)", resource, { list: "resource-list", size: 30 }],
      ["namespace", "Namespaces (comma-separated; empty: all)", q.get("namespace")],
      ["selector", "Label selector", q.get("selector")],
      ["fields", "Field paths", q.get("fields"), { placeholder: "spec.replicas,metadata.labels.*" }],
    ], "Watch", (d) => setHash("/live", d)),
    el("div", { class: "bar-actions" },
      el("button", { id: "pause", type: "button", onclick: togglePause }, "Pause"), " ",
      el("button", { id: "clear", type: "button", onclick: () => { document.getElementById("events").replaceChildren(); } }, "Clear"), " ",
      el("label", {}, "Show only ", el("input", { id: "grep", placeholder: "text in the event", oninput: applyGrep }))),
    el("div", { class: "status", id: "status", role: "status", "aria-live": "polite" }, "connecting…"),
    el("ul", { id: "events", "aria-label": "Changes, newest first" }));
  const sq = new URLSearchParams();
  for (const r of resource.split(",").map((s) => s.trim()).filter(Boolean)) sq.append("resource", r);
  for (const k of ["namespace", "selector", "fields"]) if (q.get(k)) sq.set(k, q.get(k));
  live = { url: "/api/live?" + sq, lastId: "", paused: false, queue: [], timer: 0, count: 0,
    maxRows: Math.min(MAX_ROWS, Math.max(10, Number(q.get("rows")) || MAX_ROWS)) };
  openLive();
}

function openLive() {
  const url = live.url + (live.lastId ? "&after=" + encodeURIComponent(live.lastId) : "");
  const es = new EventSource(url);
  live.es = es;
  es.addEventListener("change", (m) => {
    live.lastId = m.lastEventId || live.lastId;
    live.queue.push(JSON.parse(m.data));
    if (!live.timer) live.timer = setTimeout(flushLive, 16);
  });
  es.onerror = () => {
    const s = document.getElementById("status");
    if (s) s.textContent = es.readyState === EventSource.CLOSED ? "disconnected (the server refused the stream; reload the page)" : "reconnecting… (resumes from resourceVersion, nothing lost)";
  };
}

// flushLive adds the events queued in the last 16ms in one DOM update (a
// timer: requestAnimationFrame ran late in headless Chromium, and never
// in hidden tabs) and keeps
// at most live.maxRows rows.
function flushLive() {
  if (!live) return;
  live.timer = 0;
  const list = document.getElementById("events");
  const status = document.getElementById("status");
  const frag = document.createDocumentFragment();
  const grep = (document.getElementById("grep") || {}).value || "";
  const batch = live.queue.splice(0);
  for (let i = batch.length - 1; i >= 0; i--) {
    const e = batch[i];
    if (e.type === "READY") {
      status.textContent = (e.note === "resumed" ? "resumed; " : "") + "watching " +
        Object.entries(e.objects || {}).map(([r, n]) => r + " (" + n + " objects)").join(", ");
      continue;
    }
    live.count++;
    frag.append(eventRow(e, grep));
  }
  list.prepend(frag);
  while (list.childElementCount > live.maxRows) list.lastElementChild.remove();
}

function eventRow(e, grep) {
  const li = el("li", { class: e.type, "data-rv": e.resourceVersion || "" });
  const when = new Date(e.time).toLocaleTimeString();
  if (e.type === "NOTE") {
    li.append(el("span", { class: "when" }, when + " "), el("strong", {}, "note: "), e.note);
  } else {
    li.append(el("span", { class: "when" }, when + " "), el("span", { class: "t " + e.type }, e.type), " ",
      e.resource + " ", objectLink(e.resource, e.namespace, e.name), el("span", { class: "rv" }, " rv=" + e.resourceVersion));
    for (const c of e.changes || []) li.append(el("div", { class: "chg " + c.op }, changeLine(c)));
  }
  if (grep && !li.textContent.includes(grep)) li.hidden = true;
  return li;
}

function applyGrep() {
  const g = document.getElementById("grep").value;
  for (const li of document.getElementById("events").children) li.hidden = g !== "" && !li.textContent.includes(g);
}

// togglePause closes the stream and, on resume, opens it again from the
// last event received: the server sends what happened meanwhile.
function togglePause() {
  if (!live) return;
  const b = document.getElementById("pause");
  if (!live.paused) {
    live.es.close();
    live.paused = true;
    b.textContent = "Resume";
    document.getElementById("status").textContent = "paused at " + (live.lastId || "the start");
  } else {
    live.paused = false;
    b.textContent = "Pause";
    openLive();
  }
}

// ---- object page ----
async function renderObject(q) {
  main.replaceChildren(el("h1", {}, "Object"),
    form([["resource", "Resource", q.get("resource"), { list: "resource-list" }], ["namespace", "Namespace", q.get("namespace")], ["name", "Name", q.get("name")]],
      "Show", (d) => setHash("/object", d)));
  if (!q.get("resource") || !q.get("name")) return;
  const box = el("div", { id: "object" }, "loading…");
  main.append(box);
  let p;
  try {
    p = await getJSON("/api/object?" + q);
  } catch (err) {
    box.replaceChildren(el("div", { class: "error" }, err.message));
    return;
  }
  const head = el("h2", {}, p.kind + " " + (p.namespace ? p.namespace + "/" : "") + p.name + (p.exists ? "" : " (deleted)"));
  const parts = [head];
  if (p.owners && p.owners.length) parts.push(el("p", {}, "Owners: ", p.owners.map((o) => [o.kind + " ", objectLink(o.resource, o.namespace, o.name), " "])));
  const depBox = el("span", { id: "dependents" });
  if (p.exists) parts.push(el("p", {}, el("button", { type: "button", onclick: () => loadDependents(q, depBox) }, "Find dependents"), " ", depBox));
  if (p.deleting) parts.push(el("section", {}, el("h2", {}, "Why is it still there?"), el("pre", { class: "why", id: "why" }, p.why)));
  const blame = el("table", { class: "blame", id: "blame", "aria-label": "YAML with blame" });
  for (const l of p.blame || []) {
    blame.append(el("tr", {}, el("td", { class: "gutter", title: l.note || "" }, l.note || ""), el("td", {}, l.text)));
  }
  const hist = el("section", { id: "history" }, el("h2", {}, "History"));
  if (p.historyMissing) hist.append(el("div", { class: "note", id: "history-missing" }, p.historyMissing));
  for (const n of p.historyNotes || []) hist.append(el("div", { class: "note" }, n));
  const revs = el("ol", { class: "revs" });
  (p.revisions || []).forEach((r, i) => {
    const li = el("li", { "data-rv": r.resourceVersion },
      el("div", {}, r.header),
      (r.changes || []).map((c) => el("div", { class: "chg " + c.op }, changeLine(c))),
      el("div", { class: "pick" },
        el("label", {}, el("input", { type: "radio", name: "from", value: r.resourceVersion, checked: i === p.revisions.length - 2 }), " from"), " ",
        el("label", {}, el("input", { type: "radio", name: "to", value: r.resourceVersion, checked: i === p.revisions.length - 1 }), " to")));
    revs.append(li);
  });
  const diffOut = el("div", { id: "diff", "aria-live": "polite" });
  hist.append(revs);
  if ((p.revisions || []).length > 1) {
    hist.append(el("button", { type: "button", id: "diff-button", onclick: async () => {
      const from = (document.querySelector("input[name=from]:checked") || {}).value;
      const to = (document.querySelector("input[name=to]:checked") || {}).value;
      const dq = new URLSearchParams(q); dq.set("from", from); dq.set("to", to);
      try {
        const d = await getJSON("/api/diff?" + dq);
        diffOut.replaceChildren(el("h2", {}, "rv=" + from + " → rv=" + to),
          ...(d.changes.length ? d.changes.map((c) => el("div", { class: "chg " + c.op }, changeLine(c))) : ["no change"]));
      } catch (err) { diffOut.replaceChildren(el("div", { class: "error" }, err.message)); }
    } }, "Diff the two revisions"), diffOut);
  }
  parts.push(el("div", { class: "cols" }, el("section", {}, el("h2", {}, "YAML"), blame), hist));
  box.replaceChildren(...parts);
}

async function loadDependents(q, box) {
  box.textContent = "searching every resource…";
  try {
    const deps = await getJSON("/api/dependents?" + q);
    box.replaceChildren(...(deps.length ? deps.flatMap((d) => [d.kind + " ", objectLink(d.resource, d.namespace, d.name), " "]) : ["none"]));
  } catch (err) { box.replaceChildren(el("span", { class: "error" }, err.message)); }
}

// ---- timeline ----
const COLORS = ["#0550ae", "#bc4c00", "#116329", "#8250df", "#a40e26", "#4d2d00", "#0a3069", "#57606a"];

async function renderTimeline(q) {
  main.replaceChildren(el("h1", {}, "Timeline"),
    form([["namespace", "Namespace (empty: all)", q.get("namespace")], ["since", "Since", q.get("since") || "1h"], ["until", "Until (empty: now)", q.get("until")], ["resource", "Resource", q.get("resource"), { list: "resource-list" }]],
      "Show", (d) => setHash("/timeline", d)));
  const box = el("div", { id: "timeline" }, "loading…");
  main.append(box);
  let t;
  try { t = await getJSON("/api/timeline?" + q); } catch (err) { box.replaceChildren(el("div", { class: "error" }, err.message)); return; }
  const by = q.get("by") === "user" ? "byUser" : "byResource";
  const parts = [];
  if (t.historyStartsLater) parts.push(el("div", { class: "note" }, "The server's history starts after the window's start: earlier changes are not retained."));
  if (t.truncated) parts.push(el("div", { class: "note" }, "More changes than the page shows; narrow the window."));
  parts.push(el("p", { class: "totals", id: "totals" },
    el("span", { "data-type": "ADDED" }, "created " + (t.totals.ADDED || 0)),
    el("span", { "data-type": "MODIFIED" }, "changed " + (t.totals.MODIFIED || 0)),
    el("span", { "data-type": "DELETED" }, "deleted " + (t.totals.DELETED || 0))));
  const other = by === "byUser" ? "resource" : "user";
  const oq = new URLSearchParams(q); oq.set("by", other === "user" ? "user" : "resource");
  parts.push(el("p", {}, "Changes per minute by " + (by === "byUser" ? "user" : "resource") + " — ", el("a", { href: "#/timeline?" + oq }, "by " + other)));
  parts.push(chart(t.minutes, t[by]));
  const table = el("table", { class: "list", id: "changes" }, el("tr", {}, ["time", "change", "object", "who", "fields"].map((h) => el("th", {}, h))));
  for (const it of t.items.slice().reverse()) {
    table.append(el("tr", {}, el("td", {}, new Date(it.time).toLocaleString()), el("td", { class: "t " + it.type }, it.type),
      el("td", {}, it.resource + " ", objectLink(it.resource, it.namespace, it.name)), el("td", {}, it.who), el("td", { class: "lines" }, (it.lines || []).map((l) => l.trim()).join("\n"))));
  }
  parts.push(table);
  box.replaceChildren(...parts);
}

// chart draws stacked bars of counts per minute as SVG.
function chart(minutes, series) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 900, H = 160, pad = 24;
  const names = Object.keys(series).sort();
  const totals = minutes.map((_, i) => names.reduce((s, n) => s + series[n][i], 0));
  const top = Math.max(1, ...totals);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H + pad}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `changes per minute, at most ${top}`);
  svg.setAttribute("id", "chart");
  const bw = (W - pad) / Math.max(1, minutes.length);
  const mk = (tag, a) => { const e = document.createElementNS(NS, tag); for (const k in a) e.setAttribute(k, a[k]); return e; };
  minutes.forEach((m, i) => {
    let y = H;
    names.forEach((n, j) => {
      const c = series[n][i];
      if (!c) return;
      const h = (c / top) * (H - 10);
      y -= h;
      const r = mk("rect", { x: pad + i * bw, y, width: Math.max(1, bw - 1), height: h, fill: COLORS[j % COLORS.length], "data-count": c, "data-name": n });
      const title = document.createElementNS(NS, "title");
      title.textContent = `${new Date(m).toLocaleTimeString()} ${n}: ${c}`;
      r.append(title);
      svg.append(r);
    });
  });
  const axis = mk("text", { x: 2, y: 12, "font-size": 11, fill: "#4a5560" }); axis.textContent = String(top); svg.append(axis);
  const t0 = mk("text", { x: pad, y: H + 16, "font-size": 11, fill: "#4a5560" }); t0.textContent = minutes.length ? new Date(minutes[0]).toLocaleTimeString() : ""; svg.append(t0);
  const legend = el("div", { class: "legend" }, names.map((n, j) => el("span", {}, el("i", { style: null, class: "c" + (j % COLORS.length) }), n)));
  legend.querySelectorAll("i").forEach((i, j) => { i.style.background = COLORS[j % COLORS.length]; });
  return el("div", {}, svg, legend);
}

// ---- audit ----
async function renderAudit(q) {
  main.replaceChildren(el("h1", {}, "Audit"),
    form([["user", "User", q.get("user")], ["verb", "Verb", q.get("verb")], ["resource", "Resource", q.get("resource")], ["namespace", "Namespace", q.get("namespace")], ["name", "Name", q.get("name")], ["since", "Since", q.get("since") || "1h"]],
      "Search", (d) => setHash("/audit", d)));
  const box = el("div", { id: "audit" }, "loading…");
  main.append(box);
  let recs;
  try { recs = await getJSON("/api/audit?" + q); } catch (err) { box.replaceChildren(el("div", { class: "note" }, err.message)); return; }
  const table = el("table", { class: "list" }, el("tr", {}, ["time", "user", "verb", "object", "code", "change"].map((h) => el("th", {}, h))));
  for (const r of recs.slice().reverse()) {
    table.append(el("tr", {}, el("td", {}, new Date(r.time).toLocaleString()), el("td", {}, r.user), el("td", {}, r.verb),
      el("td", {}, r.resource ? [r.resource + " ", r.name ? objectLink(r.resource, r.namespace, r.name) : ""] : r.uri),
      el("td", {}, r.code || ""), el("td", { class: "lines" }, (r.lines || []).map((l) => l.trim()).join("\n"))));
  }
  box.replaceChildren(el("p", {}, recs.length + " records"), table);
}

// ---- routing ----
function route() {
  stopLive();
  const { page, q } = params();
  for (const a of document.querySelectorAll("header nav a")) {
    if (a.getAttribute("href") === "#" + page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const pages = { "/live": renderLive, "/object": renderObject, "/timeline": renderTimeline, "/audit": renderAudit };
  (pages[page] || renderLive)(q);
}

window.addEventListener("hashchange", route);
route();
getJSON("/api/resources").then((rs) => {
  document.getElementById("resource-list").replaceChildren(...rs.map((r) => el("option", { value: r.name }, r.kind)));
}).catch(() => {});
