// The memory feature's pages: search the drawers, an entity's facts over time, the diaries; one drawer.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

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
          h("span", { class: "muted small" }, `${r.embedded === false ? "score pending (not embedded yet)" : `score ${Number(r.score).toFixed(3)}`} · ${r.added_by || "?"} · ${ago(r.filed_at)}`)),
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

page("memory", pageMemory);
page("drawer", pageDrawer, { nav: "memory" });
