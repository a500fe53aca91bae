// palace dashboard: a live window onto the palace, served by `palacectl ui` on 127.0.0.1.
//
// One script, no framework, nothing fetched from the internet. Every value shown comes from other
// agents and machines and is hostile until proven otherwise: it only ever enters the page as text
// (textContent, attribute values), never as HTML. The server's content security policy forbids
// inline scripts as a second wall.
//
// Live: one EventSource on /logstream/stream (pushed by the daemon's commits); each page registers
// what it does with a new event (the timeline prepends it, the other pages fetch their summary
// again, at most every REFRESH_MS).
//
// This script is the frame: building the page, talking to the server, the live events, the
// router, and the widgets more than one page draws with (an event and its proof, a person's
// message, an approval's whole request, an artifact's view). The pages are the features': each
// feature's script (palacectl/features/<name>/page.js, served as /static/<name>.js after this one)
// registers its own with page(name, draw); they share this script's names (classic scripts, one
// global scope), and start() runs once every script has (DOMContentLoaded).
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
const REFRESH_MS = 400;
const PAGE_SIZE = 50;

// -- building the page (text only) ---------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "text") el.textContent = String(value);
    else if (key === "class") el.setAttribute("class", value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) if (child) el.append(child);
  return el;
}

function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }
function fill(el, ...children) { return append(clear(el), children); }

function stamp(ts) {
  if (!ts) return null;
  // Timestamps carry microseconds; Date understands milliseconds.
  const date = new Date(String(ts).replace(/(\.\d{3})\d+/, "$1"));
  return isNaN(date) ? null : date;
}

function ago(ts) {
  const date = stamp(ts);
  if (!date) return "–";
  let secs = Math.round((Date.now() - date.getTime()) / 1000);
  const future = secs < 0;
  secs = Math.abs(secs);
  const text = secs < 60 ? `${secs}s` : secs < 3600 ? `${Math.floor(secs / 60)}m` :
    secs < 86400 ? `${Math.floor(secs / 3600)}h` : `${Math.floor(secs / 86400)}d`;
  return future ? `in ${text}` : `${text} ago`;
}

function time(ts) {
  const date = stamp(ts);
  return h("time", { datetime: ts || "", title: ts || "" , class: "ev-time" }, date ? ago(ts) : "–");
}

function agent(id) {
  if (!id) return h("span", { class: "muted" }, "–");
  if (id === "*") return h("span", { class: "chip", title: "every agent" }, "everyone");
  if (String(id).startsWith("human:")) return h("span", { class: "chip human", title: id }, `human ${id.slice(6)}`);
  return h("span", { class: "agent" }, id);
}

// A cost as the CLI prints it (palace_proto.usage.format_usd): cents from a cent up; below a cent four
// decimals rounded down ($0.0040, never $0.01 for a fraction of one); below that <$0.0001.
function usd(value) {
  const micros = Math.round(Number(value) * 1e6);
  if (!(micros > 0)) return "$0.00";
  if (micros < 100) return "<$0.0001";
  if (micros < 10000) return `$${(Math.floor(micros / 100) / 10000).toFixed(4)}`;
  return `$${(micros / 1e6).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

// One word per state, the protocol's (palace_proto.tasks), as `palacectl task` prints it: `ready` is a
// delivered patch waiting for review (issue 47: the dashboard said "delivered" where the CLI said "ready").
function stateChip(state) {
  const shown = state || "unknown";
  return h("span", { class: `chip state-${shown}` }, shown);
}

function taskLink(cid, text) { return h("a", { href: `#/task/${encodeURIComponent(cid)}` }, text || cid); }

function empty(text) { return h("p", { class: "empty" }, text); }

function panel(title, ...children) { return h("section", { class: "panel", "aria-label": title }, h("h2", { text: title }), children); }

function table(headers, rows, { stack = true } = {}) {
  return h("div", { class: "table-wrap" },
    h("table", { class: stack ? "stack" : "" },
      h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell, i) =>
        h("td", { "data-label": headers[i] }, cell)))))));
}

