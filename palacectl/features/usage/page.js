// The usage feature's page: what runs cost, the budgets, the workers a budget holds.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

// -- Usage ---------------------------------------------------------------------------------------
// What runs cost (docs/usage.md): this machine's [budgets] judged by the daemon first, then the
// totals of the runs' usage reports by task, agent, machine, day or model over a window, then the
// workers a budget holds. Drawn again as usage events arrive. palace keeps no price list: a cost
// no run reported is "unknown", never $0.

const USAGE_BY = ["task", "agent", "machine", "day", "model"];
const USAGE_SINCE = [["today", "today"], ["7d", "last 7 days"], ["30d", "last 30 days"], ["all", "all time"]];
const BUDGET_CHIPS = { ok: "ok", warn: "warn", over: "bad" };

function count(n) { return Number(n || 0).toLocaleString("en-US"); }


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

page("usage", pageUsage);
