// Loads the compiled extension as VS Code would (entry point from package.json) against the stub
// `vscode` module, activates it with the mock server, and drives it through vscode-languageclient.
import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { installVscodeStub, Position, recorded, textDocument, Uri } from "./vscodeStub";

installVscodeStub();

const root = path.resolve(__dirname, "..", "..");
const mock = path.resolve(root, "..", "test", "mock_lsp.py");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-vscode-"));
const log = path.join(tmp, "mock.jsonl");
const server = path.join(tmp, "dspark-lsp");

interface Controller {
  typing: { record(t: number): void };
}
interface Ext {
  activate(ctx: { subscriptions: { dispose(): unknown }[] }): Promise<Controller>;
  deactivate(): Promise<void>;
}
// The entry point named by package.json, loaded after the stub is in place.
const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { main: string };
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ext = require(path.join(root, pkg.main)) as Ext;

async function until(cond: () => boolean, what: string, ms = 10000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

function received(): { method?: string; params?: Record<string, unknown> }[] {
  if (!fs.existsSync(log)) return [];
  // Whole lines only: the mock server may be appending one while we read (a cut line is not JSON yet).
  const text = fs.readFileSync(log, "utf8");
  const whole = text.slice(0, text.lastIndexOf("\n") + 1);
  return whole.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as { method?: string });
}

const ctx = { subscriptions: [] as { dispose(): unknown }[] };
let controller: Controller;
const status = (): string => (recorded.statusItems[0] as { text: string }).text;

before(async () => {
  fs.writeFileSync(server, `#!/bin/sh\nDSPARK_MOCK_LOG='${log}' exec python3 '${mock}' "$@"\n`, { mode: 0o755 });
  recorded.config.set("dspark.serverPath", server);
  recorded.config.set("dspark.maxNewTokens", 8);
  recorded.config.set("dspark.backend.url", "http://gpu-box:8000");
  recorded.config.set("dspark.backend.model", "qwen2.5-coder-0.5b");
  recorded.config.set("dspark.backend.apiKeyEnv", "DSPARK_API_KEY");
  controller = await ext.activate(ctx);
});

after(async () => {
  await ext.deactivate();
  ctx.subscriptions.forEach((d) => void d.dispose());
});

test("activation registers the three commands and the status bar item", () => {
  for (const id of ["dspark.restartServer", "dspark.toggle", "dspark.showStats"]) {
    assert.ok(recorded.commands.has(id), id);
  }
  assert.equal(recorded.statusItems.length, 1);
});

test("the server gets the mapped settings and the status bar follows dspark/status", async () => {
  await until(() => status().startsWith("$(zap)"), "ready status");
  const init = received().find((m) => m.method === "initialize");
  const opts = init?.params?.initializationOptions as Record<string, unknown>;
  assert.equal(opts.maxNewTokens, 8);
  assert.equal(opts.model, "default");
  assert.ok(!("serverPath" in opts));
  // The dspark.backend.* settings arrive as the server's one `backend` object (issue 18).
  assert.deepEqual(opts.backend, {
    url: "http://gpu-box:8000", model: "qwen2.5-coder-0.5b", apiKeyEnv: "DSPARK_API_KEY", timeoutMs: 10000,
    stream: true, stopTokenIds: true, extraBody: {}, tokenizer: null,
  });
});

