import { strict as assert } from "node:assert";
import { test } from "node:test";
import { DEFAULT_BOUNDS, TypingSpeed } from "../src/debounce";

function typed(gaps: number[], start = 1000): { speed: TypingSpeed; last: number } {
  const speed = new TypingSpeed();
  let t = start;
  speed.record(t);
  for (const g of gaps) {
    t += g;
    speed.record(t);
  }
  return { speed, last: t };
}

test("no figure before two keys: no extra wait", () => {
  const speed = new TypingSpeed();
  assert.equal(speed.delayMs(0, 150), 0);
  speed.record(100);
  assert.equal(speed.typicalGapMs(), undefined);
  assert.equal(speed.delayMs(100, 150), 0);
});

test("a fast typist waits less than a slow one, within the bounds", () => {
  const fast = typed([80, 90, 70, 85, 80]);
  const slow = typed([300, 280, 320, 310, 290]);
  assert.equal(fast.speed.typicalGapMs(), 80);
  assert.equal(slow.speed.typicalGapMs(), 300);
  // Server debounce 0: the whole wait is the client's (1.5 × the typical gap).
  assert.equal(fast.speed.delayMs(fast.last, 0), 120);
  assert.equal(slow.speed.delayMs(slow.last, 0), 400); // 450 capped at maxMs
  assert.ok(fast.speed.delayMs(fast.last, 0) < slow.speed.delayMs(slow.last, 0));
  for (const { speed, last } of [fast, slow]) {
    const d = speed.delayMs(last, 0);
    assert.ok(d >= DEFAULT_BOUNDS.minMs && d <= DEFAULT_BOUNDS.maxMs, String(d));
  }
});

test("the server's own debounce and the time since the key count towards the wait", () => {
  const { speed, last } = typed([200, 200, 200]);
  assert.equal(speed.targetMs(), 300);
  assert.equal(speed.delayMs(last, 150), 150);
  assert.equal(speed.delayMs(last + 100, 150), 50);
  assert.equal(speed.delayMs(last + 1000, 150), 0);
  // A server that already waits longer than the target: nothing more from the client.
  assert.equal(speed.delayMs(last, 500), 0);
});

test("pauses and one odd gap do not move the typical gap", () => {
  const { speed } = typed([100, 5000, 100, 100, 2, 100]);
  // 5000 is a pause (>= pauseMs, dropped); 2 ms (a paste, an auto-closed bracket) is one of five.
  assert.equal(speed.typicalGapMs(), 100);
});

test("only the recent gaps count", () => {
  const { speed } = typed([400, 400, 400, 400, 400, 400, 400, 400, 400, 60, 60, 60, 60, 60, 60]);
  assert.equal(speed.typicalGapMs(), 60);
});
