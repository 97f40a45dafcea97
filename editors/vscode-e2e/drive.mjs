// Drives a running code-server through Debian's Chromium (playwright-core) as a user would: opens a
// Python file, types inside a function, waits for the extension's ghost text, accepts it with Tab,
// saves, and reads the status bar. Writes result.json and screenshots into the artifacts dir; exits 0
// only when every check passed (each failed check is listed in result.json and on stderr).
//
// Usage: node drive.mjs <playwright-core dir> <url> <file path> <artifacts dir>
// Env: DSPARK_E2E_READY_S (models-ready wait, default 240), DSPARK_E2E_GHOST_S (ghost-text wait, 90).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [playwrightDir, url, filePath, artifacts] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const { chromium } = require(playwrightDir);

const READY_MS = Number(process.env.DSPARK_E2E_READY_S ?? 240) * 1000;
const GHOST_MS = Number(process.env.DSPARK_E2E_GHOST_S ?? 90) * 1000;
// What the user types at the end of the function body (the line is empty, indented by 4).
const TYPED = "return fib";
const t0 = Date.now();
const events = [];
const failures = [];
const note = (what, extra = {}) => {
  const e = { t: +((Date.now() - t0) / 1000).toFixed(2), what, ...extra };
  events.push(e);
  console.error(`drive ${e.t}s: ${what}${Object.keys(extra).length ? " " + JSON.stringify(extra) : ""}`);
};
const check = (ok, what) => {
  note(`${ok ? "ok" : "FAIL"}: ${what}`);
  if (!ok) failures.push(what);
  return ok;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const result = { typed: TYPED, statusSeen: [], events, failures };
const writeResult = () => writeFileSync(join(artifacts, "result.json"), JSON.stringify(result, null, 2));

// The extension's own status bar entry (VS Code gives it the extension's id, "dspark.dspark-lsp"; the
// client library's work-done progress entry also says "DSpark" and must not be mistaken for it): its
// text, its codicons' names and its aria label (which holds the tooltip).
async function readStatus(page) {
  return page.evaluate(() => {
    for (const item of document.querySelectorAll("#workbench\\.parts\\.statusbar .statusbar-item")) {
      if (!item.id.startsWith("dspark.")) continue;
      const label = item.querySelector(".statusbar-item-label") ?? item;
      const text = (label.textContent ?? "").replace(/\s+/g, " ").trim();
      const icons = [...label.querySelectorAll(".codicon")].map((el) =>
        [...el.classList].find((c) => c.startsWith("codicon-") && c !== "codicon-modifier-spin") ?? "",
      );
      return { text, icons, aria: label.getAttribute("aria-label") ?? "" };
    }
    return null;
  });
}

// Polls the status bar and keeps every distinct text seen (the loading states are brief).
function watchStatus(page) {
  let last = "";
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const s = await readStatus(page).catch(() => null);
      if (s) {
        const key = `${s.icons.join(",")}|${s.text}`;
        if (key !== last) {
          last = key;
          result.statusSeen.push({ t: +((Date.now() - t0) / 1000).toFixed(2), ...s });
          note("status bar", s);
        }
      }
      await sleep(200);
    }
  })();
  return { current: () => result.statusSeen.at(-1), stop: async () => { stopped = true; await loop; } };
}

async function waitFor(what, ms, fn) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await sleep(250);
  }
}

const ghostText = (page) =>
  page.evaluate(() => {
    // Monaco draws inline-completion text as .ghost-text-decoration (on the cursor's line) and
    // .ghost-text (the lines below, in a view zone).
    // The cursor line's decoration comes in several spans (one per colour); the view zone has one
    // .view-line per further line.
    const clean = (t) => (t ?? "").replace(/\u00a0/g, " ");
    const first = [...document.querySelectorAll(".monaco-editor .ghost-text-decoration")].map((el) => clean(el.textContent)).join("");
    const rest = [...document.querySelectorAll(".monaco-editor .ghost-text .view-line")].map((el) => clean(el.textContent));
    return [first, ...rest].join("\n").trimEnd();
  });