test("inline completion goes through vscode-languageclient to the server and back", async () => {
  assert.equal(recorded.inlineProviders.length, 1);
  const { provider } = recorded.inlineProviders[0] as { provider: { provideInlineCompletionItems: (...a: unknown[]) => Promise<unknown> } };
  const document = textDocument("/tmp/x.py", "python", "def f():\n    ") as unknown;
  recorded.documentOpened.fire(document);
  await until(() => received().some((m) => m.method === "textDocument/didOpen"), "didOpen");
  const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };
  const result = (await provider.provideInlineCompletionItems(document, new Position(1, 4), { triggerKind: 1 }, token)) as
    { items: { insertText: string }[] } | { insertText: string }[];
  const items = Array.isArray(result) ? result : result.items;
  assert.deepEqual(items.map((i) => i.insertText), ["return 42  # from dspark", "return None  # second choice"]);
  await until(() => status() === "$(zap) DSpark 13 ms · 2.3×", "latency in the status bar");
  const ask = received().find((m) => m.method === "textDocument/inlineCompletion");
  assert.deepEqual(ask?.params?.position, { line: 1, character: 4 });

  // What VS Code was given to show is reported, and accepting an item (VS Code runs its command)
  // reports the accept: the server counts both in dspark/stats.
  await until(() => received().some((m) => m.method === "textDocument/didShowCompletion"), "didShowCompletion");
  const shown = received().find((m) => m.method === "textDocument/didShowCompletion");
  assert.deepEqual(shown?.params, { uri: "file:///tmp/x.py", item: { insertText: "return 42  # from dspark" } });
  const command = (items[0] as unknown as { command: { command: string; arguments: unknown[] } }).command;
  assert.equal(command.command, "dspark.accepted");
  await recorded.commands.get(command.command)?.(...command.arguments);
  await until(() => received().some((m) => m.method === "dspark/didAcceptCompletion"), "didAcceptCompletion");
  const took = received().find((m) => m.method === "dspark/didAcceptCompletion");
  assert.deepEqual(took?.params, { uri: "file:///tmp/x.py", item: { insertText: "return 42  # from dspark" } });
});

test("Show Stats opens a Markdown document with the server's figures", async () => {
  await recorded.commands.get("dspark.showStats")?.();
  const doc = recorded.openedDocuments.at(-1);
  assert.equal(doc?.language, "markdown");
  assert.match(doc?.content ?? "", /## requests/);
  assert.match(doc?.content ?? "", /"served": 1/);
});

test("adaptive debounce: mid-burst, an automatic request waits and a cancel during the wait sends nothing", async () => {
  const { provider } = recorded.inlineProviders[0] as { provider: { provideInlineCompletionItems: (...a: unknown[]) => Promise<unknown> } };
  const document = textDocument("/tmp/x.py", "python", "def f():\n    ") as unknown;
  // Keys every 400 ms: the target wait is the 400 ms cap; the server's debounceMs (150) leaves ~250.
  const now = Date.now();
  for (const t of [now - 1200, now - 800, now - 400, now]) {
    controller.typing.record(t);
  }
  const asked = (): number => received().filter((m) => m.method === "textDocument/inlineCompletion").length;
  const before = asked();
  let cancel: () => void = () => undefined;
  const token = {
    isCancellationRequested: false,
    onCancellationRequested: (fn: () => void) => {
      cancel = () => {
        token.isCancellationRequested = true;
        fn();
      };
      return { dispose: () => undefined };
    },
  };
  const started = Date.now();
  const pending = provider.provideInlineCompletionItems(document, new Position(1, 4), { triggerKind: 1 }, token);
  setTimeout(() => cancel(), 50);
  assert.equal(await pending, undefined);
  assert.ok(Date.now() - started < 200, "the cancel ended the wait");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(asked(), before, "nothing was sent for a request cancelled during the wait");
  // Not cancelled: it waits, then asks.
  const t0 = Date.now();
  controller.typing.record(t0);
  const quiet = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };
  const result = await provider.provideInlineCompletionItems(document, new Position(1, 4), { triggerKind: 1 }, quiet);
  assert.ok(Date.now() - t0 >= 200, `waited ${Date.now() - t0} ms`);
  assert.ok(result !== undefined);
  assert.equal(asked(), before + 1);
  // A manual trigger (Invoke) never waits.
  controller.typing.record(Date.now());
  const t1 = Date.now();
  await provider.provideInlineCompletionItems(document, new Position(1, 4), { triggerKind: 0 }, quiet);
  assert.ok(Date.now() - t1 < 200, `a manual trigger waited ${Date.now() - t1} ms`);
});

