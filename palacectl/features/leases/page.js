// The leases feature's page: active leases, the lost and forced ones, the ended.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

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

page("leases", pageLeases);
