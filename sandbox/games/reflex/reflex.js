// Reflex: targets appear at seeded places and times driven by the page clock (setTimeout); click each one before
// it expires. Deterministic: the same seed, clicks and clock steps give the same game. state().targets gives each
// live target's centre in page (viewport) pixels, where a page_click hits it. window.game = {state(), seed(n),
// reset()} (lib/common.js).
(() => {
  "use strict";
  const { rng, param, seedOf, expose } = window.GameLib;
  const DURATION_MS = Math.max(1000, param("duration", 30000));
  const MAX_MISSES = Math.max(1, param("misses", 5));
  const FIRST_SPAWN_MS = 500;
  const HITS_PER_LEVEL = 5;
  const canvas = document.getElementById("arena");
  const ctx = canvas.getContext("2d");
  const W = canvas.width;
  const H = canvas.height;
  const $ = (id) => document.getElementById(id);

  let seed = seedOf(param("seed", 1));
  let random;
  let score;
  let hits;
  let misses;
  let stray;
  let over;
  let startedAt;
  let endedAt;
  let targets;
  let nextId;
  let frame = null;
  const pending = new Set(); // the game's timers, cleared on reset and at the end

  const level = () => 1 + Math.floor(hits / HITS_PER_LEVEL);
  const elapsed = () => (endedAt === null ? performance.now() : endedAt) - startedAt;

  function later(fn, ms) {
    const handle = setTimeout(() => {
      pending.delete(handle);
      fn();
    }, ms);
    pending.add(handle);
    return handle;
  }

  function reset(next = seed) {
    seed = next;
    pending.forEach(clearTimeout);
    pending.clear();
    random = rng(seed);
    score = hits = misses = stray = 0;
    over = false;
    targets = [];
    nextId = 1;
    startedAt = performance.now();
    endedAt = null;
    later(spawn, FIRST_SPAWN_MS);
    later(end, DURATION_MS);
    render();
    loop();
  }

  function spawn() {
    const lv = level();
    const r = Math.max(14, 30 - 2 * (lv - 1));
    const ttl = Math.max(700, 2200 - 150 * (lv - 1));
    const now = performance.now();
    const target = {
      id: nextId++,
      x: Math.round(r + random() * (W - 2 * r)),
      y: Math.round(r + random() * (H - 2 * r)),
      r,
      born: now,
      expires: now + ttl,
    };
    target.timer = later(() => expire(target), ttl);
    targets.push(target);
    const gap = Math.max(350, 1100 - 80 * (lv - 1));
    later(spawn, Math.round(gap * (0.8 + 0.4 * random())));
    render();
  }

  function expire(target) {
    targets = targets.filter((t) => t !== target);
    misses++;
    if (misses >= MAX_MISSES) end();
    render();
  }

  function end() {
    if (over) return;
    over = true;
    endedAt = performance.now();
    pending.forEach(clearTimeout);
    pending.clear();
    targets = [];
    render();
  }

  canvas.addEventListener("mousedown", (event) => {
    if (over || event.button !== 0) return;
    const box = canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    for (let i = targets.length - 1; i >= 0; i--) {
      const t = targets[i];
      if ((x - t.x) ** 2 + (y - t.y) ** 2 <= t.r ** 2) {
        clearTimeout(t.timer);
        pending.delete(t.timer);
        targets.splice(i, 1);
        score += 10 * level();
        hits++;
        render();
        return;
      }
    }
    stray++;
    render();
  });

  function state() {
    const box = canvas.getBoundingClientRect();
    const now = performance.now();
    return {
      game: "reflex",
      seed,
      score,
      level: level(),
      over,
      hits,
      misses,
      stray,
      time_ms: elapsed(),
      duration_ms: DURATION_MS,
      max_misses: MAX_MISSES,
      targets: targets.map((t) => ({
        id: t.id,
        x: Math.round(box.left + t.x),
        y: Math.round(box.top + t.y),
        r: t.r,
        expires_in_ms: t.expires - now,
      })),
    };
  }

  function render() {
    const now = performance.now();
    ctx.fillStyle = "#1f2430";
    ctx.fillRect(0, 0, W, H);
    for (const t of targets) {
      const left = Math.max(0, (t.expires - now) / (t.expires - t.born));
      ctx.fillStyle = "#e4572e";
      ctx.beginPath();
      ctx.arc(t.x, t.y, t.r, 0, 2 * Math.PI);
      ctx.fill();
      ctx.strokeStyle = "#ffd166";
      ctx.lineWidth = 4;
      ctx.beginPath();
      ctx.arc(t.x, t.y, t.r + 5, -Math.PI / 2, -Math.PI / 2 + 2 * Math.PI * left);
      ctx.stroke();
    }
    $("score").textContent = String(score);
    $("level").textContent = String(level());
    $("misses").textContent = `${misses}/${MAX_MISSES}`;
    $("time").textContent = (elapsed() / 1000).toFixed(1);
    const banner = $("banner");
    banner.textContent = over ? (misses >= MAX_MISSES ? "Game over" : "Time's up") : "";
    banner.style.display = over ? "block" : "none";
  }

  function loop() {
    if (frame !== null || over) return;
    frame = requestAnimationFrame(() => {
      frame = null;
      render();
      loop();
    });
  }

  expose(state, reset);
})();
