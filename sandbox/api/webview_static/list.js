// The list page: the tenant's sandboxes with kind, state, age, health and a live thumbnail.
import { badge, clock, duration, el, failure } from "/view/static/common.js";

const LIST_EVERY_MS = 2000;
const THUMB_EVERY_MS = 3000;
const cards = new Map(); // sandbox id -> {card, parts}
let skew = 0; // server clock minus ours, in seconds

async function refresh() {
  let body;
  try {
    const response = await fetch("/view/api/sandboxes", { cache: "no-store" });
    if (response.status === 401) { location.reload(); return; }
    if (!response.ok) throw new Error(await failure(response));
    body = await response.json();
  } catch (e) {
    document.getElementById("updated").textContent = `cannot refresh: ${e.message}`;
    return;
  }
  skew = body.now - Date.now() / 1000;
  document.getElementById("tenant").textContent = body.admin ? `/ all tenants (admin: ${body.tenant})` : `/ ${body.tenant}`;
  document.getElementById("logout").hidden = !body.login;
  document.getElementById("updated").textContent = `updated ${clock(body.now)}`;
  const n = body.sandboxes.length;
  document.getElementById("count").textContent = `${n} sandbox${n === 1 ? "" : "es"}`;
  document.getElementById("empty").hidden = n > 0;

  const grid = document.getElementById("grid");
  const seen = new Set();
  body.sandboxes.sort((a, b) => b.created_at - a.created_at);
  for (const sandbox of body.sandboxes) {
    seen.add(sandbox.id);
    let entry = cards.get(sandbox.id);
    if (!entry) {
      entry = makeCard(sandbox);
      cards.set(sandbox.id, entry);
    }
    update(entry, sandbox, body.now, body.admin);
    grid.append(entry.card); // keeps the order, moves nothing that is already in place
  }
  for (const [id, entry] of cards) {
    if (!seen.has(id)) { entry.card.remove(); cards.delete(id); }
  }
}

function makeCard(sandbox) {
  const parts = {
    thumb: el("a", { class: "thumb", href: `/view/${sandbox.id}`, title: "open the live view" }),
    badges: el("div", { class: "row" }),
    facts: el("div", { class: "facts" }),
    error: el("div", { class: "error" }),
    health: el("span", { class: "dot" }),
  };
  if (sandbox.has_display) {
    parts.img = el("img", { alt: `screen of ${sandbox.id}` });
    parts.thumb.append(parts.img, el("div", { class: "placeholder", text: "waiting for the first frame…" }));
  } else {
    parts.thumb.append(el("div", { class: "placeholder", text: `$ ${sandbox.kind} sandbox\n(no display)` }));
  }
  const card = el("div", { class: "card", "data-sandbox": sandbox.id },
    parts.thumb,
    el("div", { class: "body" },
      el("div", { class: "row" }, parts.health, el("span", { class: "id", text: sandbox.id })),
      parts.badges, parts.facts, parts.error,
      el("div", { class: "actions" },
        el("a", { class: "btn primary", href: `/view/${sandbox.id}`, text: "View" }),
        sandbox.has_display ? el("a", { class: "btn", href: `/view/${sandbox.id}?control=1`, text: "Take control" }) : null)));
  const entry = { card, parts, thumbAt: 0, loading: false, id: sandbox.id };
  return entry;
}

function update(entry, sandbox, now, admin) {
  const { parts } = entry;
  parts.badges.replaceChildren(
    badge(sandbox.kind, `kind-${sandbox.kind}`),
    badge(sandbox.state, `state-${sandbox.state}`),
    sandbox.has_display ? badge(`${sandbox.screen.width}×${sandbox.screen.height}`, "") : "");
  const h = sandbox.health;
  parts.health.className = `dot ${h ? (h.ok ? "ok" : "bad") : ""}`;
  parts.health.title = !h ? "health unknown" : h.ok ? "healthy" : Object.entries(h.failures).map(([k, v]) => `${k}: ${v}`).join("\n");
  const facts = [`age ${duration(now - sandbox.created_at)}`, `active ${duration(now - sandbox.last_active_at)} ago`];
  if (sandbox.expires_at) facts.push(`lease ends in ${duration(sandbox.expires_at - now)}`);
  if (admin) facts.push(`tenant ${sandbox.tenant}`);
  parts.facts.textContent = facts.join(" · ");
  const problems = [sandbox.error, h && !h.ok ? Object.values(h.failures).join("; ") : null].filter(Boolean);
  parts.error.textContent = problems.join(" — ");
  parts.error.hidden = problems.length === 0;
  if (parts.img && sandbox.state === "running") refreshThumb(entry);
}

function refreshThumb(entry) {
  const nowMs = Date.now();
  if (entry.loading || nowMs - entry.thumbAt < THUMB_EVERY_MS) return;
  entry.loading = true;
  entry.thumbAt = nowMs;
  const next = new Image();
  next.onload = () => {
    entry.parts.img.src = next.src;
    const placeholder = entry.parts.thumb.querySelector(".placeholder");
    if (placeholder) placeholder.remove();
    entry.loading = false;
  };
  next.onerror = () => { entry.loading = false; };
  next.src = `/view/api/sandboxes/${encodeURIComponent(entry.id)}/thumbnail?t=${nowMs}`;
}

// Recorded episodes, newest first, each a link to its replay page.
async function refreshTrajectories() {
  let body;
  try {
    const response = await fetch("/view/api/trajectories", { cache: "no-store" });
    if (!response.ok) return;
    body = await response.json();
  } catch (_) {
    return;
  }
  const shown = body.trajectories;
  document.getElementById("trajectory-count").textContent =
    `${body.total} trajector${body.total === 1 ? "y" : "ies"}${body.total > shown.length ? ` (newest ${shown.length})` : ""}`;
  document.getElementById("no-trajectories").hidden = shown.length > 0;
  const head = el("tr", {}, ...["trajectory", "task", "kind", "steps", "ended", "reward", "started"].map((h) => el("th", { text: h })));
  const rows = shown.map((t) => el("tr", { "data-trajectory": t.id },
    el("td", {}, el("a", { class: "mono", href: `/view/trajectories/${t.id}`, text: t.id })),
    el("td", { text: t.task_id || "-" }),
    el("td", {}, badge(t.kind, `kind-${t.kind}`)),
    el("td", { text: String(t.steps) }),
    el("td", { text: t.done ? `${t.reason}${t.truncated ? " (truncated)" : ""}` : (t.reason || "running") }),
    el("td", { text: t.reward === null ? "-" : String(t.reward) }),
    el("td", { text: clock(t.started_at) })));
  document.getElementById("trajectories").replaceChildren(...(shown.length ? [head] : []), ...rows);
}

refresh();
setInterval(refresh, LIST_EVERY_MS);
refreshTrajectories();
setInterval(refreshTrajectories, LIST_EVERY_MS * 2);
