import { strict as assert } from "node:assert";
import { test } from "node:test";
import { parseStatus, renderStatus } from "../src/status";

test("loading spins and says so; progress as a percentage when the server sends one", () => {
  const v = renderStatus(parseStatus({ state: "loading", message: "loading Qwen" }), true);
  assert.equal(v.text, "$(sync~spin) DSpark loading…");
  assert.match(v.tooltip, /loading Qwen/);
  assert.equal(v.isError, false);
  const p = renderStatus(parseStatus({ state: "loading", message: "loading draft d", progress: 0.6 }), true);
  assert.equal(p.text, "$(sync~spin) DSpark loading… 60%");
  assert.match(p.tooltip, /loading draft d/);
  assert.match(p.tooltip, /models loaded: 60%/);
  assert.equal(renderStatus(parseStatus({ state: "loading", progress: 0 }), true).text, "$(sync~spin) DSpark loading… 0%");
  assert.equal(renderStatus(parseStatus({ state: "starting" }), true).text, "$(sync~spin) DSpark starting…");
  // A percentage sent by mistake (60, not 0.6) or a non-number is dropped, not shown as 6000%.
  assert.equal(parseStatus({ state: "loading", progress: 60 }).progress, undefined);
  assert.equal(parseStatus({ state: "loading", progress: "half" }).progress, undefined);
  // Once ready, a stale progress figure is not shown.
  assert.doesNotMatch(renderStatus(parseStatus({ state: "ready", progress: 0.6 }), true).tooltip, /models loaded/);
});

test("ready shows last latency and speedup", () => {
  const v = renderStatus(parseStatus({ state: "ready", message: "", lastLatencyMs: 84.6, speedup: 2.345, acceptedPerForward: 3.2 }), true);
  assert.equal(v.text, "$(zap) DSpark 85 ms · 2.3×");
  assert.match(v.tooltip, /last completion 85 ms/);
  // The speed-up counts target forwards (tokens per target forward), and the tooltip says so.
  assert.match(v.tooltip, /2\.35× fewer target forwards than the target alone \(tokens per target forward\)/);
  assert.doesNotMatch(v.tooltip, /faster/);
  // Without a speed-up (an older server), the tooltip still shows the tokens per forward it got.
  const old = renderStatus(parseStatus({ state: "ready", message: "", acceptedPerForward: 3.2 }), true);
  assert.match(old.tooltip, /3\.20 tokens per target forward/);
});

test("ready without figures, and seconds for slow completions", () => {
  assert.equal(renderStatus(parseStatus({ state: "ready" }), true).text, "$(zap) DSpark");
  assert.equal(renderStatus(parseStatus({ state: "ready", lastLatencyMs: 2345 }), true).text, "$(zap) DSpark 2.3 s");
});

test("error is flagged; the client toggle wins over the server state", () => {
  assert.equal(renderStatus(parseStatus({ state: "error", message: "no model" }), true).isError, true);
  const off = renderStatus(parseStatus({ state: "ready", lastLatencyMs: 10 }), false);
  assert.equal(off.text, "$(circle-slash) DSpark");
  assert.match(off.tooltip, /DSpark: disabled/);
});

test("malformed payloads become an error state, not an exception", () => {
  assert.equal(parseStatus(null).state, "error");
  assert.equal(parseStatus("ready").state, "error");
  const bad = parseStatus({ state: "exploded" });
  assert.equal(bad.state, "error");
  assert.match(bad.message, /unknown server state: "exploded"/);
  // Non-numeric figures are dropped rather than printed as NaN.
  assert.equal(parseStatus({ state: "ready", lastLatencyMs: "fast" }).lastLatencyMs, undefined);
});
