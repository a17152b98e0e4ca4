// Tiles: a sliding-tile game like 2048 on a 4x4 board, seeded (?seed=N) and deterministic: the same seed and the
// same keys give the same board. The logic runs at once on each key; the page clock only drives the short
// highlight of new and merged tiles. window.game = {state(), seed(n), reset()} (lib/common.js).
(() => {
  "use strict";
  const { rng, param, seedOf, expose } = window.GameLib;
  const SIZE = 4;
  const CELL = 105;
  const GAP = 12;
  const POP_MS = 150;
  const GOAL = 2048;
  const KEYS = {
    ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right",
    w: "up", s: "down", a: "left", d: "right", W: "up", S: "down", A: "left", D: "right",
  };
  const COLORS = {
    0: "#cdc1b4", 2: "#eee4da", 4: "#ede0c8", 8: "#f2b179", 16: "#f59563", 32: "#f67c5f", 64: "#f65e3b",
    128: "#edcf72", 256: "#edcc61", 512: "#edc850", 1024: "#edc53f", 2048: "#edc22e",
  };
  const canvas = document.getElementById("board");
  const ctx = canvas.getContext("2d");
  const $ = (id) => document.getElementById(id);

  let seed = seedOf(param("seed", 1));
  let random;
  let board;
  let score;
  let moves;
  let over;
  let won;
  let startedAt;
  let pops; // cell index -> time it appeared or merged
  let frame = null;

  function reset(next = seed) {
    seed = next;
    random = rng(seed);
    board = new Array(SIZE * SIZE).fill(0);
    score = 0;
    moves = 0;
    over = false;
    won = false;
    startedAt = performance.now();
    pops = new Map();
    spawn();
    spawn();
    render();
  }

  function spawn() {
    const empty = [];
    board.forEach((v, i) => v === 0 && empty.push(i));
    if (empty.length === 0) return;
    const cell = empty[Math.floor(random() * empty.length)];
    board[cell] = random() < 0.9 ? 2 : 4;
    pops.set(cell, performance.now());
  }

  // The cells of line k, first the side the tiles move toward.
  function line(dir, k) {
    const cells = [];
    for (let j = 0; j < SIZE; j++) {
      if (dir === "left" || dir === "right") cells.push(k * SIZE + j);
      else cells.push(j * SIZE + k);
    }
    return dir === "right" || dir === "down" ? cells.reverse() : cells;
  }

  function slide(values) {
    const tiles = values.filter((v) => v !== 0);
    const out = [];
    const merged = [];
    let gained = 0;
    for (let i = 0; i < tiles.length; i++) {
      if (i + 1 < tiles.length && tiles[i] === tiles[i + 1]) {
        out.push(tiles[i] * 2);
        gained += tiles[i] * 2;
        merged.push(out.length - 1);
        i++;
      } else {
        out.push(tiles[i]);
      }
    }
    while (out.length < SIZE) out.push(0);
    return { out, merged, gained };
  }

  function canMove() {
    for (let i = 0; i < board.length; i++) {
      if (board[i] === 0) return true;
      const right = i % SIZE < SIZE - 1 && board[i] === board[i + 1];
      const down = i + SIZE < board.length && board[i] === board[i + SIZE];
      if (right || down) return true;
    }
    return false;
  }

  function move(dir) {
    if (over) return false;
    let changed = false;
    let gained = 0;
    const now = performance.now();
    const before = pops;
    pops = new Map(); // highlights follow the tiles: only this move's merges and new tile
    for (let k = 0; k < SIZE; k++) {
      const cells = line(dir, k);
      const result = slide(cells.map((c) => board[c]));
      cells.forEach((c, j) => {
        if (board[c] !== result.out[j]) changed = true;
        board[c] = result.out[j];
      });
      result.merged.forEach((j) => pops.set(cells[j], now));
      gained += result.gained;
    }
    if (!changed) {
      pops = before;
      return false;
    }
    score += gained;
    moves++;
    spawn();
    won = won || Math.max(...board) >= GOAL;
    over = !canMove();
    render();
    return true;
  }

  function state() {
    const max = Math.max(...board);
    const rows = [];
    for (let r = 0; r < SIZE; r++) rows.push(board.slice(r * SIZE, (r + 1) * SIZE));
    return {
      game: "tiles",
      seed,
      score,
      level: Math.log2(max),
      over,
      won,
      max_tile: max,
      moves,
      board: rows,
      time_ms: performance.now() - startedAt,
    };
  }

  function render() {
    const now = performance.now();
    ctx.fillStyle = "#bbada0";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let i = 0; i < board.length; i++) {
      const v = board[i];
      const x = GAP + (i % SIZE) * (CELL + GAP);
      const y = GAP + Math.floor(i / SIZE) * (CELL + GAP);
      ctx.fillStyle = COLORS[v] || "#3c3a32";
      ctx.fillRect(x, y, CELL, CELL);
      if (v) {
        ctx.fillStyle = v <= 4 ? "#776e65" : "#f9f6f2";
        ctx.font = `bold ${v < 100 ? 48 : v < 1000 ? 40 : 32}px "DejaVu Sans", sans-serif`;
        ctx.fillText(String(v), x + CELL / 2, y + CELL / 2 + 2);
      }
      const since = pops.get(i);
      if (since !== undefined) {
        const age = now - since;
        if (age >= POP_MS) {
          pops.delete(i);
        } else {
          ctx.strokeStyle = `rgba(255, 255, 255, ${(1 - age / POP_MS).toFixed(3)})`;
          ctx.lineWidth = 6;
          ctx.strokeRect(x + 3, y + 3, CELL - 6, CELL - 6);
        }
      }
    }
    $("score").textContent = String(score);
    $("best").textContent = String(Math.max(...board));
    $("moves").textContent = String(moves);
    const banner = $("banner");
    banner.textContent = over ? "Game over" : won ? `${GOAL}!` : "";
    banner.style.display = banner.textContent ? "block" : "none";
    if (pops.size > 0 && frame === null) {
      frame = requestAnimationFrame(() => {
        frame = null;
        render();
      });
    }
  }

  addEventListener("keydown", (event) => {
    const dir = KEYS[event.key];
    if (!dir || event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    move(dir);
  });

  expose(state, reset);
})();
