// Shared by the games: a seeded random generator, the URL's parameters, and the page-level API (window.game).
// A game reads time only through performance.now(), setTimeout and requestAnimationFrame, so the platform's
// page clock (window.__clock, installed by the sandbox agent) drives it; without that clock it runs in real time.
(() => {
  "use strict";

  // mulberry32: small, fast, and the same sequence in every browser for the same 32-bit seed.
  function rng(seed) {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function param(name, fallback) {
    const raw = new URLSearchParams(location.search).get(name);
    if (raw === null || raw.trim() === "") return fallback;
    const value = Number(raw);
    return Number.isFinite(value) ? Math.trunc(value) : fallback;
  }

  function seedOf(value) {
    const n = Math.trunc(Number(value));
    if (!Number.isFinite(n)) throw new TypeError(`a seed must be a number, got ${value}`);
    return n >>> 0;
  }

  // The page-level API every game exposes: window.game = {state(), seed(n), reset()}, over the game's own state()
  // and reset(seed) (which starts the game over, with that seed when given); then the game's first start.
  function expose(state, reset) {
    window.game = Object.freeze({
      state,
      seed(n) {
        reset(seedOf(n));
        return state();
      },
      reset() {
        reset();
        return state();
      },
    });
    reset();
  }

  window.GameLib = Object.freeze({ rng, param, seedOf, expose });
})();
