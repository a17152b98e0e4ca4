// The list page's capacity panel, drawn from the `capacity` of each list poll (the session's own report): the host's
// memory and CPU (held, granted, warm and free of what is allocatable), how many of each kind fit now, the calls
// waiting for capacity, each tenant's use, quota and refusals, and a banner while memory pressure stops admission.
import { badge, duration, el } from "/view/static/common.js";

const $ = (id) => document.getElementById(id);
const mib = (n) => `${Math.round(n).toLocaleString("en-US")} MiB`;
const cpu = (n) => `${Number(n.toFixed(2)).toLocaleString("en-US")} CPU`;
const QUOTA = { max_sandboxes: ["sandboxes", String], max_memory_mb: ["memory", mib], max_cpus: ["CPU", cpu],
  max_group: ["group", String], max_warm: ["warm", String], max_snapshots: ["snapshots", String] };

export function renderCapacity(cap) {
  $("pressure").hidden = !cap.under_pressure;
  $("pressure").textContent = cap.under_pressure
    ? `Admission stopped: ${cap.under_pressure}. New sandboxes wait or are refused until it clears.` : "";
  $("cap-bars").replaceChildren(...(cap.bounded
    ? [meter("memory", "memory_mb", cap, mib), meter("CPU", "cpus", cap, cpu), legend()]
    : [el("div", { class: "muted", text: "not checked: the scheduler places sandboxes" }),
      el("div", { class: "muted", text: `reserved: held ${mib(cap.held.memory_mb)}, ${cpu(cap.held.cpus)} · `
        + `warm ${mib(cap.warm.memory_mb)} · granted ${mib(cap.granted.memory_mb)}` })]));
  const kinds = Object.keys(cap.fits_empty);
  $("cap-fit").replaceChildren(...(kinds.length ? [el("span", { class: "muted", text: "fit now" }),
    ...kinds.map((k) => fit(k, cap.fits_now[k] ?? 0, cap.fits_empty[k]))] : []));
  waiting(cap.waiting);
  tenants(cap.tenants);
}

// One resource's bar: held, granted, warm, then free (warm is evicted for held sandboxes, so it counts as free).
function meter(label, key, cap, fmt) {
  const total = cap.allocatable[key];
  const parts = [["held", cap.held[key]], ["granted", cap.granted[key]], ["warm", cap.warm[key]]];
  const scale = Math.max(total, parts.reduce((sum, [, v]) => sum + v, 0)) || 1;
  const free = cap.free[key];
  const text = `${parts.map(([name, v]) => `${name} ${fmt(v)}`).join(" · ")} · free ${fmt(Math.max(0, free))}`
    + ` of ${fmt(total)}`;
  return el("div", { class: "meter-row", "data-resource": key },
    el("span", { class: "meter-label", text: label }),
    el("div", { class: "meter", title: text },
      ...parts.map(([name, v]) => el("span", { class: name, style: `width: ${(100 * v) / scale}%` }))),
    el("span", { class: `meter-text${free <= 0 ? " bad-text" : ""}`, text }));
}

function legend() {
  return el("div", { class: "meter-legend" }, ...["held", "granted", "warm", "free"].map(
    (name) => el("span", {}, el("i", { class: name }), name)));
}

function fit(kind, now, empty) {
  const b = badge(`${kind} ${now} of ${empty}`, now > 0 ? `kind-${kind}` : "none-fit");
  b.title = `${now} ${kind} sandboxes of the default spec fit now; ${empty} on an empty host`;
  return b;
}

function waiting(calls) {
  $("cap-waiting-title").textContent = `Waiting for capacity${calls.length ? ` (${calls.length})` : ""}`;
  $("cap-no-waiting").hidden = calls.length > 0;
  const head = row("th", ["#", "tenant", "kind", "count", "waited", "gives up in"]);
  $("cap-waiting").replaceChildren(...(calls.length ? [head] : []), ...calls.map((c) => {
    const tr = row("td", [String(c.position), c.tenant, badge(c.kind, `kind-${c.kind}`), String(c.count),
      duration(c.waited_s), duration(c.gives_up_in_s)]);
    tr.dataset.ticket = c.ticket;
    return tr;
  }));
}

function tenants(rows) {
  const head = row("th", ["tenant", "sandboxes", "memory", "CPU", "quota", "refusals"]);
  $("cap-tenants").replaceChildren(...(rows.length ? [head] : []), ...rows.map((t) => {
    const limits = Object.entries(t.quota).filter(([k, v]) => v !== null && QUOTA[k])
      .map(([k, v]) => `${QUOTA[k][0]} ≤ ${QUOTA[k][1](v)}`);
    const refused = Object.entries(t.refusals).map(([why, n]) => `${why} ${n}`);
    const tr = row("td", [t.tenant, String(t.sandboxes), mib(t.reserved.memory_mb), cpu(t.reserved.cpus),
      limits.join(" · ") || "no limits", refused.join(" · ") || "none"]);
    tr.dataset.tenant = t.tenant;
    if (refused.length) tr.lastChild.className = "bad-text";
    return tr;
  }));
  $("cap-no-tenants").hidden = rows.length > 0;
}

function row(cell, values) {
  return el("tr", {}, ...values.map((v) => (typeof v === "string" ? el(cell, { text: v }) : el(cell, {}, v))));
}
