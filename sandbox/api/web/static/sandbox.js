// The sandbox page: a noVNC view (view-only unless the ticket grants control) and the recent actions.
// The ticket from the URL authorizes every call; the page renews it before it expires.
import RFB from "/view/novnc/core/rfb.js";
import { badge, clock, duration, el, failure, summarize } from "/view/static/common.js";

const POLL_MS = 2000;
const LOG_POLL_MS = 5000;
const PORTS_POLL_MS = 5000;
const RECONNECTS = 3;

const sandboxId = decodeURIComponent(location.pathname.split("/")[2] || "");
const params = new URLSearchParams(location.search);
const view = {
  ticket: params.get("ticket") || "",
  grant: null,
  sandbox: null,
  rfb: null,
  connected: false,
  reconnects: 0,
  lastActionAt: 0,
};
window.sandboxView = view; // for debugging from the console (and for the tests)

const $ = (id) => document.getElementById(id);

function call(path, init = {}) {
  const headers = { "X-Sandbox-Ticket": view.ticket, ...(init.headers || {}) };
  return fetch(`/view/${encodeURIComponent(sandboxId)}/${path}`, { cache: "no-store", ...init, headers });
}

function overlay(text, isError = false) {
  const node = $("overlay");
  node.hidden = !text;
  node.textContent = text || "";
  node.classList.toggle("error", isError);
}

function vncStatus(text, cls = "") {
  const node = $("vnc-status");
  node.textContent = `VNC: ${text}`;
  node.className = `status ${cls}`;
}

// ------------------------------------------------------------------ the feed: sandbox, grant, actions

async function poll() {
  let body;
  try {
    const response = await call("actions");
    if (!response.ok) throw new Error(await failure(response));
    body = await response.json();
  } catch (e) {
    $("ticket-status").textContent = `not refreshed: ${e.message}`;
    return false;
  }
  const first = view.sandbox === null;
  view.sandbox = body.sandbox;
  view.grant = body.grant;
  if (first) start();
  render(body);
  return true;
}

