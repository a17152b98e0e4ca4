// The list page: one page of the sandboxes the session sees (search, kind and state filters, failing first, then
// newest), each card with its kind, state, age, health, and a live thumbnail (screens) or the tail of its recent
// output (terminals). The server pages, filters and probes; thumbnails are asked only for cards on screen. The same
// poll carries the session's capacity report, drawn by capacity.js.
import { badge, clock, duration, el, failure } from "/view/static/common.js";
import { renderCapacity } from "/view/static/capacity.js";

const LIST_EVERY_MS = 2000;
const THUMB_EVERY_MS = 10000; // a card on screen gets a fresh thumbnail this often
const THUMBS_AT_ONCE = 4;
const PAGE_SIZE = 24;
const SEARCH_DEBOUNCE_MS = 250;
const cards = new Map(); // sandbox id -> entry: {card, parts, id, visible, thumbAt, loading, running}
const $ = (id) => document.getElementById(id);
const initial = new URLSearchParams(location.search);
const query = { q: initial.get("q") || "", kind: initial.get("kind") || "", state: initial.get("state") || "",
  offset: Math.max(0, Number(initial.get("offset")) || 0) };
let asked = 0; // the newest request: an older answer that arrives late is dropped
let thumbsLoading = 0;
const stats = { thumbRequests: 0, listRequests: 0, firstPaintMs: null };
window.sandboxList = { cards, query, stats }; // for the console (and the tests)

const visibility = new IntersectionObserver((seen) => {
  for (const item of seen) {
    const entry = cards.get(item.target.dataset.sandbox);
    if (entry) entry.visible = item.isIntersecting;
  }
  pumpThumbs();
}, { rootMargin: "100px" });

function params() {
  const out = new URLSearchParams();
  for (const key of ["q", "kind", "state"]) if (query[key]) out.set(key, query[key]);
  if (query.offset) out.set("offset", String(query.offset));
  return out;
}

async function refresh() {
  if (document.hidden) return; // a tab in the background asks nothing
  const mine = ++asked;
  const search = params();
  search.set("limit", String(PAGE_SIZE));
  let body;
  try {
    stats.listRequests += 1;
    const response = await fetch(`/view/api/sandboxes?${search}`, { cache: "no-store" });
    if (response.status === 401) { location.reload(); return; }
    if (!response.ok) throw new Error(await failure(response));
    body = await response.json();
  } catch (e) {
    if (mine === asked) $("updated").textContent = `cannot refresh: ${e.message}`;
    return;
  }
  if (mine !== asked) return;
  if (body.matched > 0 && query.offset >= body.matched) { // the page emptied: show the last one there is
    query.offset = Math.floor((body.matched - 1) / PAGE_SIZE) * PAGE_SIZE;
    refresh();
    return;
  }
  render(body);
  if (stats.firstPaintMs === null) stats.firstPaintMs = performance.now();
}

function render(body) {
  $("tenant").textContent = body.admin ? `/ all tenants (admin: ${body.tenant})` : `/ ${body.tenant}`;
  $("logout").hidden = !body.login;
  $("updated").textContent = `updated ${clock(body.now)}`;
  $("count").textContent = `${body.total} sandbox${body.total === 1 ? "" : "es"}`;
  const failing = body.counts.state.failing || 0;
  $("summary").textContent = failing ? `${failing} failing` : "";
  $("summary").className = failing ? "bad-text" : "muted";
  options($("kind"), "any kind", body.counts.kind, query.kind);
  options($("state"), "any state", body.counts.state, query.state, ["failing"]);
  $("empty").hidden = body.total > 0;
  $("no-match").hidden = !(body.total > 0 && body.matched === 0);
  const first = body.matched ? body.offset + 1 : 0;
  const last = body.offset + body.sandboxes.length;
  $("range").textContent = body.matched ? `${first}-${last} of ${body.matched}${body.matched < body.total ? ` (of ${body.total})` : ""}` : "";
  $("prev").disabled = body.offset <= 0;
  $("next").disabled = last >= body.matched;
  if (body.capacity) renderCapacity(body.capacity);

  const grid = $("grid");
  const seen = new Set();
  let previous = null;
  for (const sandbox of body.sandboxes) {
    seen.add(sandbox.id);
    let entry = cards.get(sandbox.id);
    if (!entry) {
      entry = makeCard(sandbox);
      cards.set(sandbox.id, entry);
      visibility.observe(entry.card);
    }
    update(entry, sandbox, body.now, body.admin);
    const want = previous ? previous.nextSibling : grid.firstChild;
    if (want !== entry.card) grid.insertBefore(entry.card, want); // moves only what is out of place
    previous = entry.card;
  }
  for (const [id, entry] of cards) {
    if (!seen.has(id)) { visibility.unobserve(entry.card); entry.card.remove(); cards.delete(id); }
  }
  pumpThumbs();
}

