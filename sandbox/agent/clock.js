// The page clock the platform controls (sandbox/agent/pages.py installs it with
// Page.addScriptToEvaluateOnNewDocument, so it runs in every document of the page before the page's own scripts).
//
// Date, performance.now, setTimeout/setInterval/clearTimeout/clearInterval, requestAnimationFrame/
// cancelAnimationFrame and requestIdleCallback/cancelIdleCallback are replaced by versions driven by a virtual time
// `now` (ms since the document started). Nothing the page schedules runs on its own: callbacks run only when the
// virtual time passes their due time, in due-time order (ties: the order they were scheduled in; a timer before
// an animation frame due at the same time). Animation frames fall on a fixed grid of `frame_ms`.
//
//   paused   `now` stands still; step(ms) runs every callback due up to now + ms, in order, and returns after
//            they ran: the same calls and steps always give the same page.
//   running  `now` follows the real clock times `factor`; a pump on the native setTimeout runs what is due.
//
// window.__clock: pause(), resume(), speed(factor), step(ms), state(). Each returns state():
// {mode, factor, now_ms, timers, frames, frame_ms, ran, truncated}.
// Not virtualized: CSS animations and transitions, Web Animations, media, workers, event.timeStamp.
(() => {
  "use strict";
  if (Object.prototype.hasOwnProperty.call(window, "__clock")) return;
  const CONFIG = /*CONFIG*/ { mode: "running", factor: 1, frame_ms: 1000 / 60 } /*END*/;
  const MAX_CALLBACKS = 100000; // per call: a page that reschedules forever cannot hang a step
  const native = {
    setTimeout: window.setTimeout.bind(window),
    perfNow: performance.now.bind(performance),
    dateNow: Date.now.bind(Date),
    Date: Date,
  };
  const frameMs = CONFIG.frame_ms;
  const dateEpoch = native.dateNow(); // Date.now() at virtual time 0

  let mode = CONFIG.mode === "paused" ? "paused" : "running";
  let factor = CONFIG.factor > 0 ? CONFIG.factor : 1;
  let now = 0; // virtual ms since the document started
  let anchorReal = native.perfNow(); // running: now = anchorVirtual + (real - anchorReal) * factor
  let anchorVirtual = 0;
  let inCallback = 0;
  let nesting = 0;
  let seq = 0;
  let nextId = 1;
  let lastRan = 0;
  let lastTruncated = false;
  let pumpHandle = null;
  const timers = new Map(); // id -> {at, seq, fn, args, every, nest, idle}
  const frames = new Map(); // id -> callback, all due at frameAt
  let frameAt = 0;

  const live = () => anchorVirtual + (native.perfNow() - anchorReal) * factor;
  const current = () => (mode === "running" && !inCallback ? Math.max(now, live()) : now);
  const nextFrameAfter = (t) => (Math.floor(t / frameMs + 1e-9) + 1) * frameMs;

  function rethrow(error) {
    native.setTimeout(() => {
      throw error;
    }, 0);
  }

  function schedule(fn, delay, args, every) {
    const id = nextId++;
    const nest = inCallback ? nesting + 1 : 0;
    let ms = Math.max(0, Number(delay) || 0);
    if (nest > 5 && ms < 4) ms = 4; // the HTML spec's clamp of deeply nested timers: no busy loop at one instant
    const callback = typeof fn === "function" ? fn : () => (0, eval)(String(fn));
    timers.set(id, { at: current() + ms, seq: seq++, fn: callback, args, every: every ? ms : null, nest });
    return id;
  }

  function earliestTimer(limit) {
    let best = null;
    for (const [id, t] of timers) {
      if (t.at <= limit && (best === null || t.at < best[1].at || (t.at === best[1].at && t.seq < best[1].seq))) {
        best = [id, t];
      }
    }
    return best;
  }

  function runTimer(id, t) {
    if (t.every === null) timers.delete(id);
    else Object.assign(t, { at: t.at + (t.nest >= 5 && t.every < 4 ? 4 : t.every), seq: seq++, nest: t.nest + 1 });
    const saved = nesting;
    nesting = t.nest;
    inCallback++;
    try {
      t.fn.apply(window, t.args);
    } catch (error) {
      rethrow(error);
    } finally {
      inCallback--;
      nesting = saved;
    }
  }

  function runFrame() {
    now = Math.max(now, frameAt);
    const due = [...frames.values()];
    frames.clear();
    inCallback++;
    try {
      for (const callback of due) {
        try {
          callback(now);
        } catch (error) {
          rethrow(error);
        }
      }
    } finally {
      inCallback--;
    }
  }

  // Run, in order, every callback due at or before `target`; then now = target.
  function runUntil(target) {
    let ran = 0;
    lastTruncated = false;
    while (ran < MAX_CALLBACKS) {
      const timer = earliestTimer(target);
      const frameDue = frames.size > 0 && frameAt <= target;
      if (timer === null && !frameDue) break;
      if (timer !== null && (!frameDue || timer[1].at <= frameAt)) {
        const [id, t] = timer;
        now = Math.max(now, t.at);
        runTimer(id, t);
      } else {
        runFrame();
      }
      ran++;
    }
    if (ran >= MAX_CALLBACKS) lastTruncated = true;
    else now = Math.max(now, target);
    lastRan = ran;
  }

  function anchor() {
    anchorVirtual = now;
    anchorReal = native.perfNow();
  }

  function pump() {
    pumpHandle = null;
    if (mode !== "running") return;
    runUntil(live());
    if (lastTruncated) anchor();
    pumpHandle = native.setTimeout(pump, Math.min(16, Math.max(4, frameMs / factor)));
  }

  function startPump() {
    if (pumpHandle === null) pumpHandle = native.setTimeout(pump, 0);
  }

  function state() {
    return {
      mode,
      factor,
      now_ms: current(),
      timers: timers.size,
      frames: frames.size,
      frame_ms: frameMs,
      ran: lastRan,
      truncated: lastTruncated,
    };
  }

  function settle() {
    // Bring `now` up to the live time, running what became due, before changing mode or speed.
    if (mode === "running") runUntil(live());
    else lastRan = 0;
  }

  const clock = {
    pause() {
      settle();
      mode = "paused";
      return state();
    },
    resume() {
      settle();
      mode = "running";
      anchor();
      startPump();
      return state();
    },
    speed(k) {
      const value = Number(k);
      if (!(value > 0 && value <= 1000)) throw new RangeError(`clock speed must be in (0, 1000], got ${k}`);
      settle();
      factor = value;
      anchor();
      return state();
    },
    step(ms) {
      const value = Number(ms);
      if (!(value >= 0 && value <= 86400000)) throw new RangeError(`clock step must be in [0, 86400000] ms, got ${ms}`);
      settle();
      runUntil(now + value);
      anchor();
      return state();
    },
    state,
  };

  // ---------------------------------------------------------------- the page's view of time
  const define = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });

  define(window, "setTimeout", function setTimeout(fn, delay, ...args) {
    return schedule(fn, delay, args, false);
  });
  define(window, "setInterval", function setInterval(fn, delay, ...args) {
    return schedule(fn, delay, args, true);
  });
  const clear = function clearTimeout(id) {
    timers.delete(Number(id));
  };
  define(window, "clearTimeout", clear);
  define(window, "clearInterval", clear);
  define(window, "requestAnimationFrame", function requestAnimationFrame(callback) {
    if (typeof callback !== "function") throw new TypeError("requestAnimationFrame needs a function");
    if (frames.size === 0) frameAt = nextFrameAfter(current());
    const id = nextId++;
    frames.set(id, callback);
    return id;
  });
  define(window, "cancelAnimationFrame", function cancelAnimationFrame(id) {
    frames.delete(Number(id));
  });
  define(window, "requestIdleCallback", function requestIdleCallback(callback, options) {
    const deadline = { didTimeout: false, timeRemaining: () => 50 };
    return schedule(() => callback(deadline), 0, [], false);
  });
  define(window, "cancelIdleCallback", clear);
  define(performance, "now", function now() {
    return current();
  });

  const NativeDate = native.Date;
  const dateNow = () => Math.floor(dateEpoch + current());
  function VirtualDate(...args) {
    if (!new.target) return new NativeDate(dateNow()).toString();
    return Reflect.construct(NativeDate, args.length ? args : [dateNow()], new.target);
  }
  Object.defineProperty(VirtualDate, "name", { value: "Date" });
  VirtualDate.prototype = NativeDate.prototype;
  VirtualDate.now = dateNow;
  VirtualDate.parse = NativeDate.parse;
  VirtualDate.UTC = NativeDate.UTC;
  define(window, "Date", VirtualDate);

  Object.defineProperty(window, "__clock", { value: Object.freeze(clock), enumerable: false });
  if (mode === "running") startPump();
})();