test("Toggle writes dspark.enable, forwards it, and stops asking", async () => {
  await recorded.commands.get("dspark.toggle")?.();
  assert.equal(recorded.config.get("dspark.enable"), false);
  await until(() => received().some((m) => m.method === "workspace/didChangeConfiguration"), "didChangeConfiguration");
  const change = received().filter((m) => m.method === "workspace/didChangeConfiguration").at(-1);
  assert.equal(((change?.params?.settings as Record<string, Record<string, unknown>>).dspark).enable, false);
  assert.equal(status(), "$(circle-slash) DSpark");
  const { provider } = recorded.inlineProviders[0] as { provider: { provideInlineCompletionItems: (...a: unknown[]) => unknown } };
  const document = { uri: Uri.file("/tmp/x.py"), languageId: "python", version: 1 };
  const asked = received().filter((m) => m.method === "textDocument/inlineCompletion").length;
  assert.equal(await provider.provideInlineCompletionItems(document, new Position(0, 0), { triggerKind: 1 }, {}), undefined);
  assert.equal(received().filter((m) => m.method === "textDocument/inlineCompletion").length, asked);
});

/** Sets `dspark.<key>` as the settings UI would: the value, then the change event VS Code fires. */
function change(key: string, value: unknown): void {
  const full = `dspark.${key}`;
  recorded.config.set(full, value);
  recorded.configChanged.fire({ affectsConfiguration: (s: string) => full === s || full.startsWith(`${s}.`) });
}

test("a dspark.backend.* change is forwarded; a bad one is a warning and the local engine", async () => {
  const changes = (): Record<string, unknown>[] =>
    received().filter((m) => m.method === "workspace/didChangeConfiguration").map((m) => (m.params?.settings as { dspark: Record<string, unknown> }).dspark);
  let seen = changes().length;
  change("backend.timeoutMs", 2500);
  await until(() => changes().length > seen, "the forwarded backend change");
  assert.equal((changes().at(-1)?.backend as Record<string, unknown>).timeoutMs, 2500);

  recorded.messages.length = 0;
  seen = changes().length;
  change("backend.url", "gpu-box:8000");
  await until(() => changes().length > seen, "the forwarded change after a bad URL");
  assert.equal(changes().at(-1)?.backend, null);
  assert.deepEqual(recorded.messages, [{
    level: "warning",
    text: 'DSpark: dspark.backend.url must be an http:// or https:// URL with a host, got "gpu-box:8000"; using the local engine',
  }]);

  seen = changes().length;
  change("backend.url", "");
  await until(() => changes().length > seen, "the forwarded change back to the local engine");
  assert.equal(changes().at(-1)?.backend, null);
  assert.equal(recorded.messages.length, 1, "an empty URL (the local engine) is no problem");
});

test("what the server refuses (window/showMessage) reaches the user", async () => {
  // What only the server can judge, e.g. that the API key's variable is missing from its environment
  // (the real server says so when it loads): the mock stands in for it; the restart picks up its path.
  const refusing = path.join(tmp, "dspark-lsp-refusing");
  const words = "DSpark: could not load the models: backend.apiKeyEnv names DSPARK_API_KEY, but that environment variable is not set";
  const show = JSON.stringify({ type: 1, message: words });
  fs.writeFileSync(refusing, `#!/bin/sh\nDSPARK_MOCK_SHOW_MESSAGE='${show}' exec python3 '${mock}' "$@"\n`, { mode: 0o755 });
  recorded.messages.length = 0;
  recorded.config.set("dspark.serverPath", refusing);
  await recorded.commands.get("dspark.restartServer")?.();
  await until(() => recorded.messages.length > 0, "the server's message");
  assert.deepEqual(recorded.messages, [{ level: "error", text: words }]);
});

test("a missing server gives one error with the install hint, not a crash", async () => {
  recorded.config.set("dspark.serverPath", "/nonexistent/dspark-lsp");
  recorded.config.set("dspark.enable", true); // else the status bar says "off", whatever the server does
  recorded.messages.length = 0;
  await recorded.commands.get("dspark.restartServer")?.();
  const errors = recorded.messages.filter((m) => m.level === "error");
  assert.equal(errors.length, 1);
  assert.match(errors[0].text, /not found or not executable: \/nonexistent\/dspark-lsp/);
  assert.match(errors[0].text, /pip install dspark-lsp/);
  assert.equal(status(), "$(error) DSpark");
  // the previous server was shut down cleanly by the restart
  assert.ok(received().some((m) => m.method === "shutdown"));
});