// -- talking to the dashboard's server --------------------------------------------------------------

class ApiError extends Error {}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" }, ...options });
  let doc = null;
  try { doc = await response.json(); } catch (_) { doc = null; }
  if (!response.ok) throw new ApiError((doc && doc.error) || `${response.status} ${response.statusText}`);
  return doc;
}

function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value) search.set(key, value);
  const text = search.toString();
  return text ? `?${text}` : "";
}

// -- live events ---------------------------------------------------------------------------------

const live = {
  source: null,
  listeners: new Set(),
  connect() {
    const badge = document.getElementById("live");
    this.source = new EventSource("/logstream/stream");
    this.source.addEventListener("open", () => { badge.textContent = "live"; badge.className = "live on"; });
    this.source.addEventListener("error", () => { badge.textContent = "reconnecting…"; badge.className = "live off"; });
    this.source.addEventListener("logstream", (message) => {
      let event;
      try { event = JSON.parse(message.data); } catch (_) { return; }
      for (const listener of [...this.listeners]) listener(event);
    });
  },
  on(listener) { this.listeners.add(listener); },
};

let timers = [];
function every(ms, fn) { timers.push(setInterval(fn, ms)); }
// A summary fetched again as events arrive: at most one fetch at a time, and after each one a pause
// of four times what it took (at least REFRESH_MS), so a busy palace or a slow daemon is never
// asked more often than it can answer; an event during a fetch schedules one more, never a queue.
function refresher(fetch) {
  let running = false, again = false, pending = null, lastTook = 0, lastEnd = 0;
  const page = renderToken;  // a refresh due after the person moved to another page is dropped
  const run = async () => {
    pending = null;
    if (page !== renderToken) return;
    if (running) { again = true; return; }
    running = true;
    const start = performance.now();
    try { await fetch(); } finally {
      running = false;
      lastEnd = performance.now();
      lastTook = lastEnd - start;
      if (again) { again = false; schedule(); }
    }
  };
  const schedule = () => {
    if (pending) return;
    const wait = Math.max(REFRESH_MS, 4 * lastTook - (performance.now() - lastEnd));
    pending = setTimeout(run, wait);
  };
  return schedule;
}

// -- the frame: session, theme, router -----------------------------------------------------------

let session = { can_write: false, human: "", daemon: {} };
let agentsKnown = [];

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function setupTheme() {
  applyTheme(localStorage.getItem("palace-theme"));
  document.getElementById("theme").addEventListener("click", () => {
    const dark = document.documentElement.dataset.theme === "dark" ||
      (!document.documentElement.dataset.theme && matchMedia("(prefers-color-scheme: dark)").matches);
    const next = dark ? "light" : "dark";
    localStorage.setItem("palace-theme", next);
    applyTheme(next);
  });
}

// The pages, each registered by its feature's script (served after this one): its name in the
// address (#/name/arg?params), the function that draws it, and the nav entry it lights up (its
// own by default: a task's page lights up "tasks"). The nav itself is written into the page by
// the server, from the features; its first entry is the page an empty address shows.
const routes = {};
const navOf = {};

function page(name, draw, { nav } = {}) {
  if (routes[name]) throw new Error(`the page ${name} is registered twice`);
  routes[name] = draw;
  navOf[name] = nav || name;
}

function homePage() {
  const first = document.querySelector("nav#nav a[data-page]");
  return first ? first.dataset.page : Object.keys(routes)[0];
}