let browser;
let page;
let code = 1;
try {
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    // Flags (docs/INTEGRATION_TESTS.md): headless, no sandbox (root in CI), nothing that reaches the network.
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") note("browser console error", { text: m.text().slice(0, 300) }); });
  note("open", { url });
  await page.goto(url, { waitUntil: "domcontentloaded", timeout: 60000 });
  await page.waitForSelector(".monaco-workbench", { timeout: 90000 });
  note("workbench shown");

  // Open the file with Quick Open (Ctrl+P), as a user would.
  await page.waitForSelector("#workbench\\.parts\\.statusbar", { timeout: 60000 });
  await sleep(1500); // the workbench takes keyboard input only once its parts are restored
  await page.keyboard.press("Control+P");
  await page.waitForSelector(".quick-input-widget input", { timeout: 30000 });
  await page.keyboard.type("sample.py", { delay: 30 });
  await waitFor("sample.py in Quick Open", 30000, () =>
    page.evaluate(() => /sample\.py/.test(document.querySelector(".quick-input-list")?.textContent ?? "")));
  await page.keyboard.press("Enter");
  await page.waitForSelector(".monaco-editor .view-lines", { timeout: 30000 });
  note("file open");

  const status = watchStatus(page);
  // Ready = the extension's zap icon (see editors/vscode/src/status.ts renderStatus).
  try {
    await waitFor("the models (status bar ready)", READY_MS, async () => {
      const s = status.current();
      if (s && s.icons.includes("codicon-error")) throw new Error(`status bar shows an error: ${s.aria || s.text}`);
      return s && s.icons.includes("codicon-zap");
    });
  } finally {
    await page.screenshot({ path: join(artifacts, "1-models-ready.png") });
  }
  note("models ready");
  result.modelsReadyS = +((Date.now() - t0) / 1000).toFixed(2); // from the browser's start
  result.loadingSeen = result.statusSeen.filter((s) => /loading/i.test(s.text));
  check(result.loadingSeen.length > 0, "the status bar said 'loading' before the models were ready");
  result.loadingProgressSeen = result.loadingSeen.filter((s) => /\d+\s*%/.test(s.text));
  check(result.loadingProgressSeen.length > 0, "the status bar showed the load's progress as a percentage");

  // Put the cursor at the end of line 4 (the empty, indented line inside fibonacci) and type.
  await page.click(".monaco-editor .view-lines");
  await page.keyboard.press("Control+G");
  await page.waitForSelector(".quick-input-widget input", { timeout: 10000 });
  await page.keyboard.type("4", { delay: 30 });
  await page.keyboard.press("Enter");
  await page.keyboard.press("End");
  await page.keyboard.type(TYPED, { delay: 60 });
  const typedAt = Date.now();
  note("typed", { text: TYPED });

  const ghost = await waitFor("ghost text", GHOST_MS, () => ghostText(page));
  result.ghostText = ghost;
  result.ghostAfterS = +((Date.now() - typedAt) / 1000).toFixed(2);
  note("ghost text", { text: ghost, afterS: result.ghostAfterS });
  await page.screenshot({ path: join(artifacts, "2-ghost-text.png") });

  await page.keyboard.press("Tab");
  await waitFor("the ghost text to go after Tab", 10000, async () => !(await ghostText(page)));
  await page.keyboard.press("Control+S");
  const before = readFileSync(filePath, "utf8");
  const saved = await waitFor("the saved file to change", 15000, () => {
    const now = readFileSync(filePath, "utf8");
    return now !== before || now.includes(TYPED) ? now : "";
  });
  result.documentText = saved;
  const line4 = saved.split("\n")[3] ?? "";
  result.acceptedLine = line4;
  const firstGhostLine = ghost.split("\n")[0].trim();
  check(line4.startsWith(`    ${TYPED}`), `line 4 starts with what was typed: ${JSON.stringify(line4)}`);
  check(line4.trim().length > TYPED.length, "Tab inserted text after what was typed");
  check(firstGhostLine.length > 0 && saved.includes(firstGhostLine), "the document holds the ghost text that was shown");

  // After a decoded completion the status bar shows its latency and the speed-up (status.ts: "1.7 s · 1.8×").
  let final;
  try {
    final = await waitFor("latency and speed-up in the status bar", 20000, async () => {
      const s = status.current();
      return s && /DSpark\s+\d+(\.\d+)?\s*(ms|s)\s*·\s*\d+(\.\d+)?×/.test(s.text) ? s : null;
    });
  } catch (e) {
    final = status.current();
    check(false, `status bar shows latency and speed-up (last seen: ${JSON.stringify(final)})`);
  }
  result.finalStatus = final;
  if (final && /×/.test(final.text)) check(true, `status bar: ${final.text}`);
  await page.screenshot({ path: join(artifacts, "3-accepted.png") });

  // The server heard what was shown and accepted: DSpark: Show Stats opens dspark/stats as Markdown;
  // its summary JSON ends with the feedback counters (read at the end of the document).
  await page.keyboard.press("F1");
  await page.waitForSelector(".quick-input-widget input", { timeout: 10000 });
  await page.keyboard.type("DSpark: Show Stats", { delay: 20 });
  await waitFor("the Show Stats command in the palette", 15000, () =>
    page.evaluate(() => /Show Stats/.test(document.querySelector(".quick-input-list")?.textContent ?? "")));
  await page.keyboard.press("Enter");
  await waitFor("the stats document", 20000, () =>
    page.evaluate(() => [...document.querySelectorAll(".monaco-editor .view-lines")].some((el) => /DSpark\s+stats/.test(el.textContent ?? "")))); // Monaco renders spaces as U+00A0
  await page.keyboard.press("Control+End");
  const feedback = await waitFor("the feedback counters in the stats", 10000, () =>
    page.evaluate(() => {
      for (const el of document.querySelectorAll(".monaco-editor .view-lines")) {
        const lines = [...el.querySelectorAll(".view-line")]
          .map((l) => ({ top: parseFloat(l.style.top || "0"), text: (l.textContent ?? "").replace(/\u00a0/g, " ") }))
          .sort((a, b) => a.top - b.top)
          .map((l) => l.text);
        const at = lines.findIndex((l) => /"feedback"/.test(l));
        if (at < 0) continue;
        const num = (key) => {
          const line = lines.slice(at).find((l) => new RegExp(`"${key}": `).test(l));
          const m = line && line.match(/: (-?[\d.]+|null)/);
          return m ? (m[1] === "null" ? null : Number(m[1])) : undefined;
        };
        return { shown: num("shown"), accepted: num("accepted"), acceptanceRate: num("acceptanceRate") };
      }
      return null;
    }));
  result.feedback = feedback;
  await page.screenshot({ path: join(artifacts, "4-stats.png") });
  check(feedback.shown >= 1, `dspark/stats counted the shown completion (shown ${feedback.shown})`);
  check(feedback.accepted === 1, `dspark/stats counted the accepted completion (accepted ${feedback.accepted})`);
  await status.stop();
  code = failures.length === 0 ? 0 : 1;
} catch (e) {
  failures.push(String(e && e.message ? e.message : e));
  note("error", { message: String(e && e.stack ? e.stack : e) });
  if (page) await page.screenshot({ path: join(artifacts, "error.png") }).catch(() => {});
} finally {
  result.passed = code === 0 && failures.length === 0;
  writeResult();
  if (browser) await browser.close().catch(() => {});
}
process.exit(result.passed ? 0 : 1);
