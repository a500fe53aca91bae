// The tasks feature's pages: the board, and one task with its dependencies, patches and thread.
// Drawn with the frame's helpers and widgets (palacectl/ui/static/app.js); registered with page().
"use strict";

// -- Tasks ---------------------------------------------------------------------------------------

// Where a delivered patch stands, on its card: its review and its newest check (issue 46).
function landingLine(t) {
  const parts = [];
  if (t.review_state && t.review_state !== "not_required" && t.review_state !== "no_patch") parts.push(`review: ${t.review_state.replace("_", " ")}`);
  if (t.check) parts.push(`check ${t.check}`);
  return parts.length ? h("span", { class: "t-meta" }, parts.join(" · ")) : null;
}

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
          h("span", { class: "t-meta" }, `${ago(t.last_activity)}${t.blocked_by.length ? ` · waits on ${t.blocked_by.length}` : ""}${t.priority === 0 ? " · urgent" : ""}`),
          landingLine(t))))));
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
    const shown = n.state;
    const link = s("a", { href: `#/task/${encodeURIComponent(n.correlation_id)}`, class: `node${n.correlation_id === current ? " me" : ""}` },
      s("title", { text: `${n.title} (${shown})` }),
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: 8 }),
      s("text", { x: p.x + 10, y: p.y + 22, text: (n.title || n.correlation_id).slice(0, 28) }),
      s("text", { x: p.x + 10, y: p.y + 42, class: `state-${shown}`, text: shown }));
    svgEl.append(link);
  }
  return svgEl;
}

page("tasks", pageTasks);
page("task", pageTask, { nav: "tasks" });
