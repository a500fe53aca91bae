// The integrate feature's page: the Merge queue (what waits to land, in review, checking, merged,
// failed, sent back), with Approve / Request changes for a patch waiting for this person's review.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

// -- Merge queue -----------------------------------------------------------------------------------

function reviewControls(card, done) {
  const status = h("span", { class: "small", role: "status" });
  const words = h("input", { type: "text", placeholder: "what to change (for Request changes)", "aria-label": "review words" });
  const approve = h("button", { type: "button", class: "secondary review-approve" }, "Approve");
  const changes = h("button", { type: "button", class: "secondary review-changes" }, "Request changes");
  const send = async (verdict) => {
    [approve, changes].forEach((b) => { b.disabled = true; });
    status.textContent = "Sending…";
    try {
      await api("/api/review", { method: "POST", body: JSON.stringify({ correlation_id: card.correlation_id, verdict, text: words.value }),
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": CSRF } });
      status.textContent = verdict === "approve" ? "Approved." : "Sent back to its author.";
      done();
    } catch (error) {
      status.textContent = `Not sent: ${error.message}`;
      [approve, changes].forEach((b) => { b.disabled = false; });
    }
  };
  approve.addEventListener("click", () => send("approve"));
  changes.addEventListener("click", () => send("changes_requested"));
  return h("div", { class: "review" }, words, approve, changes, status);
}

function checkCell(check) {
  if (!check) return "–";
  const took = typeof check.duration_s === "number" ? ` ${check.duration_s.toFixed(1)} s` : "";
  return h("span", {}, h("span", { class: `chip ${check.result === "passed" ? "ok" : "bad"}` }, check.result), took);
}

async function pageMerge(page) {
  document.title = "Merge queue · palace";
  const body = h("div", {});
  page.append(h("h1", {}, "Merge queue"), body);
  const draw = async () => {
    try {
      const data = await api("/api/merge");
      const panels = data.columns.map((column) => {
        const rows = column.tasks.map((card) => {
          const review = card.review && card.review.by ? `${card.review.by}: ${card.review.state}` : "not required";
          // The task's page shows the diff and the check's log (its "Patches and logs").
          const patch = card.patch_artifact ? taskLink(card.correlation_id, "diff") : "–";
          const row = [taskLink(card.correlation_id, card.title), card.author ? agent(card.author) : "–", patch, review,
            checkCell(card.check), card.rework ? `${card.rounds}× — ${card.rework.said.slice(0, 120)}` : "–", time(card.last_activity)];
          if (column.name === "in review" && session.can_write && card.review &&
              (card.review.by === data.person || card.review.by === "any-other-agent")) {
            row.push(reviewControls(card, draw));
          } else {
            row.push("");
          }
          return row;
        });
        return panel(`${column.name[0].toUpperCase()}${column.name.slice(1)} (${column.tasks.length})`,
          rows.length ? table(["task", "author", "patch", "review", "check", "sent back", "last", ""], rows)
            : empty("None."));
      });
      fill(body, ...panels);
    } catch (error) { showError(body, error); }
  };
  await draw();
  const refresh = refresher(draw);
  live.on(refresh);
  every(15000, refresh);
}

page("merge", pageMerge);
