// The dashboard feature's pages: Now (what needs the person at the dashboard) and the Timeline.
// Drawn with the frame's helpers and widgets (palacectl/ui/static/app.js); registered with page().
"use strict";

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
  const grants = data.grants || [];
  if (grants.length) parts.push(panel(`Grants in force (${grants.length})`, h("ul", { class: "grants", id: "grants" },
    grants.map(grantItem))));
  const usage = data.usage_today || [];
  if (usage.length) {
    parts.push(panel("Runs today (usage)", table(["agent", "runs", "tokens in", "tokens out", "cost"], usage.map((u) => [
      agent(u.key), String(u.runs), String(u.tokens_in), String(u.tokens_out),
      u.cost_usd === null ? "unknown" : `${usd(u.cost_usd)}${u.unpriced_runs ? "+" : ""}`])),
      h("p", { class: "small" }, h("a", { href: "#/usage?by=agent&since=today" }, "Usage and budgets →"))));
  }
  parts.push(panel(`Agents (${data.agents_total})`, data.agents.length ? table(
    ["agent", "daemon", "watching", "working on", "last event"],
    data.agents.map((a) => [
      h("span", {}, agent(a.agent), a.stale ? h("span", { class: "chip warn", title: "no activity for a long time" }, " stale") : "",
        a.impersonations ? h("span", { class: "chip bad" }, ` ${a.impersonations} impersonations`) : ""),
      h("span", {}, a.daemon_label || "–", a.here ? h("span", { class: "muted small" }, " (here)") : ""),
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

// A grant: an allow a person widened past one call; it lets exactly its shape run until it ends.
function grantItem(g) {
  const status = h("span", { class: "small", role: "status" });
  const over = { task: ["task ", taskLink(g.task)], agent: ["agent ", agent(g.agent)], project: [`project ${g.project}`] };
  const revoke = h("button", { type: "button", class: "secondary grant-revoke" }, "Revoke");
  revoke.addEventListener("click", async () => {
    revoke.disabled = true;
    try {
      await api("/api/grant/revoke", { method: "POST", body: JSON.stringify({ answer_id: g.answer_id }),
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": CSRF } });
      status.textContent = "Revoked: its requests are asked again.";
    } catch (error) {
      status.textContent = `Not revoked: ${error.message}`;
      revoke.disabled = false;
    }
  });
  return h("li", { class: "grant", "data-grant": g.answer_id },
    h("code", { class: "grant-shape" }, g.shape), " · for ", over[g.scope] || g.scope, " · by ", agent(g.by),
    " · until ", time(g.until), session.can_write ? [" ", revoke, " ", status] : "");
}

// How far an allow reaches (the daemon binds it to the request's shape): a select beside "allow".
const GRANT_SCOPES = [["call", "this call only"], ["task", "this task"], ["agent", "this agent"], ["project", "this project"]];
const GRANT_TIMES = [["3600", "1 hour"], ["28800", "8 hours"], ["86400", "1 day"], ["604800", "7 days"]];

function questionItem(q) {
  const status = h("span", { class: "small", role: "status" });
  // Only a request palace can match later calls to (it has a shape) may be allowed for more than its call.
  const scope = q.approval && q.approval.shape ? h("select", { class: "grant-scope", "aria-label": "Allow for" },
    GRANT_SCOPES.map(([value, label]) => h("option", { value }, label))) : null;
  const span = scope ? h("select", { class: "grant-time", "aria-label": "For how long" },
    GRANT_TIMES.map(([value, label]) => h("option", { value, selected: value === "28800" ? "" : null }, label))) : null;
  const send = async (text, buttons) => {
    buttons.forEach((b) => { b.disabled = true; });
    status.textContent = "Answering…";
    const doc = { question_id: q.question_id, text };
    if (scope && text === "allow" && scope.value !== "call") Object.assign(doc, { grant: scope.value, for_s: Number(span.value) });
    try {
      const result = await api("/api/answer", { method: "POST", body: JSON.stringify(doc),
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
    if (scope) controls.push(h("label", { class: "small" }, " for ", scope, " ", span));
  } else if (session.can_write) {
    const input = h("input", { type: "text", class: "answer-text", "aria-label": "Your answer", maxlength: "2000" });
    const button = h("button", { type: "button", class: "secondary" }, "Answer");
    button.addEventListener("click", () => { if (input.value.trim()) send(input.value, [button]); });
    controls.push(input, button);
  }
  return h("li", { class: "question", "data-question": q.question_id },
    h("div", {}, agent(q.asked_by), q.machine ? h("span", { class: "muted asked-on" }, ` on ${q.machine}`) : "",
      " asks ", agent(q.to), " · ", time(q.asked_at),
      q.correlation_id ? [" · ", taskLink(q.correlation_id)] : "", " · expires ", time(q.expires_at)),
    q.approval ? h("p", {}, h("span", { class: "chip warn" }, "approval"), " run ",
      h("strong", {}, q.approval.tool), q.approval.argument ? [": ", h("code", { class: "approval-argument" }, q.approval.argument)] : "",
      q.approval.reason ? h("span", { class: "approval-reason" }, ` — why: ${q.approval.reason}`) : "")
      : h("p", { class: "question-text" }, q.question || ""),
    whole ? whole.box : null,
    h("div", { class: "row" }, controls, status));
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

page("now", pageNow);
page("timeline", pageTimeline);
