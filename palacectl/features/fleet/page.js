// The fleet feature's page: the daemons of the palace as a graph, their forks and watchers.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

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
      s("title", { text: `${n.label || n.peer_id}: ${n.self ? "this daemon" : n.state}${sick ? " — " + (n.health.problems || []).join("; ") : ""}` }),
      s("circle", { cx: p.x, cy: p.y, r: 26 }),
      // A name two daemons share is drawn with the short id that tells them apart (label: "vm (MFZWI3D)").
      s("text", { x: p.x, y: p.y + 4, "text-anchor": "middle", text: (n.label || n.peer_id || "?").slice(0, n.label !== n.name ? 20 : 10) }),
      s("text", { x: p.x, y: p.y + 44, "text-anchor": "middle", class: "small", text: n.self ? "here" : n.revoked ? "revoked" : (n.state || "") })));
  }
  parts.push(h("div", { class: "grid2" },
    h("section", { class: "panel", "aria-label": "Links" }, h("h2", {}, "Links"), graph,
      h("p", { class: "small muted" }, "Green: live. Orange: catching up. Red dashes: down. ",
        data.reports ? "Links between other daemons come from their own signed reports." : "This daemon does not hear other daemons' reports: only its own links are drawn.")),
    h("section", { class: "panel", "aria-label": "Daemons" }, h("h2", {}, "Daemons"), table(
      ["daemon", "state", "behind", "last contact", "health"],
      nodes.map((n) => [
        h("span", {}, h("strong", {}, n.label || "?"), n.self ? " (here)" : "", h("div", { class: "mono small muted" }, (n.peer_id || "").slice(0, 15) + "…"),
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
    agents.map((w) => [agent(w.agent), w.local ? "here" : ((w.daemon || {}).label || (w.daemon || {}).name || "?") + (w.daemon_silent ? " (silent)" : ""),
      time(w.since), w.worker ? [`worker: ${(w.worker.tasks || []).join(", ") || "idle"}`,
        w.worker.held ? h("div", { class: "small" }, h("span", { class: "chip warn" }, "held"), ` ${w.worker.held}`) : null,
        w.worker.permissions ? h("div", { class: "small muted" }, `runs may: ${w.worker.permissions}`) : null]
        : h("span", { class: "mono small" }, w.filters || "")]))
    : empty("No agent is watching anywhere in the palace."),
    anonymous ? h("p", { class: "small muted" }, `and ${anonymous} stream(s) that name no agent (dashboards, plain watches)`) : null));
  return parts;
}

page("fleet", pageFleet);
