// The replay page of a recorded episode: each step's action and the screen after it (frames by content hash),
// step by step or played back, with the episode's reward. Reads /view/api/trajectories/{id} with the session.
import { badge, clock, el, failure, summarize } from "/view/static/common.js";

const PLAY_MS = 700;
const trajectoryId = decodeURIComponent(location.pathname.split("/")[3] || "");
const replay = { trajectory: null, index: 0, timer: null, ready: false };
window.trajectoryReplay = replay; // for the console (and the tests)

const $ = (id) => document.getElementById(id);
const api = (path = "") => `/view/api/trajectories/${encodeURIComponent(trajectoryId)}${path}`;

function reward(value) {
  return value === null || value === undefined ? "not evaluated" : String(value);
}

function describe(step) {
  if (!step.action) return { type: "reset", what: "the episode starts (setup done)" };
  const type = step.action.type;
  return { type, what: type === "pyautogui" ? step.action.code : summarize(step.action) };
}

// The frame to show at a step: its own, else the latest one before it (a step without a screenshot).
function frameAt(index) {
  const steps = replay.trajectory.steps;
  for (let i = index; i >= 0; i--) if (steps[i].frame) return steps[i].frame;
  return null;
}

function outputAt(step) {
  const obs = step.observation || {};
  if (obs.exec) return `$ exit ${obs.exec.exit_code}\n${obs.exec.stdout}${obs.exec.stderr}`;
  if (obs.url) return `${obs.title || ""}\n${obs.url}`;
  return "";
}

function show(index) {
  const t = replay.trajectory;
  replay.index = Math.max(0, Math.min(index, t.steps.length - 1));
  const step = t.steps[replay.index];
  const frame = frameAt(replay.index);
  const img = $("frame");
  if (frame) {
    const src = api(`/frames/${frame.sha256}`);
    if (img.dataset.sha !== frame.sha256) { img.src = src; img.dataset.sha = frame.sha256; }
    img.hidden = false;
  } else {
    img.hidden = true;
  }
  const text = outputAt(step);
  const out = $("output");
  out.textContent = text || (frame ? "" : "(no screen: a sandbox without a display, and no output at this step)");
  out.hidden = !!frame && !text;
  $("scrub").value = String(replay.index);
  const last = replay.index === t.steps.length - 1;
  $("position").textContent = `step ${step.index} of ${t.steps[t.steps.length - 1].index}`;
  $("step-status").textContent = last && t.info.done
    ? `ended: ${t.info.reason}${t.info.truncated ? " (truncated)" : ""} · reward ${reward(t.info.reward)}`
    : `at ${clock(step.at)}`;
  for (const li of $("steps").children) li.classList.toggle("current", Number(li.dataset.position) === replay.index);
  const current = $("steps").children[replay.index];
  if (current) current.scrollIntoView({ block: "nearest" });
}

function play() {
  if (replay.timer) {
    clearInterval(replay.timer);
    replay.timer = null;
    $("play").textContent = "▶ play";
    return;
  }
  if (replay.index >= replay.trajectory.steps.length - 1) show(0);
  $("play").textContent = "⏸ pause";
  replay.timer = setInterval(() => {
    if (replay.index >= replay.trajectory.steps.length - 1) { play(); return; }
    show(replay.index + 1);
  }, PLAY_MS);
}

function render(t) {
  const info = t.info;
  $("trajectory-id").textContent = info.id;
  document.title = `${info.task_id || info.id} · trajectory`;
  $("badges").replaceChildren(badge(info.kind, `kind-${info.kind}`),
    badge(`reward ${reward(info.reward)}`, info.reward === 1 ? "state-running" : ""));
  const facts = [
    ["task", info.task_id || "-"], ["sandbox", info.sandbox_id], ["image", info.image], ["steps", String(info.steps)],
    ["ended", info.done ? `${info.reason}${info.truncated ? " (truncated)" : ""}` : info.reason || "not yet"],
    ["reward", reward(info.reward)], ["frames", `${info.frames} distinct`], ["started", clock(info.started_at)],
  ];
  $("facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v, class: "mono" })]));
  $("steps").replaceChildren(...t.steps.map((step, position) => {
    const { type, what } = describe(step);
    const li = el("li", { "data-position": String(position), title: "show this step" },
      el("span", { class: "at", text: `#${step.index}` }),
      el("span", { class: "type", text: type }),
      el("span", { class: "what", text: what }));
    li.addEventListener("click", () => show(position));
    return li;
  }));
  $("scrub").max = String(Math.max(0, t.steps.length - 1));
}

async function load() {
  let t;
  try {
    const response = await fetch(api(), { cache: "no-store" });
    if (!response.ok) throw new Error(await failure(response));
    t = await response.json();
  } catch (e) {
    $("overlay").textContent = `cannot load the trajectory: ${e.message}`;
    $("overlay").classList.add("error");
    return;
  }
  replay.trajectory = t;
  if (!t.steps.length) { $("overlay").textContent = "this trajectory has no steps yet"; return; }
  $("overlay").hidden = true;
  render(t);
  show(0);
  replay.ready = true;
}

$("first").addEventListener("click", () => show(0));
$("prev").addEventListener("click", () => show(replay.index - 1));
$("next").addEventListener("click", () => show(replay.index + 1));
$("last").addEventListener("click", () => show(replay.trajectory.steps.length - 1));
$("play").addEventListener("click", play);
$("scrub").addEventListener("input", (e) => show(Number(e.target.value)));
document.addEventListener("keydown", (e) => {
  if (!replay.ready) return;
  const keys = { ArrowLeft: () => show(replay.index - 1), ArrowRight: () => show(replay.index + 1),
    Home: () => show(0), End: () => show(replay.trajectory.steps.length - 1), " ": play };
  if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
});
load();
