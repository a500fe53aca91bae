// The rooms feature's pages: the rooms, and one room's discussion in the order every replica agrees on.
// Drawn with the frame's helpers (palacectl/ui/static/app.js); registered with page().
"use strict";

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

page("rooms", pageRooms);
page("room", pageRoom, { nav: "rooms" });