function render(body) {
  const s = body.sandbox;
  document.title = `${s.id} · ${s.kind} · Sandboxes`;
  $("sandbox-id").textContent = s.id;
  $("badges").replaceChildren(
    badge(s.kind, `kind-${s.kind}`), " ", badge(s.state, `state-${s.state}`), " ",
    body.grant.control ? badge("control ticket", "control") : badge("view only", "viewonly"));
  const facts = [
    ["tenant", s.tenant],
    ["screen", s.live === "screenshots" ? "the device's own" : s.has_display ? `${s.screen.width}×${s.screen.height}` : "none (terminal)"],
    ["age", duration(body.now - s.created_at)],
    ["last active", `${duration(body.now - s.last_active_at)} ago`],
  ];
  if (s.expires_at) facts.push(["lease ends", `in ${duration(s.expires_at - body.now)}`]);
  if (s.replacements) facts.push(["replaced", `${s.replacements}×`]);
  if (s.error) facts.push(["error", s.error]);
  $("facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
  renderActions(body.actions);
  if (!s.has_display) renderTerminal(body.actions);
}

function renderActions(actions) {
  const list = $("actions");
  const newest = actions.length ? actions[actions.length - 1].at : 0;
  const items = actions.slice().reverse().map((entry) => el("li", { class: entry.at > view.lastActionAt && view.lastActionAt ? "fresh" : "" },
    el("span", { class: "at", text: clock(entry.at) }),
    el("span", { class: "type", text: entry.action.type }),
    el("span", { class: "what", text: summarize(entry.action) })));
  list.replaceChildren(...items);
  view.lastActionAt = Math.max(view.lastActionAt, newest) || view.lastActionAt;
  $("no-actions").hidden = actions.length > 0;
  $("action-count").textContent = actions.length ? `(${actions.length})` : "";
}

// ------------------------------------------------------------------ terminal sandboxes: a read-only preview

function renderTerminal(actions) {
  const commands = actions.filter((entry) => entry.action.type === "exec");
  const lines = commands.map((entry) => el("div", { class: "cmd", title: clock(entry.at), text: summarize(entry.action) }));
  $("transcript").replaceChildren(...(lines.length ? lines : [el("div", { class: "title", text: "no commands yet" })]));
}

function startTerminal() {
  $("controls").hidden = true;
  overlay("");
  $("screen").replaceChildren(el("div", { class: "terminal" },
    el("div", { class: "title", text: `${view.sandbox.kind} sandbox: no display. Commands run through the API (newest last), what they printed, and the sandbox log below.` }),
    el("div", { id: "transcript" }),
    el("pre", { class: "output", id: "output" }),
    el("div", { class: "log", id: "terminal-log", text: "" })));
  $("logs-box").hidden = true;
  renderTerminal([]);
  pollLogs();
  pollOutput();
  setInterval(pollOutput, POLL_MS);
}

// The tail of what its commands printed: "$ cmd" lines, then their output (the control plane keeps the last lines).
let outputText = null;
async function pollOutput() {
  const response = await call("output");
  if (!response.ok) return;
  const lines = (await response.json()).lines;
  const text = lines.join("\n");
  if (text === outputText) return;
  outputText = text;
  $("output").replaceChildren(...(lines.length
    ? lines.map((line) => el("div", { class: line.startsWith("$ ") ? "cmd-line" : "", text: line || " " }))
    : [el("div", { class: "title", text: "no output yet" })]));
}

// ------------------------------------------------------------------ listening ports, with preview links

async function pollPorts() {
  const response = await call("ports");
  if (!response.ok) {
    $("ports-hint").textContent = `cannot list the ports: ${await failure(response)}`;
    return;
  }
  const body = await response.json();
  $("ports").replaceChildren(...body.ports.map((p) => el("li", { "data-port": String(p.port) },
    p.url ? el("a", { href: p.url, target: "_blank", rel: "noopener", class: "mono", text: `:${p.port} ↗` })
      : el("span", { class: "mono", text: `:${p.port}` }),
    el("span", { class: "addr", text: (p.addresses || []).join(", ") }),
    p.previewable ? null : el("span", { class: "addr", text: "(the platform's own: no preview)" }))));
  const hint = $("ports-hint");
  if (!body.ports.length) hint.textContent = "Nothing listens yet: a server the sandbox starts shows here, with a link to its preview.";
  else if (body.links) hint.textContent = "Each link opens the port's preview in a new tab.";
  else hint.replaceChildren("Preview links need a control ticket (a preview drives the app): ",
    el("a", { href: `/view/${encodeURIComponent(sandboxId)}?control=1`, text: "open with control" }), ".");
}

async function pollLogs() {
  const box = $("logs-box");
  const target = view.sandbox && !view.sandbox.has_display ? $("terminal-log") : (box.open ? $("logs") : null);
  if (!target) return;
  const response = await call("logs");
  target.textContent = response.ok ? await response.text() : `cannot read the log: ${await failure(response)}`;
  if (target.id === "terminal-log") target.scrollIntoView({ block: "end" });
}

// ------------------------------------------------------------------ the VNC view

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/view/${encodeURIComponent(sandboxId)}/vnc?ticket=${encodeURIComponent(view.ticket)}`;
  overlay("connecting…");
  vncStatus("connecting…");
  const rfb = new RFB($("screen"), url, { shared: true, wsProtocols: ["binary"] });
  rfb.viewOnly = !$("control").checked;
  rfb.scaleViewport = $("fit").checked;
  rfb.clipViewport = false;
  rfb.showDotCursor = true;
  rfb.background = "#0f131b";
  rfb.addEventListener("connect", () => {
    view.connected = true;
    view.reconnects = 0;
    overlay("");
    vncStatus(view.grant.control ? "connected" : "connected, view only (the server drops input)", "ok");
  });
  rfb.addEventListener("disconnect", (event) => {
    const wasConnected = view.connected;
    view.connected = false;
    view.rfb = null;
    if (view.reconnects < RECONNECTS) {
      view.reconnects += 1;
      const why = wasConnected ? "connection lost" : "connection refused";
      overlay(`${why}; retrying (${view.reconnects}/${RECONNECTS})…`, !event.detail.clean);
      vncStatus(`${why}, retrying`, "bad");
      setTimeout(connect, 1500);
    } else {
      overlay("The VNC view could not be opened: the ticket may have expired, or the sandbox's VNC server is down. Reload with a new ticket.", true);
      vncStatus("disconnected", "bad");
    }
  });
  rfb.addEventListener("securityfailure", (event) => {
    overlay(`VNC security failure: ${event.detail.reason || event.detail.status}`, true);
  });
  view.rfb = rfb;
}

function startVnc() {
  const control = $("control");
  const hint = $("control-hint");
  if (view.grant.control) {
    control.disabled = false;
    hint.textContent = "Off: you watch. On: your pointer and keys go to the sandbox.";
  } else {
    hint.replaceChildren("This ticket is view-only; the server drops any input. For control, open the page with a control ticket (",
      el("code", { text: '{"control": true}' }), ") or ", el("a", { href: `/view/${sandboxId}?control=1`, text: "from the list" }), ".");
  }
  control.addEventListener("change", () => {
    if (!view.rfb) return;
    view.rfb.viewOnly = !control.checked;
    if (control.checked) view.rfb.focus();
    vncStatus(control.checked ? "connected, in control" : "connected, watching", "ok");
  });
  $("fit").addEventListener("change", () => { if (view.rfb) view.rfb.scaleViewport = $("fit").checked; });
  if (params.get("fit") === "0") $("fit").checked = false;
  connect();
}

// ------------------------------------------------------------------ a screen with no VNC server (android): screenshots

const SCREEN_MS = 1000;
const SWIPE_MIN_PX = 12;

async function refreshScreen(img) {
  const response = await call("screen");
  if (!response.ok) {
    $("vnc-status").textContent = `screen: ${await failure(response)}`;
    return;
  }
  const old = img.src;
  img.src = URL.createObjectURL(await response.blob());
  if (old) URL.revokeObjectURL(old);
  view.screens = (view.screens || 0) + 1;
  overlay("");
  $("vnc-status").textContent = `screen: a screenshot every ${SCREEN_MS / 1000} s (this kind has no VNC server)`;
}

async function send(input) {
  const response = await call("input", { method: "POST", body: JSON.stringify(input), headers: { "Content-Type": "application/json" } });
  $("control-hint").textContent = response.ok ? `sent ${input.type}` : `not sent: ${await failure(response)}`;
  if (response.ok) refreshScreen($("screen-image"));
}

function startScreens() {
  overlay("loading the screen…");
  const img = el("img", { id: "screen-image", class: "screen-image", alt: "the sandbox's screen", draggable: "false" });
  const keys = el("div", { class: "keys", id: "screen-keys", hidden: true },
    ...["back", "home", "app_switch"].map((key) => el("button", { type: "button", "data-key": key, text: key.replace("_", " ") })));
  $("screen").replaceChildren(img, keys);
  const control = $("control");
  // The device's size as of the last screenshot shown: while the next one loads (every input fetches one), the
  // element's natural size reads 0, and a drag begun then would start at the corner.
  let size = null;
  img.addEventListener("load", () => { if (img.naturalWidth) size = [img.naturalWidth, img.naturalHeight]; });
  const at = (event) => {
    const box = img.getBoundingClientRect();
    return [Math.round((event.clientX - box.left) * size[0] / box.width),
      Math.round((event.clientY - box.top) * size[1] / box.height)];
  };
  let down = null;
  img.addEventListener("pointerdown", (event) => { if (control.checked && size) down = at(event); });
  img.addEventListener("pointerup", (event) => {
    if (!control.checked || !down) return;
    const [x, y] = down;
    const [toX, toY] = at(event);
    down = null;
    if (Math.hypot(toX - x, toY - y) < SWIPE_MIN_PX) send({ type: "tap", x, y });
    else send({ type: "swipe", x, y, to_x: toX, to_y: toY });
  });
  keys.addEventListener("click", (event) => {
    const key = event.target.dataset && event.target.dataset.key;
    if (key && control.checked) send({ type: "key", key });
  });
  if (view.grant.control) {
    control.disabled = false;
    $("control-hint").textContent = "Off: you watch. On: a click taps, a drag swipes, and the keys below go to the device.";
  } else {
    $("control-hint").replaceChildren("This ticket is view-only. For control, open the page ",
      el("a", { href: `/view/${sandboxId}?control=1`, text: "from the list" }), " with control.");
  }
  control.addEventListener("change", () => { keys.hidden = !control.checked; });
  $("fit").closest("label").hidden = true;
  refreshScreen(img);
  setInterval(() => refreshScreen(img), SCREEN_MS);
}

function start() {
  if (view.sandbox.live === "vnc") startVnc();
  else if (view.sandbox.live === "screenshots") startScreens();
  else startTerminal();
  pollPorts();
  setInterval(pollPorts, PORTS_POLL_MS);
  scheduleRenewal();
}

// ------------------------------------------------------------------ keeping the ticket fresh

function scheduleRenewal() {
  const left = view.grant.expires_at - Date.now() / 1000;
  setTimeout(renew, Math.max(2, left / 2) * 1000);
  showExpiry();
}

function showExpiry() {
  const left = view.grant.expires_at - Date.now() / 1000;
  $("ticket-status").textContent = left > 0 ? `ticket renews automatically · valid ${duration(left)}` : "ticket expired";
}

async function renew() {
  const response = await call("renew", { method: "POST" });
  if (!response.ok) {
    $("ticket-status").textContent = `ticket not renewed: ${await failure(response)}`;
    return;
  }
  const body = await response.json();
  view.ticket = body.ticket;
  view.grant = { ...view.grant, expires_at: body.expires_at };
  const url = new URL(location.href);
  url.searchParams.set("ticket", body.ticket);
  history.replaceState(null, "", url);
  scheduleRenewal();
}

// ------------------------------------------------------------------ go

$("sandbox-id").textContent = sandboxId;
if (!view.ticket) {
  overlay("No ticket in the URL: open the url that POST /v1/sandboxes/<id>/tickets returns.", true);
} else {
  poll().then((ok) => {
    if (!ok) overlay("This ticket does not open the sandbox (expired, or for another sandbox).", true);
  });
  setInterval(poll, POLL_MS);
  setInterval(pollLogs, LOG_POLL_MS);
  $("logs-box").addEventListener("toggle", pollLogs);
  setInterval(showExpiry, 1000);
}
