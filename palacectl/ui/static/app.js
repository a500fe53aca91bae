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
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
const REFRESH_MS = 400;
const PAGE_SIZE = 50;
const STATES = { ready: "delivered" };

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

function stateChip(state) {
  const shown = STATES[state] || state || "unknown";
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

const routes = {
  now: pageNow, timeline: pageTimeline, tasks: pageTasks, task: pageTask, fleet: pageFleet,
  leases: pageLeases, memory: pageMemory, drawer: pageDrawer, rooms: pageRooms, room: pageRoom, usage: pageUsage,
};

function currentRoute() {
  const raw = location.hash.replace(/^#\/?/, "") || "now";
  const [path, search] = raw.split("?");
  const [name, ...rest] = path.split("/");
  return { name: routes[name] ? name : "now", arg: rest.length ? decodeURIComponent(rest.join("/")) : null,
    params: new URLSearchParams(search || "") };
}

let renderToken = 0;
async function render() {
  const route = currentRoute();
  const token = ++renderToken;
  live.listeners.clear();
  timers.forEach(clearInterval);
  timers = [];
  const navPage = { task: "tasks", drawer: "memory", room: "rooms" }[route.name] || route.name;
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

// -- Now -----------------------------------------------------------------------------------------

async function pageNow(page) {
  document.title = "Now · palace";
  const summary = h("div", { id: "now-summary" });
  page.append(h("h1", {}, "What needs you now"), summary);
  const draw = async () => {
    try {
      const data = await api("/api/now");
      agentsKnown = data.agents.map((a) => a.agent);
      fill(summary, nowSummary(data));
      refreshAgentList();
    } catch (error) { showError(summary, error); }
  };
  await draw();
  if (session.can_write) page.append(messageForm());
  const refresh = refresher(draw);
  live.on(refresh);
  every(10000, refresh);  // who is watching changes without an event
}

function nowSummary(data) {
  const health = data.health || {};
  const waiting = data.waiting || [];
  const questions = data.questions || [];
  // A run's permission request (approval) waits with its harness stopped: listed first, apart.
  const approvals = questions.filter((q) => q.approval), asked = questions.filter((q) => !q.approval);
  const needs = questions.length + waiting.length + data.stalled.length + data.conflicts.length + data.stuck.length;
  const cards = h("div", { class: "cards" },
    h("div", { class: "card" }, h("div", { class: `figure ${needs ? "warn" : "ok"}` }, String(needs)),
      h("div", { class: "label" }, "things waiting on you")),
    h("div", { class: "card" }, h("div", { class: `figure ${health.ok ? "ok" : "bad"}` }, health.ok ? "healthy" : "attention"),
      h("div", { class: "label" }, `daemon ${data.daemon || ""}`)),
    h("div", { class: "card" }, h("div", { class: "figure" }, String((data.agents || []).filter((a) => a.watching).length)),
      h("div", { class: "label" }, `of ${data.agents_total} agents watching`)),
    h("div", { class: "card" }, h("div", { class: "figure" }, `${(data.peers || {}).live || 0}/${(data.peers || {}).total || 0}`),
      h("div", { class: "label" }, "peers live")),
    h("div", { class: "card" }, h("div", { class: "figure" }, String(data.events || 0)),
      h("div", { class: "label" }, "events in the log")));
  const parts = [cards];
  if (!health.ok && (health.problems || []).length) {
    parts.push(h("div", { class: "banner bad", role: "alert" }, h("strong", {}, "Daemon: "), health.problems.join(" · ")));
  }
  const needsPanel = panel("Needs you",
    approvals.length ? h("div", { id: "approvals" }, h("h3", {}, `Approvals waiting (${approvals.length})`),
      h("ul", { class: "questions" }, approvals.map(questionItem))) : null,
    asked.length ? h("div", { id: "questions" }, h("h3", {}, `Questions for you (${asked.length})`),
      h("ul", { class: "questions" }, asked.map(questionItem))) : null,
    waiting.length ? h("div", {}, h("h3", {}, `Waiting on a person (${waiting.length})`),
      table(["when", "from", "to", "message", ""], waiting.map((ev) => [
        time(ev.created_at), agent(ev.from_agent), agent(ev.to_agent),
        h("span", {}, h("span", { class: "mono small" }, `${ev.type} `), bodyPreview(ev)),
        session.can_write ? h("button", { type: "button", class: "secondary", onclick: () => startReply(ev) }, "Reply") : "",
      ]))) : null,
    data.stalled.length ? h("div", {}, h("h3", {}, `Stalled tasks (${data.stalled.length})`),
      table(["task", "claimed by", "stalled since", "requested by"], data.stalled.map((t) => [
        taskLink(t.correlation_id, t.title), agent(t.claimed_by), time(t.stalls_at), agent(t.requested_by)]))) : null,
    data.conflicts.length ? h("div", {}, h("h3", {}, `Conflicts (${data.conflicts.length})`),
      h("ul", {}, data.conflicts.map(conflictItem))) : null,
    data.stuck.length ? h("div", {}, h("h3", {}, `Blocked or failed (${data.stuck.length})`),
      table(["task", "state", "claimed by", "last word"], data.stuck.map((t) => [
        taskLink(t.correlation_id, t.title), stateChip(t.state), agent(t.claimed_by), time(t.last_activity)]))) : null,
    needs ? null : empty("Nothing is waiting on you: no stalled tasks, conflicts or messages to people."));
  parts.push(needsPanel);
  const usage = data.usage_today || [];
  if (usage.length) {
    parts.push(panel("Runs today (usage)", table(["agent", "runs", "tokens in", "tokens out", "cost"], usage.map((u) => [
      agent(u.key), String(u.runs), String(u.tokens_in), String(u.tokens_out),
      u.cost_usd === null ? "unknown" : `$${u.cost_usd.toFixed(2)}${u.unpriced_runs ? "+" : ""}`])),
      h("p", { class: "small" }, h("a", { href: "#/usage?by=agent&since=today" }, "Usage and budgets →"))));
  }
  parts.push(panel(`Agents (${data.agents_total})`, data.agents.length ? table(
    ["agent", "daemon", "watching", "working on", "last event"],
    data.agents.map((a) => [
      h("span", {}, agent(a.agent), a.stale ? h("span", { class: "chip warn", title: "no activity for a long time" }, " stale") : "",
        a.impersonations ? h("span", { class: "chip bad" }, ` ${a.impersonations} impersonations`) : ""),
      h("span", {}, a.daemon_name || "–", a.here ? h("span", { class: "muted small" }, " (here)") : ""),
      a.watching ? h("span", { class: "chip ok", title: `seen by the daemon on ${(a.watching_on || []).join(", ")}` }, "watching")
        : h("span", { class: "chip warn" }, "not watching"),
      doing(a),
      a.last_event ? h("span", {}, time(a.last_event.created_at), " ", h("span", { class: "mono small" }, a.last_event.type), " ",
        bodyPreview(a.last_event)) : h("span", { class: "muted" }, "–"),
    ])) : empty("No agents yet: they appear with their first event.")));
  if (data.open.length) {
    parts.push(panel(`Open tasks nobody claimed (${data.open.length})`, table(["task", "for", "from", "since"],
      data.open.map((t) => [taskLink(t.correlation_id, t.title), agent(t.assigned_to), agent(t.requested_by), time(t.created_at)]))));
  }
  return parts;
}

function doing(a) {
  const items = [];
  for (const t of a.claimed) items.push(h("div", {}, taskLink(t.correlation_id, t.title), " ", stateChip(t.state)));
  for (const w of a.workers) {
    items.push(h("div", { class: "small", title: w.permissions ? `runs may: ${w.permissions}` : null },
      h("span", { class: "chip info" }, "worker"),
      ` ${w.runner}, ${(w.tasks || []).length}/${w.concurrency} running` + (w.daemon ? ` on ${w.daemon}` : "")),
      w.held ? h("div", { class: "small" }, h("span", { class: "chip warn" }, "held"), ` ${w.held}`) : null,
      w.permissions ? h("div", { class: "small muted" }, `runs may: ${w.permissions}`) : null);
  }
  return items.length ? h("div", {}, items) : h("span", { class: "muted" }, "idle");
}

function conflictItem(c) {
  if (c.kind === "task") return h("li", {}, "Two claims on ", taskLink(c.correlation_id, c.title), ": ",
    agent((c.detail || {}).agent || (c.detail || {}).claimant), " lost to the first claim");
  if (c.kind === "lease") return h("li", {}, "Lease ", h("span", { class: "mono" }, (c.patterns || []).join(" ")), " of ",
    agent(c.agent), ` ${c.state}`, c.ended_by_agent ? [" by ", agent(c.ended_by_agent)] : "", " ", time(c.at));
  if (c.kind === "impersonation") return h("li", { class: "flag" }, `${c.count} events written as `, agent(c.agent), " by a daemon that does not hold it");
  if (c.kind === "registration") return h("li", {}, "Contested registration of ", agent(c.agent), `: ${(c.detail || {}).why || ""}`);
  if (c.kind === "fork") return h("li", { class: "flag" }, `${c.count} forked origin(s): see Fleet`);
  return h("li", {}, c.kind);
}

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

function questionItem(q) {
  const status = h("span", { class: "small", role: "status" });
  const send = async (text, buttons) => {
    buttons.forEach((b) => { b.disabled = true; });
    status.textContent = "Answering…";
    try {
      const result = await api("/api/answer", { method: "POST", body: JSON.stringify({ question_id: q.question_id, text }),
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": CSRF } });
      status.textContent = result.won ? `Answered: ${result.question.answer.text}` :
        `Another answer counted first: ${result.question.answer ? result.question.answer.text : "none"}`;
    } catch (error) {
      status.textContent = `Not answered: ${error.message}`;
      buttons.forEach((b) => { b.disabled = false; });
    }
  };
  const controls = [];
  // An approval's whole request is shown before "allow" can be clicked (issue 43): from an
  // artifact, once it has arrived and matches the sha256 the answer is bound to.
  const whole = q.approval ? approvalInput(q.approval) : null;
  if (session.can_write && q.choices) {
    const buttons = q.choices.map((choice) => h("button", { type: "button", class: "secondary answer-choice",
      "data-choice": choice }, choice));
    buttons.forEach((b) => b.addEventListener("click", () => send(b.getAttribute("data-choice"), buttons)));
    if (whole) {
      const allow = buttons.filter((b) => b.getAttribute("data-choice") === "allow");
      allow.forEach((b) => { b.disabled = true; });
      whole.shown.then((ok) => { if (ok) allow.forEach((b) => { b.disabled = false; }); });
    }
    controls.push(...buttons);
  } else if (session.can_write) {
    const input = h("input", { type: "text", class: "answer-text", "aria-label": "Your answer", maxlength: "2000" });
    const button = h("button", { type: "button", class: "secondary" }, "Answer");
    button.addEventListener("click", () => { if (input.value.trim()) send(input.value, [button]); });
    controls.push(input, button);
  }
  return h("li", { class: "question", "data-question": q.question_id },
    h("div", {}, agent(q.asked_by), " asks ", agent(q.to), " · ", time(q.asked_at),
      q.correlation_id ? [" · ", taskLink(q.correlation_id)] : "", " · expires ", time(q.expires_at)),
    q.approval ? h("p", {}, h("span", { class: "chip warn" }, "approval"), " run ",
      h("strong", {}, q.approval.tool), q.approval.argument ? [": ", h("code", { class: "approval-argument" }, q.approval.argument)] : "")
      : h("p", { class: "question-text" }, q.question || ""),
    whole ? whole.box : null,
    h("div", { class: "row" }, controls, status));
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

// -- Timeline ------------------------------------------------------------------------------------

const TIMELINE_FILTERS = [
  ["stream", "Stream"], ["from_agent", "From"], ["to_agent", "To"], ["type", "Type"],
  ["correlation_id", "Correlation"], ["text", "Text"],
];

async function pageTimeline(page, route) {
  document.title = "Timeline · palace";
  const params = Object.fromEntries(TIMELINE_FILTERS.map(([key]) => [key, route.params.get(key) || ""]));
  const inputs = {};
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter the log" },
    TIMELINE_FILTERS.map(([key, label]) => {
      inputs[key] = h("input", { name: key, id: `f-${key}`, value: params[key], type: key === "text" ? "search" : "text",
        placeholder: key === "text" ? "words in bodies" : "any" });
      return h("label", { for: `f-${key}` }, label, inputs[key]);
    }),
    h("button", { type: "submit" }, "Filter"),
    h("button", { type: "button", class: "secondary", onclick: () => { location.hash = "#/timeline"; } }, "Clear"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = {};
    for (const [key] of TIMELINE_FILTERS) next[key] = inputs[key].value.trim();
    location.hash = `#/timeline${query(next)}`;
  });
  const list = h("ol", { class: "events", id: "timeline", "aria-label": "Events, newest first" });
  const more = h("button", { type: "button", class: "secondary", id: "older" }, "Older events");
  const counter = h("p", { class: "small muted", id: "timeline-note", role: "status" });
  page.append(h("h1", {}, "Timeline"), form, counter, list, h("div", { class: "row" }, more));
  let before = null;
  const load = async () => {
    const data = await api(`/api/events${query({ ...params, before, limit: String(PAGE_SIZE) })}`);
    for (const ev of data.events) list.append(eventItem(ev));
    before = data.next_before;
    more.hidden = !before;
    if (!list.children.length) counter.textContent = "No events match.";
  };
  more.addEventListener("click", () => load().catch((error) => { counter.textContent = error.message; }));
  await load();
  live.on((ev) => {
    if (ev.type === "event.redact") redactShown(((ev.metadata || {}).redacts));
    if (params.text || !matches(ev, params)) return;
    if (list.querySelector(`[data-id="${CSS.escape(ev.id)}"]`)) return;
    const item = eventItem(ev);
    item.classList.add("fresh");
    list.prepend(item);
    counter.textContent = "";
  });
}

function matches(ev, params) {
  if (params.stream && ev.stream !== params.stream) return false;
  if (params.type && ev.type !== params.type) return false;
  if (params.from_agent && ev.from_agent !== params.from_agent) return false;
  if (params.to_agent && ev.to_agent !== params.to_agent && ev.to_agent !== "*") return false;
  if (params.correlation_id && ev.correlation_id !== params.correlation_id) return false;
  return true;
}

function redactShown(eventId) {
  if (!eventId) return;
  for (const item of document.querySelectorAll(`[data-id="${CSS.escape(eventId)}"]`)) {
    for (const body of item.querySelectorAll(".ev-preview, .ev-preview-inline, pre.body")) {
      body.textContent = "[redacted]";
      body.classList.add("redacted");
    }
  }
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

// -- Tasks ---------------------------------------------------------------------------------------

async function pageTasks(page) {
  document.title = "Tasks · palace";
  const board = h("div", { class: "board", id: "board" });
  const note = h("p", { class: "small muted" });
  page.append(h("h1", {}, "Tasks"), note, board);
  const draw = async () => {
    try {
      const data = await api("/api/tasks");
      note.textContent = !data.newest || data.count < data.newest ? `${data.count} tasks.`
        : `The newest ${data.newest} tasks and every older one not finished${data.capped ? " (the oldest of those are left out: too many)" : ""}.`;
      fill(board, data.columns.map((column) => h("section", { class: "column", "aria-label": column.name },
        h("h2", {}, h("span", { class: `state-${column.name}` }, column.name), h("span", { class: "muted" }, String(column.tasks.length))),
        column.tasks.map((t) => h("a", { class: "task-card", href: `#/task/${encodeURIComponent(t.correlation_id)}` },
          h("span", { class: "t-title" }, t.title),
          h("span", { class: "t-meta" }, `${t.requested_by || "?"} → ${t.claimed_by || t.assigned_to || "?"}`),
          h("span", { class: "t-meta" }, `${ago(t.last_activity)}${t.blocked_by.length ? ` · waits on ${t.blocked_by.length}` : ""}${t.priority === 0 ? " · urgent" : ""}`))))));
    } catch (error) { showError(board, error); }
  };
  await draw();
  const refresh = refresher(draw);
  live.on(refresh);
  every(30000, refresh);
}

async function pageTask(page, route) {
  const cid = route.arg;
  document.title = `${cid} · palace`;
  const data = await api(`/api/task/${encodeURIComponent(cid)}`);
  const task = data.task;
  const card = task.card;
  page.append(
    h("p", {}, h("a", { href: "#/tasks" }, "← all tasks")),
    h("h1", {}, card.title, " ", stateChip(task.state)),
    h("dl", { class: "kv" },
      h("dt", {}, "task"), h("dd", { class: "mono" }, cid),
      h("dt", {}, "requested by"), h("dd", {}, agent(task.requested_by), " for ", agent(task.assigned_to)),
      h("dt", {}, "claimed by"), h("dd", {}, agent(task.claimed_by)),
      h("dt", {}, "priority"), h("dd", {}, ["0 urgent", "1 high", "2 normal", "3 low"][task.priority] || String(task.priority)),
      h("dt", {}, "branch"), h("dd", { class: "mono" }, `${card.branch || "–"} @ ${card.base_commit || "–"}`),
      h("dt", {}, "last word"), h("dd", {}, time(task.last_activity)),
      task.stalled ? [h("dt", {}, "stalled"), h("dd", { class: "warn" }, `since ${task.stalls_at}`)] : null,
      (task.waiting_on || []).length ? [h("dt", {}, "waiting on"), h("dd", {}, task.waiting_on.map((w) => [taskLink(w), " "]))] : null,
      (task.conflicts || []).length ? [h("dt", {}, "conflicts"), h("dd", { class: "flag" }, `${task.conflicts.length} losing claim(s)`)] : null,
      task.waiting_for_person ? [h("dt", {}, "waiting"), h("dd", { class: "warn" },
        task.waiting_for_approval ? "for approval: a person allows or denies what the run asks (see Now)"
          : "for a person's answer (see Now)")] : null,
      (task.questions || []).map((q) => [h("dt", {}, "question"), h("dd", {}, q.question || "", " — ",
        q.answer ? `${q.answer.by}: ${q.answer.text}` : q.status === "open" ? (q.approval ? "waiting for approval" : "waiting")
          : "expired, unanswered", q.approval ? approvalInput(q.approval).box : null)])));
  if (data.graph.nodes.length > 1) page.append(panel("Dependencies", dependencyGraph(data.graph, cid)));
  const viewer = h("div", { id: "artifact-viewer" });
  if (data.artifacts.length) {
    page.append(panel("Patches and logs", table(["artifact", "from", "when", ""], data.artifacts.map((a) => [
      h("span", { class: "mono small" }, `${a.type}: ${a.artifact_id}`), agent(a.from_agent), time(a.created_at),
      artifactButton(a.artifact_id, viewer)])), viewer));
    const firstPatch = data.artifacts.find((a) => a.type === "patch.ready");
    if (firstPatch) showArtifact(firstPatch.artifact_id, viewer);
  }
  // What the authority table did not allow on this task: shown flagged, with its rule and why (it moved nothing).
  const flags = Object.fromEntries((task.out_of_role || []).map((f) => [f.event_id, f]));
  const list = h("ol", { class: "events", "aria-label": "The task's thread" },
    (task.events || []).map((ev) => eventItem(flags[ev.id] ? { ...ev, flagged: flags[ev.id] } : ev)));
  page.append(panel(`Thread (${(task.events || []).length})`, list));
  const again = refresher(render);
  live.on((ev) => { if (ev.correlation_id === cid) again(); });
}

function dependencyGraph(graph, current) {
  // Layered: a node's column is the longest chain of blockers before it.
  const depth = {};
  const preds = {};
  for (const [a, b] of graph.edges) (preds[b] = preds[b] || []).push(a);
  const level = (id, seen = new Set()) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    depth[id] = Math.max(0, ...(preds[id] || []).map((p) => level(p, seen) + 1));
    return depth[id];
  };
  graph.nodes.forEach((n) => level(n.correlation_id));
  const columns = {};
  for (const n of graph.nodes) (columns[depth[n.correlation_id]] = columns[depth[n.correlation_id]] || []).push(n);
  const W = 200, H = 56, GX = 60, GY = 18;
  const pos = {};
  const ncols = Object.keys(columns).length;
  let rows = 0;
  for (const [col, nodes] of Object.entries(columns)) {
    nodes.forEach((n, i) => { pos[n.correlation_id] = { x: 10 + col * (W + GX), y: 10 + i * (H + GY) }; });
    rows = Math.max(rows, nodes.length);
  }
  const width = 20 + ncols * W + (ncols - 1) * GX, height = 20 + rows * H + (rows - 1) * GY;
  const svgEl = s("svg", { class: "graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": "Dependencies: each task waits on the tasks to its left" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" },
      s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
  for (const [a, b] of graph.edges) {
    if (!pos[a] || !pos[b]) continue;
    const x1 = pos[a].x + W, y1 = pos[a].y + H / 2, x2 = pos[b].x, y2 = pos[b].y + H / 2;
    svgEl.append(s("path", { class: "edge", d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
  }
  for (const n of graph.nodes) {
    const p = pos[n.correlation_id];
    const shown = STATES[n.state] || n.state;
    const link = s("a", { href: `#/task/${encodeURIComponent(n.correlation_id)}`, class: `node${n.correlation_id === current ? " me" : ""}` },
      s("title", { text: `${n.title} (${shown})` }),
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 8 }),
      s("text", { x: p.x + 10, y: p.y + 22, text: (n.title || n.correlation_id).slice(0, 28) }),
      s("text", { x: p.x + 10, y: p.y + 42, class: `state-${shown}`, text: shown }));
    svgEl.append(link);
  }
  return svgEl;
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

// -- Fleet ---------------------------------------------------------------------------------------

async function pageFleet(page) {
  document.title = "Fleet · palace";
  const body = h("div", {});
  page.append(h("h1", {}, "Fleet"), body);
  const draw = async () => {
    try { fill(body, fleetView(await api("/api/fleet"))); } catch (error) { showError(body, error); }
  };
  await draw();
  const refresh = refresher(draw);
  every(5000, refresh);
  live.on(refresh);
}

function edgeClass(state) {
  if (state === "live") return "edge live";
  if (state === "catching up" || state === "connecting") return "edge catching";
  if (state === "disconnected" || state === "error" || state === "revoked") return "edge down";
  return "edge";
}

function fleetView(data) {
  const nodes = data.nodes;
  const parts = [];
  if (!nodes.length) return [empty("This daemon is not in a palace yet (palacectl init, or join with an invite).")];
  const size = 420, cx = size / 2, cy = size / 2, r = nodes.length > 1 ? 150 : 0;
  const pos = {};
  nodes.forEach((n, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / nodes.length;
    pos[n.peer_id] = { x: cx + r * Math.cos(angle), y: cy + r * Math.sin(angle) };
  });
  const graph = s("svg", { class: "graph", viewBox: `0 0 ${size} ${size}`, width: size, height: size, role: "img",
    "aria-label": `${nodes.length} daemons and the links between them` });
  for (const e of data.edges) {
    if (!pos[e.a] || !pos[e.b]) continue;
    graph.append(s("line", { class: edgeClass(e.state), x1: pos[e.a].x, y1: pos[e.a].y, x2: pos[e.b].x, y2: pos[e.b].y },
      s("title", { text: `${e.state}${e.we_lack ? `, ${e.we_lack} events behind` : ""}` })));
  }
  for (const n of nodes) {
    const p = pos[n.peer_id];
    const sick = n.health && n.health.ok === false;
    const cls = `node${n.self ? " me" : ""}${sick ? " sick" : ""}${n.revoked ? " revoked" : ""}${n.silent ? " silent" : ""}`;
    graph.append(s("g", { class: cls },
      s("title", { text: `${n.name || n.peer_id}: ${n.self ? "this daemon" : n.state}${sick ? " — " + (n.health.problems || []).join("; ") : ""}` }),
      s("circle", { cx: p.x, cy: p.y, r: 26 }),
      s("text", { x: p.x, y: p.y + 4, "text-anchor": "middle", text: (n.name || n.peer_id || "?").slice(0, 10) }),
      s("text", { x: p.x, y: p.y + 44, "text-anchor": "middle", class: "small", text: n.self ? "here" : n.revoked ? "revoked" : (n.state || "") })));
  }
  parts.push(h("div", { class: "grid2" },
    h("section", { class: "panel", "aria-label": "Links" }, h("h2", {}, "Links"), graph,
      h("p", { class: "small muted" }, "Green: live. Orange: catching up. Red dashes: down. ",
        data.reports ? "Links between other daemons come from their own signed reports." : "This daemon does not hear other daemons' reports: only its own links are drawn.")),
    h("section", { class: "panel", "aria-label": "Daemons" }, h("h2", {}, "Daemons"), table(
      ["daemon", "state", "behind", "last contact", "health"],
      nodes.map((n) => [
        h("span", {}, h("strong", {}, n.name || "?"), n.self ? " (here)" : "", h("div", { class: "mono small muted" }, (n.peer_id || "").slice(0, 15) + "…"),
          n.role === "observer" ? h("span", { class: "chip info" }, "observer") : ""),
        n.revoked ? h("span", { class: "chip bad" }, "revoked") : h("span", { class: "chip" }, n.self ? "self" : n.state || "–"),
        n.self ? "–" : `${n.we_lack ?? "?"} we lack / ${n.they_lack ?? "?"} they lack`,
        n.self ? "–" : time(n.last_contact || n.heard_at),
        n.health ? (n.health.ok ? h("span", { class: "ok" }, "ok") : h("span", { class: "bad" }, (n.health.problems || []).join("; ") || "problems"))
          : h("span", { class: "muted" }, "not reported"),
      ])))));
  if ((data.forks || []).length) {
    parts.push(panel(`Forks (${data.forks.length})`, h("p", { class: "small muted" },
      "Two different signed events at one place of one origin's chain: two machines writing with one identity (a copied home). The first is kept; the other is evidence."),
      table(["origin", "written by", "at", "detected", "from"], data.forks.map((f) => [
        h("span", { class: "mono small" }, f.origin), f.daemon || "?", `#${f.origin_seq}`, time(f.detected_at), f.source || "–"]))));
  }
  // Streams that name no agent (a dashboard like this one, a `palacectl watch` without --agent) are counted, not listed.
  const agents = data.watchers.filter((w) => w.agent);
  const anonymous = data.watchers.length - agents.length;
  parts.push(panel(`Watching now (${agents.length})`, agents.length ? table(["agent", "on", "since", "doing"],
    agents.map((w) => [agent(w.agent), w.local ? "here" : ((w.daemon || {}).name || "?") + (w.daemon_silent ? " (silent)" : ""),
      time(w.since), w.worker ? [`worker: ${(w.worker.tasks || []).join(", ") || "idle"}`,
        w.worker.held ? h("div", { class: "small" }, h("span", { class: "chip warn" }, "held"), ` ${w.worker.held}`) : null,
        w.worker.permissions ? h("div", { class: "small muted" }, `runs may: ${w.worker.permissions}`) : null]
        : h("span", { class: "mono small" }, w.filters || "")]))
    : empty("No agent is watching anywhere in the palace."),
    anonymous ? h("p", { class: "small muted" }, `and ${anonymous} stream(s) that name no agent (dashboards, plain watches)`) : null));
  return parts;
}

// -- Leases --------------------------------------------------------------------------------------

async function pageLeases(page) {
  document.title = "Leases · palace";
  const body = h("div", {});
  page.append(h("h1", {}, "Leases"), body);
  const draw = async () => {
    try {
      const data = await api("/api/leases");
      const row = (l) => [h("span", { class: "mono" }, (l.patterns || []).join(" ")), agent(l.agent), l.project || "–",
        h("span", { class: "chip" }, l.mode), l.reason || "–", l.state === "active" ? time(l.expires_at) : time(l.ended_at)];
      fill(body, 
        panel(`Active (${data.active.length})`, data.active.length ? table(["paths", "holder", "project", "mode", "why", "expires"], data.active.map(row))
          : empty("No active leases.")),
        panel(`Conflicts (${data.conflicts.length})`, data.conflicts.length ? table(["paths", "holder", "project", "mode", "why", "ended"],
          data.conflicts.map((l) => { const r = row(l); r[3] = h("span", { class: "chip bad" }, l.state); return r; }))
          : empty("No lease lost a collision or was forced.")),
        panel("Recently ended", data.ended.length ? table(["paths", "holder", "project", "mode", "why", "ended"], data.ended.map(row))
          : empty("None.")));
    } catch (error) { showError(body, error); }
  };
  await draw();
  const refresh = refresher(draw);
  live.on(refresh);
  every(15000, refresh);
}

// -- Usage ---------------------------------------------------------------------------------------
// What runs cost (docs/usage.md): this machine's [budgets] judged by the daemon first, then the
// totals of the runs' usage reports by task, agent, machine, day or model over a window, then the
// workers a budget holds. Drawn again as usage events arrive. palace keeps no price list: a cost
// no run reported is "unknown", never $0.

const USAGE_BY = ["task", "agent", "machine", "day", "model"];
const USAGE_SINCE = [["today", "today"], ["7d", "last 7 days"], ["30d", "last 30 days"], ["all", "all time"]];
const BUDGET_CHIPS = { ok: "ok", warn: "warn", over: "bad" };

function count(n) { return Number(n || 0).toLocaleString("en-US"); }

function usd(value) {
  const n = Number(value);
  // Below a cent a run's cost still shows (a short run of a small model costs fractions of one).
  return n > 0 && n < 0.01 ? `$${n.toFixed(4)}` : `$${n.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

function costOf(total) {
  if (total.cost_usd === null || total.cost_usd === undefined) {
    return h("span", { class: "muted", title: "no run reported a cost, and palace keeps no price list" }, "unknown");
  }
  return h("span", {}, usd(total.cost_usd), total.unpriced_runs ? h("span", { class: "muted small",
    title: "the sum of the known costs: a floor, not the bill" }, ` + ${total.unpriced_runs} run(s) of unknown cost`) : "");
}

function usageKey(by, key) {
  if (key === null || key === undefined) return h("span", { class: "muted" }, "not reported");
  if (by === "task") return taskLink(key);
  if (by === "agent") return agent(key);
  return h("span", { class: by === "model" ? "mono" : "" }, key);
}

function budgetFigure(b, value) { return b.unit === "usd" ? usd(value) : `${count(value)} tokens`; }

function budgetRow(b) {
  const subject = b.scope === "agent" ? agent(b.subject) : b.scope === "task" ? taskLink(b.subject) : h("span", {}, "the palace");
  return [
    h("span", { class: `chip ${BUDGET_CHIPS[b.state] || ""}`, "data-state": b.state }, b.state),
    subject,
    h("span", {}, h("span", { class: "mono small" }, b.budget), h("div", { class: "small muted" }, b.window)),
    h("span", {}, budgetFigure(b, b.spent), " of ", budgetFigure(b, b.limit),
      b.unit === "usd" && b.unpriced_runs ? h("div", { class: "small muted" }, `a floor: ${b.unpriced_runs} run(s) reported no cost`) : ""),
    h("span", { class: "used" }, b.percent === null || b.percent === undefined ? "–" : [
      h("meter", { min: "0", max: "100", low: "80", high: "100", optimum: "0", value: String(Math.min(b.percent, 100)),
        "aria-label": `${b.percent}% of the budget` }), ` ${b.percent}%`]),
    h("span", { class: "small" }, b.line || ""),
  ];
}

function budgetsPanel(data) {
  if (data.budgets_error) {
    return panel("Budgets", h("div", { class: "banner bad", role: "alert", id: "budgets-error" },
      `[budgets] cannot be judged: ${data.budgets_error}`));
  }
  if (data.budgets === null || data.budgets === undefined) {
    return panel("Budgets", h("p", { class: "empty", id: "budgets-none" }, `No [budgets] in ${data.config}: nothing caps what runs spend.`),
      h("p", { class: "small" }, "Add a table there, for example (every key optional; see docs/usage.md, \"Budgets\"):"),
      h("pre", { class: "body" }, "[budgets]\nagent_daily_tokens = 5_000_000  # per agent and UTC day\ntask_usd = 5.0                  # per task, all its runs\npalace_monthly_usd = 500.0"));
  }
  const over = data.budgets.filter((b) => b.state === "over").length;
  const warn = data.budgets.filter((b) => b.state === "warn").length;
  const title = `Budgets${over ? ` · ${over} over` : ""}${warn ? ` · ${warn} near` : ""}`;
  return panel(title, data.budgets.length
    ? table(["state", "for", "budget", "spent", "used", "what the daemon says"], data.budgets.map(budgetRow))
    : empty("No run counts against a budget yet (an agent's or a task's budget is listed once it has runs in its window)."),
    h("p", { class: "small muted" }, `From ${data.config}; warn at 80 % unless warn_at says otherwise.`));
}

function totalsBody(data) {
  const o = data.overall || {};
  const header = { task: "task", agent: "agent", machine: "machine", day: "day (UTC)", model: "model" }[data.by] || data.by;
  return [
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("div", { class: "figure" }, count(o.runs)), h("div", { class: "label" }, "runs")),
      h("div", { class: "card" }, h("div", { class: "figure" }, count(o.tokens_in)), h("div", { class: "label" }, "tokens in")),
      h("div", { class: "card" }, h("div", { class: "figure" }, count(o.tokens_out)), h("div", { class: "label" }, "tokens out")),
      h("div", { class: "card" }, h("div", { class: "figure", id: "usage-cost" },
        !o.runs ? "–" : o.cost_usd === null ? costOf(o) : usd(o.cost_usd)),
        h("div", { class: "label" }, "cost", o.cost_usd !== null && o.unpriced_runs ? `, and ${o.unpriced_runs} run(s) of unknown cost` : ""))),
    data.totals.length ? table([header, "runs", "tokens in", "tokens out", "cost"], data.totals.map((t) => [
      usageKey(data.by, t.key), count(t.runs), count(t.tokens_in), count(t.tokens_out), costOf(t)]))
      : empty(data.since === "all" ? "No run has reported its usage yet." : "No run reported its usage in this window."),
    data.flagged ? h("p", { class: "small muted", id: "usage-flagged" },
      `${count(data.flagged)} usage report(s) held here count nowhere: not written by their task's claimant, or past its first 256 (docs/usage.md).`) : null,
  ];
}

function heldPanel(held) {
  return panel(`Workers held by a budget (${held.length})`, held.length
    ? table(["agent", "on", "runner", "why"], held.map((w) => [agent(w.agent), w.local ? "here" : (w.daemon || "?"),
      w.runner || "–", h("span", {}, h("span", { class: "chip warn" }, "held"), ` ${w.held}`)]))
    : empty("No worker is held: every worker may claim tasks."));
}

async function pageUsage(page, route) {
  document.title = "Usage · palace";
  let by = USAGE_BY.includes(route.params.get("by")) ? route.params.get("by") : "task";
  let since = USAGE_SINCE.some(([key]) => key === route.params.get("since")) ? route.params.get("since") : "all";
  const bySelect = h("select", { id: "u-by", name: "by" }, USAGE_BY.map((key) => h("option", { value: key, selected: key === by }, key)));
  const sinceSelect = h("select", { id: "u-since", name: "since" },
    USAGE_SINCE.map(([key, label]) => h("option", { value: key, selected: key === since }, label)));
  const budgets = h("div", { id: "usage-budgets" });
  const totals = h("div", { id: "usage-totals" });
  const held = h("div", { id: "usage-held" });
  page.append(h("h1", {}, "Usage"),
    h("p", { class: "small muted" }, "What unattended runs used, as their harnesses reported it; budgets are this machine's [budgets]."),
    budgets,
    panel("Totals", h("form", { class: "filters", "aria-label": "Sum the runs" },
      h("label", { for: "u-by" }, "By", bySelect), h("label", { for: "u-since" }, "Since", sinceSelect)), totals),
    held);
  const draw = async () => {
    try {
      const data = await api(`/api/usage${query({ by, since })}`);
      if (data.by !== by || data.since !== since) return;  // an answer for a choice since changed
      if (!data.supported) {
        fill(totals, empty("This daemon does not count usage yet (upgrade palaced)."));
        clear(budgets);
      } else {
        fill(budgets, budgetsPanel(data));
        fill(totals, totalsBody(data));
      }
      fill(held, heldPanel(data.held || []));
    } catch (error) { showError(totals, error); }
  };
  const refresh = refresher(draw);
  const choose = () => {
    by = bySelect.value;
    since = sinceSelect.value;
    // The choice stays in the address (a bookmark, a reload) without drawing the page again.
    history.replaceState(null, "", `#/usage${query({ by: by === "task" ? "" : by, since: since === "all" ? "" : since })}`);
    draw();
  };
  bySelect.addEventListener("change", choose);
  sinceSelect.addEventListener("change", choose);
  await draw();
  live.on((ev) => { if (String(ev.type || "").startsWith("usage.")) refresh(); });
  every(15000, refresh);  // a worker held or let go, a new UTC day, a budget raised: no event says so
}

// -- Rooms ---------------------------------------------------------------------------------------
// A room is a discussion among agents (docs/rooms.md): the list, and one room's turns in the order
// every replica agrees on, drawn again as its events arrive. Reading here moves nobody's position.

function isRoomEvent(ev) { return ev.room === "rooms" && String(ev.type || "").startsWith("room."); }

function roomLink(id, text) { return h("a", { href: `#/room/${encodeURIComponent(id)}` }, text || id); }

function roomState(room) {
  return room.closed ? h("span", { class: "chip state-applied", title: `closed by ${room.closed_by} at ${room.closed_at}` }, "closed")
    : h("span", { class: "chip state-open" }, "open");
}

async function pageRooms(page) {
  document.title = "Rooms · palace";
  const body = h("div", { id: "rooms" });
  page.append(h("h1", {}, "Rooms"),
    h("p", { class: "small muted" }, "Agents discuss here and agree before anyone acts; a closed room's transcript is filed in memory."),
    body);
  const draw = async () => {
    try {
      const data = await api("/api/rooms");
      if (!data.supported) return fill(body, empty("This daemon has no rooms yet (upgrade palaced)."));
      fill(body, data.rooms.length ? table(["room", "state", "project", "turns", "last word", "opened by", "members", "agenda"],
        data.rooms.map((r) => [roomLink(r.room_id, r.name), roomState(r), r.project, String(r.messages), time(r.last_activity),
          agent(r.opened_by), h("span", {}, (r.members || []).slice(0, 6).map((m) => [agent(m), " "]),
            (r.members || []).length > 6 ? `+${r.members.length - 6}` : ""),
          h("span", { class: "ev-preview" }, (r.agenda || "").replace(/\s+/g, " ").slice(0, 160) || "–")]))
        : empty("No rooms yet: `palacectl room open` (or MCP mempalace_room_open) opens one."));
    } catch (error) { showError(body, error); }
  };
  await draw();
  const refresh = refresher(draw);
  live.on((ev) => { if (isRoomEvent(ev)) refresh(); });
  every(30000, refresh);
}

function turnItem(ev) {
  const flags = [
    ev.after_close ? h("span", { class: "chip warn", title: "written after the close (the other side of a partition had not heard of it): not in the transcript" }, "after the close") : null,
    !ev.turn && !ev.after_close ? h("span", { class: "chip warn" }, "not a turn") : null,
    ev.impersonation ? h("span", { class: "flag" }, " impersonation") : null,
  ];
  const text = ev.body_redacted ? h("pre", { class: "body redacted" }, "[redacted]")
    : (ev.body || "").trim() ? h("pre", { class: "body" }, ev.body) : null;
  return h("li", { dataset: { id: ev.id }, class: ev.after_close ? "muted" : "" },
    h("div", { class: "row" }, time(ev.created_at), h("span", { class: "ev-type", title: ev.id }, ev.type),
      agent(ev.from_agent), ev.to_agent && ev.to_agent !== "*" ? [" → ", agent(ev.to_agent)] : "", flags),
    text);
}

async function pageRoom(page, route) {
  const id = route.arg;
  document.title = `${id} · palace`;
  const head = h("div", {});
  const list = h("ol", { class: "events", "aria-label": "The room's turns, in order" });
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "More turns");
  const note = h("p", { class: "small muted", role: "status" });
  page.append(h("p", {}, h("a", { href: "#/rooms" }, "← all rooms")), head, panel("Discussion", list, note, h("div", { class: "row" }, more)));
  let shown = 0;
  const drawHead = (room) => fill(head,
    h("h1", {}, room.name, " ", roomState(room)),
    h("dl", { class: "kv" },
      h("dt", {}, "room"), h("dd", { class: "mono" }, room.room_id),
      h("dt", {}, "project"), h("dd", {}, room.project),
      h("dt", {}, "opened"), h("dd", {}, agent(room.opened_by), " ", time(room.opened_at)),
      h("dt", {}, "members"), h("dd", {}, (room.members || []).map((m) => [agent(m), " "])),
      h("dt", {}, "filed in"), h("dd", { class: "mono" }, `${room.wing} / ${room.palace_room}${room.closed ? "" : " (when it closes)"}`),
      room.closed ? [h("dt", {}, "closed"), h("dd", {}, agent(room.closed_by), " ", time(room.closed_at)),
        h("dt", {}, "outcome"), h("dd", {}, room.outcome || "–")] : null,
      room.closes > 1 ? [h("dt", {}, "closes"), h("dd", { class: "warn" },
        `${room.closes}: both sides of a partition closed; the earliest counts`)] : null),
    h("p", { class: "small" }, h("a", { href: `#/timeline${query({ correlation_id: room.room_id })}` }, "its events in the timeline"),
      room.closed ? [" · ", h("a", { href: `#/memory${query({ q: room.palace_room })}` }, "its transcript in memory")] : ""));
  const load = async (reset) => {
    const data = await api(`/api/room/${encodeURIComponent(id)}${query({ offset: reset ? "" : String(shown) })}`);
    drawHead(data.room);
    if (reset) { clear(list); shown = 0; }
    for (const ev of data.events) list.append(turnItem(ev));
    shown += data.events.length;
    more.hidden = !data.more;
    note.textContent = data.total ? `${data.total} event(s)${data.more ? `, ${shown} shown` : ""}.` : "";
  };
  more.addEventListener("click", () => load(false).catch((error) => { note.textContent = error.message; }));
  await load(true);
  // Live: a turn may land anywhere in the agreed order (a partition healing), so the shown pages are fetched again.
  const again = refresher(async () => {
    const pages = Math.max(1, Math.ceil(shown / 200));
    await load(true);
    for (let i = 1; i < pages && !more.hidden; i++) await load(false);
  });
  live.on((ev) => { if (ev.correlation_id === id) again(); });
}

// -- Memory --------------------------------------------------------------------------------------

async function pageMemory(page, route) {
  document.title = "Memory · palace";
  const results = h("div", { id: "search-results" });
  const q = h("input", { id: "m-q", name: "q", type: "search", placeholder: "what are you looking for?", value: route.params.get("q") || "" });
  const wing = h("input", { id: "m-wing", name: "wing", placeholder: "any" });
  const room = h("input", { id: "m-room", name: "room", placeholder: "any" });
  const mode = h("select", { id: "m-mode", name: "mode" }, ["hybrid", "keyword", "vector"].map((m) => h("option", { value: m }, m)));
  const searchForm = h("form", { class: "filters", role: "search", "aria-label": "Search the drawers" },
    h("label", { for: "m-q" }, "Search", q), h("label", { for: "m-wing" }, "Wing", wing), h("label", { for: "m-room" }, "Room", room),
    h("label", { for: "m-mode" }, "Mode", mode), h("button", { type: "submit" }, "Search"));
  searchForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!q.value.trim()) return;
    fill(results, h("p", { class: "muted" }, "Searching…"));
    try {
      const data = await api(`/api/memory/search${query({ q: q.value.trim(), wing: wing.value.trim(), room: room.value.trim(), mode: mode.value })}`);
      fill(results, data.results.length ? h("ol", { class: "events" }, data.results.map((r) => h("li", {},
        h("div", { class: "row" }, h("a", { href: `#/drawer/${encodeURIComponent(r.drawer_id)}` }, `${r.wing} / ${r.room}`),
          h("span", { class: "muted small" }, `score ${Number(r.score).toFixed(3)} · ${r.added_by || "?"} · ${ago(r.filed_at)}`)),
        h("pre", { class: "body" }, (r.content || "").slice(0, 600))))) : empty("Nothing in the palace matches."));
    } catch (error) { showError(results, error); }
  });

  const entity = h("input", { id: "m-entity", name: "entity", placeholder: "an entity, e.g. orders-service" });
  const asOf = h("input", { id: "m-asof", name: "as_of", type: "date" });
  const facts = h("div", { id: "entity-facts" });
  const entityForm = h("form", { class: "filters", "aria-label": "An entity's facts over time" },
    h("label", { for: "m-entity" }, "Entity", entity), h("label", { for: "m-asof" }, "As of", asOf), h("button", { type: "submit" }, "Show"));
  entityForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!entity.value.trim()) return;
    try {
      const data = await api(`/api/memory/entity${query({ entity: entity.value.trim(), as_of: asOf.value })}`);
      const line = (f, when) => h("li", {}, h("strong", {}, f.subject), ` ${f.predicate} `, h("strong", {}, f.object),
        h("span", { class: "fact-when" }, ` ${f.valid_from || "always"} → ${f.valid_to || "now"}${when ? ` (${when})` : ""}`));
      fill(facts, 
        h("h3", {}, `True as of ${data.as_of}`), (data.active_facts || []).length ? h("ul", { class: "facts" }, data.active_facts.map((f) => line(f))) : empty("Nothing."),
        h("h3", {}, "Was true"), (data.historical_facts || []).length ? h("ul", { class: "facts" }, data.historical_facts.map((f) => line(f, "ended"))) : empty("Nothing."),
        (data.future_facts || []).length ? [h("h3", {}, "Will be true"), h("ul", { class: "facts" }, data.future_facts.map((f) => line(f, "later")))] : null);
    } catch (error) { showError(facts, error); }
  });

  const diaryAgent = h("select", { id: "m-diary", name: "agent" }, h("option", { value: "" }, "choose an agent"));
  const diary = h("div", { id: "diary" });
  diaryAgent.addEventListener("change", async () => {
    if (!diaryAgent.value) return clear(diary);
    try {
      const data = await api(`/api/memory/diary${query({ agent: diaryAgent.value })}`);
      fill(diary, data.entries.length ? h("ol", { class: "events" }, data.entries.map((e) => h("li", {},
        h("div", { class: "row" }, h("strong", {}, e.topic), h("span", { class: "muted small" }, e.timestamp || e.date)),
        h("pre", { class: "body" }, e.content)))) : empty("This diary is empty."));
    } catch (error) { showError(diary, error); }
  });
  const wings = await api("/api/memory/diary");
  for (const w of wings.agents) diaryAgent.append(h("option", { value: w.agent }, `${w.agent} (${w.entries})`));

  page.append(h("h1", {}, "Memory"),
    panel("Search the drawers", searchForm, results),
    h("div", { class: "grid2" },
      panel("Knowledge graph: what was true when", entityForm, facts),
      panel("Diaries", h("label", { for: "m-diary" }, "Agent", diaryAgent), diary)));
  if (q.value) searchForm.requestSubmit();
}

async function pageDrawer(page, route) {
  document.title = "Drawer · palace";
  const d = await api(`/api/memory/drawer/${encodeURIComponent(route.arg)}`);
  page.append(h("p", {}, h("a", { href: "#/memory" }, "← memory")),
    h("h1", {}, `${d.wing} / ${d.room}`),
    h("dl", { class: "kv" },
      h("dt", {}, "drawer"), h("dd", { class: "mono" }, d.drawer_id || route.arg),
      h("dt", {}, "filed"), h("dd", {}, `${d.filed_at || "?"} by `, agent(d.added_by)),
      h("dt", {}, "source"), h("dd", {}, d.source_file || "–"),
      d.event_id ? [h("dt", {}, "event"), h("dd", { class: "mono" }, d.event_id)] : null),
    h("pre", { class: "body" }, d.content || ""));
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

start();