// A select's options from the counts: "running (268)"; the chosen value stays even when its count is 0.
function options(select, any, counts, chosen, first = []) {
  const keys = [...first, ...Object.keys(counts).filter((k) => !first.includes(k)).sort()];
  if (chosen && !keys.includes(chosen)) keys.push(chosen);
  const wanted = ["", ...keys].map((k) => (k ? `${k} (${counts[k] || 0})` : any));
  const have = Array.from(select.options).map((o) => o.textContent);
  if (wanted.join("|") !== have.join("|")) {
    select.replaceChildren(el("option", { value: "", text: any }),
      ...keys.map((k) => el("option", { value: k, text: `${k} (${counts[k] || 0})` })));
  }
  select.value = chosen;
}

function makeCard(sandbox) {
  const parts = {
    thumb: el("a", { class: "thumb", href: `/view/${sandbox.id}`, title: "open the live view" }),
    badges: el("div", { class: "row" }),
    labels: el("div", { class: "labels" }),
    facts: el("div", { class: "facts" }),
    error: el("div", { class: "error" }),
    health: el("span", { class: "dot" }),
  };
  if (sandbox.has_display) {
    parts.img = el("img", { alt: `screen of ${sandbox.id}` });
    parts.thumb.append(parts.img, el("div", { class: "placeholder", text: "waiting for the first frame…" }));
  } else {
    parts.tail = el("pre", { class: "tail" });
    parts.thumb.append(parts.tail);
  }
  const card = el("div", { class: "card", "data-sandbox": sandbox.id },
    parts.thumb,
    el("div", { class: "body" },
      el("div", { class: "row" }, parts.health, el("span", { class: "id", text: sandbox.id })),
      parts.badges, parts.labels, parts.facts, parts.error,
      el("div", { class: "actions" },
        el("a", { class: "btn primary", href: `/view/${sandbox.id}`, text: "View" }),
        el("a", { class: "btn", href: `/view/${sandbox.id}?control=1`, text: sandbox.has_display ? "Take control" : "Control" }))));
  return { card, parts, id: sandbox.id, visible: false, thumbAt: 0, loading: false, running: false, tailText: null };
}