function currentRoute() {
  const home = homePage();
  const raw = location.hash.replace(/^#\/?/, "") || home;
  const [path, search] = raw.split("?");
  const [name, ...rest] = path.split("/");
  return { name: routes[name] ? name : home, arg: rest.length ? decodeURIComponent(rest.join("/")) : null,
    params: new URLSearchParams(search || "") };
}

let renderToken = 0;
async function render() {
  const route = currentRoute();
  const token = ++renderToken;
  live.listeners.clear();
  timers.forEach(clearInterval);
  timers = [];
  const navPage = navOf[route.name] || route.name;
  for (const link of document.querySelectorAll("nav#nav a")) {
    if (link.dataset.page === navPage) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  main.setAttribute("aria-busy", "true");
  const page = h("div", { class: "page" });
  try {
    await routes[route.name](page, route);
    if (token !== renderToken) return;
    fill(main, page);
  } catch (error) {
    if (token !== renderToken) return;
    fill(main, h("div", { class: "banner bad", role: "alert" }, `Could not load this page: ${error.message}`));
  } finally {
    main.setAttribute("aria-busy", "false");
  }
}

function showError(target, error) {
  fill(target, h("div", { class: "banner bad", role: "alert" }, error.message));
}

// -- widgets more than one page draws with --------------------------------------------------------

function bodyPreview(ev) {
  if (ev.body_redacted) return h("span", { class: "redacted" }, "[redacted]");
  const text = (ev.body || "").replace(/\s+/g, " ").trim();
  return h("span", { class: "ev-preview-inline" }, text.length > 140 ? `${text.slice(0, 140)}…` : text || "–");
}

// -- the one write: a person's message ---------------------------------------------------------

let replyTarget = null;

function messageForm() {
  const to = h("input", { name: "to_agent", id: "msg-to", list: "agents-list", required: true, placeholder: "an agent, or *",
    autocomplete: "off" });
  const body = h("textarea", { name: "body", id: "msg-body", required: true, maxlength: "16000",
    placeholder: "What the agent should know or do. It wakes their watcher." });
  const status = h("p", { id: "msg-status", class: "small muted", role: "status" });
  const replyNote = h("p", { id: "msg-reply", class: "small muted" });
  const form = h("form", { id: "message-form", class: "panel", "aria-labelledby": "msg-title" },
    h("h2", { id: "msg-title" }, `Message an agent as `, agent(session.human)),
    h("datalist", { id: "agents-list" }),
    replyNote,
    h("div", { class: "grid2" }, h("label", { for: "msg-to" }, "To", to)),
    h("label", { for: "msg-body" }, "Message (high importance)", body),
    h("div", { class: "row end" }, status, h("span", { class: "spacer" }),
      h("button", { type: "submit", id: "msg-send" }, "Send…")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const payload = { to_agent: to.value.trim(), body: body.value };
    if (replyTarget) {
      payload.reply_to = replyTarget.id;
      if (replyTarget.correlation_id) payload.correlation_id = replyTarget.correlation_id;
    }
    if (!payload.to_agent || !payload.body.trim()) { status.textContent = "Give an addressee and a message."; return; }
    if (!(await confirmSend(payload))) { status.textContent = "Not sent."; return; }
    status.textContent = "Sending…";
    try {
      const result = await api("/api/message", { method: "POST", body: JSON.stringify(payload),
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": CSRF } });
      status.textContent = `Sent ${result.event.id}`;
      body.value = "";
      replyTarget = null;
      replyNote.textContent = "";
    } catch (error) { status.textContent = `Not sent: ${error.message}`; }
  });
  return form;
}

// The whole request a run asks to have allowed — what "allow" lets run, byte for byte — kept in
// the question when short, else in the artifact it names (checked here against the sha256 the
// answer is bound to). Returns the element and a promise of whether it is shown whole.
const approvalTexts = new Map();

function approvalInput(approval) {
  const box = h("div", { class: "approval-input" });
  const shown = (approval, text) => fill(box,
    h("p", { class: "small muted" }, `The whole request (${text.length} characters, sha256 ${String(approval.input_sha256).slice(0, 12)}…): "allow" runs exactly this.`),
    h("pre", { class: "body approval-whole" }, text));
  if (typeof approval.input === "string") {
    shown(approval, approval.input);
    return { box, shown: Promise.resolve(true) };
  }
  if (!approval.input_artifact) {
    fill(box, h("p", { class: "small warn" }, "Asked by an older palace: its whole request was not recorded, and palace's tools run nothing on an answer to it."));
    return { box, shown: Promise.resolve(false) };
  }
  fill(box, h("p", { class: "muted small" }, "Loading the whole request…"));
  const key = `${approval.input_artifact} ${approval.input_sha256}`;
  if (!approvalTexts.has(key)) {
    approvalTexts.set(key, api(`/api/artifact/${encodeURIComponent(approval.input_artifact)}`).then((a) => {
      if (!a.sha256_verified || a.sha256_computed !== approval.input_sha256) throw new Error("its bytes do not match the request's sha256");
      if (!a.shown || typeof a.text !== "string") throw new Error("it is not text this page can show");
      return a.text;
    }));
  }
  const done = approvalTexts.get(key).then((text) => { shown(approval, text); return true; }, (error) => {
    approvalTexts.delete(key);
    fill(box, h("div", { class: "banner bad", role: "alert" }, `The whole request cannot be shown (${error.message}): do not allow what you have not seen.`));
    return false;
  });
  return { box, shown: done };
}

function refreshAgentList() {
  const list = document.getElementById("agents-list");
  if (!list) return;
  fill(list, h("option", { value: "*" }, "everyone"), agentsKnown.map((name) => h("option", { value: name })));
}

function startReply(ev) {
  replyTarget = ev;
  const to = document.getElementById("msg-to");
  if (!to) return;
  to.value = ev.from_agent || "";
  document.getElementById("msg-reply").textContent = `Replying to ${ev.id}${ev.correlation_id ? ` (${ev.correlation_id})` : ""}`;
  document.getElementById("msg-body").focus();
}

function confirmSend(payload) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent =
    `To ${payload.to_agent === "*" ? "every agent" : payload.to_agent}, from ${session.human}, with high importance: it wakes their watchers.`;
  document.getElementById("confirm-body").textContent = payload.body;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "send"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-send").focus();
  });
}

function eventItem(ev) {
  const detail = h("div", { class: "ev-detail" }, h("p", { class: "muted small" }, "Loading…"));
  let loaded = false;
  const preview = ev.body_redacted ? h("span", { class: "ev-preview redacted" }, "[redacted]") :
    h("span", { class: "ev-preview" }, (ev.body || "").replace(/\s+/g, " ").slice(0, 240) || "–");
  const details = h("details", { class: "event" },
    h("summary", {}, time(ev.created_at), h("span", { class: "ev-type", title: ev.type }, ev.type),
      h("span", { class: "ev-main" },
        h("span", { class: "ev-route" }, agent(ev.from_agent), " → ", agent(ev.to_agent),
          h("span", { class: "muted" }, ` · ${ev.stream}/${ev.room}`),
          ev.status ? [" ", stateChip(ev.status)] : "",
          ev.impersonation ? h("span", { class: "flag" }, " impersonation") : "",
          ev.flagged ? h("span", { class: "flag", title: ev.flagged.why || "" }, ` flagged: ${ev.flagged.rule}`) : "",
          (ev.metadata || {}).importance === "high" ? h("span", { class: "chip warn" }, " high") : ""),
        preview)),
    detail);
  details.addEventListener("toggle", async () => {
    if (!details.open || loaded) return;
    loaded = true;
    try { fill(detail, await eventDetail(ev.id)); } catch (error) { showError(detail, error); loaded = false; }
  });
  return h("li", { dataset: { id: ev.id } }, details);
}

async function eventDetail(id) {
  const data = await api(`/api/event/${encodeURIComponent(id)}`);
  const ev = data.event;
  const proof = data.proof || {};
  const rows = [
    ["id", h("span", { class: "mono" }, ev.id)],
    ["signature", proof.verified
      ? h("span", { class: "ok", title: `Ed25519 key ${proof.public_key}` }, "✓ verified by this dashboard",
        proof.body_checked ? " (body hash too)" : " (body redacted: hash and signature only)")
      : h("span", { class: "bad" }, `✗ not verified: ${proof.reason || "unknown"}`)],
    ["origin", h("span", {}, h("span", { class: "mono" }, `${ev.origin} #${ev.origin_seq}`),
      proof.daemon ? ` written by daemon ${proof.daemon.name || proof.daemon.peer_id}` : "")],
    ["this replica", `seq ${ev.seq} on ${session.daemon.name || "this daemon"}`],
    ["created", ev.created_at],
    ["where", `${ev.stream} / ${ev.room}${ev.topic ? ` / ${ev.topic}` : ""}`],
    ["from → to", h("span", {}, agent(ev.from_agent), " → ", agent(ev.to_agent))],
  ];
  if (ev.correlation_id) rows.push(["correlation", ev.correlation_id.startsWith("task_") ? taskLink(ev.correlation_id) : ev.correlation_id]);
  if (ev.status) rows.push(["status", stateChip(ev.status)]);
  if (ev.ack_of) rows.push(["ack of", h("span", { class: "mono" }, ev.ack_of)]);
  if (ev.branch || ev.base_commit) rows.push(["branch", `${ev.branch || "–"} @ ${ev.base_commit || "–"}`]);
  if ((ev.artifact_ids || []).length) rows.push(["artifacts", h("span", {}, ev.artifact_ids.map((a) => artifactButton(a)))]);
  if (ev.impersonation) rows.push(["impersonation", h("span", { class: "flag" },
    ev.impersonation.reason || `written as ${ev.impersonation.agent} by a daemon that did not hold it`)]);
  const body = ev.body_redacted
    ? h("p", { class: "redacted" }, `[redacted] body sha256 ${ev.body_sha256 || ""}`)
    : h("pre", { class: "body" }, ev.body || "");
  const parts = [h("dl", { class: "kv" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])), body];
  if (ev.metadata && Object.keys(ev.metadata).length) parts.push(h("h3", {}, "metadata"), h("pre", { class: "body" }, JSON.stringify(ev.metadata, null, 2)));
  if ((data.thread || []).length > 1) {
    parts.push(h("h3", {}, `thread (${data.thread.length})`), h("ul", {}, data.thread.map((t) =>
      h("li", {}, time(t.created_at), " ", h("span", { class: "mono small" }, t.type), " ", agent(t.from_agent), t.id === ev.id ? " (this one)" : ""))));
  }
  if (session.can_write && ev.from_agent && !String(ev.from_agent).startsWith("human:") && ev.from_agent !== "palaced") {
    parts.push(h("p", {}, h("a", { href: "#/now", onclick: () => setTimeout(() => startReply(ev), 300) }, "Reply as a person…")));
  }
  const artifactView = h("div", { class: "artifact-view" });
  parts.push(artifactView);
  return parts;
}

