import { strict as assert } from "node:assert";
import { test } from "node:test";
import { formatStats } from "../src/stats";

test("a list of records becomes a table", () => {
  const md = formatStats({ requests: [{ latencyMs: 12.5, k: 3 }, { latencyMs: 20, tau: 0.9 }], served: 2 });
  assert.match(md, /## requests/);
  assert.match(md, /\| latencyMs \| k \| tau \|/);
  assert.match(md, /\| 12\.500 \| 3 \| {2}\|/);
  assert.match(md, /"served": 2/);
});

test("empty and odd replies are still readable", () => {
  assert.match(formatStats(null), /no stats yet/);
  assert.match(formatStats([1, 2]), /```json/);
  assert.match(formatStats([{ a: "x|y" }]), /x\\\|y/);
});
