// Small helpers shared by the web view's pages.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

export function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60), s = seconds % 60;
  if (m < 60) return `${m}m ${String(s).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

// The error message of a failed API call: {"error": {"code", "message"}} or the status line.
export async function failure(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON */ }
  return `${response.status} ${response.statusText}`;
}

export function badge(text, cls) {
  return el("span", { class: `badge ${cls}`, text });
}

// One line that says what an action did, from its JSON form.
export function summarize(action) {
  const a = action || {};
  const xy = (x, y) => (x === undefined || x === null ? "" : `(${x}, ${y})`);
  switch (a.type) {
    case "move": case "click": case "double_click": case "right_click":
      return [xy(a.x, a.y), a.button && a.button !== "left" ? a.button : ""].filter(Boolean).join(" ") || "at the pointer";
    case "drag": return `${xy(a.x, a.y)} → ${xy(a.to_x, a.to_y)}`;
    case "scroll": return `dx=${a.dx ?? 0} dy=${a.dy ?? 0} ${xy(a.x, a.y)}`.trim();
    case "type_text": return JSON.stringify(a.text ?? "");
    case "key": return a.key ?? "";
    case "hotkey": return (a.keys || []).join("+");
    case "mouse_down": case "mouse_up": return a.button ?? "left";
    case "wait": return `${a.seconds}s`;
    case "exec": return Array.isArray(a.cmd) ? a.cmd.join(" ") : String(a.cmd ?? "");
    case "navigate": return a.url ?? "";
    case "evaluate": return a.expression ?? "";
    default: {
      const { type, ...rest } = a;
      return JSON.stringify(rest);
    }
  }
}