function artifactButton(artifactId, target) {
  return h("button", { type: "button", class: "link", onclick: (e) => {
    const where = target || e.target.closest(".ev-detail")?.querySelector(".artifact-view") || document.getElementById("artifact-viewer");
    if (where) showArtifact(artifactId, where);
  } }, target ? "view" : artifactId);
}

async function showArtifact(artifactId, target) {
  fill(target, h("p", { class: "muted small" }, "Loading the artifact…"));
  try {
    const a = await api(`/api/artifact/${encodeURIComponent(artifactId)}`);
    const header = h("div", { class: "row" },
      h("strong", {}, `${a.kind} ${a.id}`),
      a.sha256_verified ? h("span", { class: "chip ok", title: a.sha256 }, "✓ sha256 verified") :
        h("span", { class: "chip bad" }, `✗ sha256 mismatch: ${a.sha256_computed}`),
      h("span", { class: "muted small" }, `${a.size_bytes} bytes by ${a.created_by}`),
      h("span", { class: "spacer" }),
      a.sha256_verified ? h("a", { href: `/api/artifact/${encodeURIComponent(a.id)}/raw`, download: `${a.id}.${a.kind === "patch" ? "patch" : a.kind === "log" ? "log" : "bin"}` }, "Download") : null);
    let view;
    if (!a.shown) view = empty("Binary or large: download it to look inside.");
    else if (a.kind === "patch" || /^(diff --git|--- )/m.test(a.text || "")) view = diffView(a.text);
    else view = h("pre", { class: "body" }, a.text);
    fill(target, header, view);
  } catch (error) { showError(target, error); }
}