function update(entry, sandbox, now, admin) {
  const { parts } = entry;
  parts.badges.replaceChildren(
    badge(sandbox.kind, `kind-${sandbox.kind}`),
    badge(sandbox.state, `state-${sandbox.state}`),
    sandbox.has_display ? badge(`${sandbox.screen.width}×${sandbox.screen.height}`, "") : "");
  const labels = Object.entries(sandbox.labels || {}).map(([k, v]) => `${k}=${v}`);
  if (sandbox.task_id) labels.unshift(`task ${sandbox.task_id}`);
  if (parts.labels.dataset.text !== labels.join("\n")) {
    parts.labels.dataset.text = labels.join("\n");
    parts.labels.replaceChildren(...labels.map((l) => badge(l, "label")));
  }
  const h = sandbox.health;
  const failing = sandbox.state === "unhealthy" || Boolean(sandbox.error);
  parts.health.className = `dot ${failing || (h && !h.ok) ? "bad" : h ? "ok" : ""}`;
  parts.health.title = !h ? "health unknown" : h.ok ? "healthy" : Object.entries(h.failures).map(([k, v]) => `${k}: ${v}`).join("\n");
  const facts = [`age ${duration(now - sandbox.created_at)}`, `active ${duration(now - sandbox.last_active_at)} ago`];
  if (sandbox.expires_at) facts.push(`lease ends in ${duration(sandbox.expires_at - now)}`);
  if (admin) facts.push(`tenant ${sandbox.tenant}`);
  parts.facts.textContent = facts.join(" · ");
  const problems = [sandbox.error, h && !h.ok ? Object.values(h.failures).join("; ") : null].filter(Boolean);
  parts.error.textContent = problems.join(" — ");
  parts.error.hidden = problems.length === 0;
  entry.card.classList.toggle("failing", failing);
  entry.running = sandbox.state === "running";
  if (parts.tail) showTail(entry, sandbox.output || []);
}

function showTail(entry, lines) {
  const text = lines.join("\n");
  if (entry.tailText === text) return;
  entry.tailText = text;
  entry.parts.tail.replaceChildren(...(lines.length
    ? lines.map((line) => el("div", { class: line.startsWith("$ ") ? "cmd" : "", text: line || " " }))
    : [el("div", { class: "none-yet", text: "$ no output yet" })]));
}

// Thumbnails: only cards on screen, each at most every THUMB_EVERY_MS, a few at a time.
function pumpThumbs() {
  if (document.hidden) return;
  const nowMs = Date.now();
  const due = [...cards.values()]
    .filter((e) => e.parts.img && e.visible && e.running && !e.loading && nowMs - e.thumbAt >= THUMB_EVERY_MS)
    .sort((a, b) => a.thumbAt - b.thumbAt);
  for (const entry of due) {
    if (thumbsLoading >= THUMBS_AT_ONCE) break;
    loadThumb(entry);
  }
}

function loadThumb(entry) {
  const nowMs = Date.now();
  entry.loading = true;
  entry.thumbAt = nowMs;
  thumbsLoading += 1;
  stats.thumbRequests += 1;
  const next = new Image();
  const done = () => { entry.loading = false; thumbsLoading -= 1; pumpThumbs(); };
  next.onload = () => {
    entry.parts.img.src = next.src;
    const placeholder = entry.parts.thumb.querySelector(".placeholder");
    if (placeholder) placeholder.remove();
    done();
  };
  next.onerror = done;
  next.src = `/view/api/sandboxes/${encodeURIComponent(entry.id)}/thumbnail?t=${nowMs}`;
}

// The controls: a new search or filter starts at the first page; the address keeps them for a reload.
function changed(resetOffset = true) {
  if (resetOffset) query.offset = 0;
  const search = params();
  const text = search.toString();
  history.replaceState(null, "", `/view${text ? `?${text}` : ""}`);
  refresh();
}

let typing = null;
$("search").value = query.q;
$("search").addEventListener("input", () => {
  clearTimeout(typing);
  typing = setTimeout(() => { query.q = $("search").value.trim(); changed(); }, SEARCH_DEBOUNCE_MS);
});
$("kind").addEventListener("change", () => { query.kind = $("kind").value; changed(); });
$("state").addEventListener("change", () => { query.state = $("state").value; changed(); });
$("prev").addEventListener("click", () => { query.offset = Math.max(0, query.offset - PAGE_SIZE); changed(false); window.scrollTo(0, 0); });
$("next").addEventListener("click", () => { query.offset += PAGE_SIZE; changed(false); window.scrollTo(0, 0); });
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
setInterval(pumpThumbs, 1000);

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