const KEYWORDS = new Set(("def class return import from as if elif else for while try except finally with yield async await " +
  "function const let var new this null true false True False None fn pub struct impl use match mod package func go type interface").split(" "));

function highlight(code) {
  // A small tokenizer for readability: strings, comments, keywords; text nodes only. One pass,
  // each character looked at once: a member's patch line of unclosed quotes must not cost the
  // square of its length (a regex retrying from every quote froze the tab on a 1 MB line).
  const out = [];
  let i = 0, plain = 0;
  const flush = (end) => { if (end > plain) out.push(code.slice(plain, end)); };
  while (i < code.length) {
    const c = code[i];
    if (c === '"' || c === "'" || c === "`") {
      let j = i + 1;
      while (j < code.length && code[j] !== c) j += code[j] === "\\" && c !== "`" ? 2 : 1;
      const end = Math.min(j + 1, code.length); // unclosed: the string runs to the end of the line
      flush(i);
      out.push(h("span", { class: "str" }, code.slice(i, end)));
      i = plain = end;
    } else if (c === "#" || (c === "/" && code[i + 1] === "/")) {
      flush(i);
      out.push(h("span", { class: "com" }, code.slice(i)));
      return out;
    } else if (WORD_START.test(c)) {
      let j = i + 1;
      while (j < code.length && WORD_PART.test(code[j])) j++;
      if (KEYWORDS.has(code.slice(i, j))) {
        flush(i);
        out.push(h("span", { class: "kw" }, code.slice(i, j)));
        plain = j;
      }
      i = j;
    } else {
      i++;
    }
  }
  flush(code.length);
  return out;
}

const WORD_START = /[A-Za-z_]/;
const WORD_PART = /[A-Za-z0-9_]/;
// Why 2,000 characters: wider than any line a person reads; the rest is in the download.
const MAX_LINE_CHARS = 2000;

function diffView(text) {
  const lines = (text || "").split("\n");
  const box = h("div", { class: "diff", role: "region", "aria-label": "Patch", tabindex: "0" });
  const MAX = 5000;
  for (const line of lines.slice(0, MAX)) {
    let cls = "";
    if (line.startsWith("diff --git")) cls = "file start";
    else if (line.startsWith("+++ ") || line.startsWith("--- ") || line.startsWith("index ")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    const shown = line.length > MAX_LINE_CHARS ? line.slice(0, MAX_LINE_CHARS) : line;
    const content = cls === "add" || cls === "del" || cls === "" ? [shown.slice(0, 1), highlight(shown.slice(1))] : [shown];
    if (shown !== line) content.push(h("span", { class: "muted cut" }, ` … ${line.length - MAX_LINE_CHARS} more characters: download the patch`));
    box.append(h("div", { class: cls }, content));
  }
  if (lines.length > MAX) box.append(h("div", { class: "muted" }, `… ${lines.length - MAX} more lines: download the patch`));
  return box;
}

// -- start ---------------------------------------------------------------------------------------

async function start() {
  setupTheme();
  try {
    session = await api("/api/session");
    const where = document.getElementById("where");
    where.textContent = `${session.daemon.name || ""}${session.daemon.palace_name ? ` · ${session.daemon.palace_name}` : ""}` +
      (session.can_write ? "" : " · read-only observer");
  } catch (error) {
    clear(document.getElementById("main")).append(h("div", { class: "banner bad", role: "alert" }, `Cannot reach the dashboard: ${error.message}`));
    return;
  }
  live.connect();
  window.addEventListener("hashchange", render);
  await render();
}

document.addEventListener("DOMContentLoaded", start);
