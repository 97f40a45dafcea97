// "Installs" the packaged .vsix the way VS Code does as far as this machine allows (no VS Code binary):
// unzips it, loads the entry point its package.json names (with the stub `vscode` module), activates it
// against a server command, and asks for one inline completion through vscode-languageclient.
//
// Usage: [DSPARK_CHECK_SETTINGS=<json>] node out/scripts/checkVsix.js <file.vsix> <server executable> [expected text]
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { installVscodeStub, Position, recorded, textDocument } from "../test/vscodeStub";

interface Ext {
  activate(ctx: { subscriptions: { dispose(): unknown }[] }): Promise<unknown>;
  deactivate(): Promise<void>;
}

async function until(cond: () => boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function main(): Promise<void> {
  const [vsix, server, expected] = process.argv.slice(2);
  if (!vsix || !server) {
    throw new Error("usage: checkVsix.js <file.vsix> <server executable> [expected text]");
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-vsix-"));
  execFileSync("unzip", ["-q", path.resolve(vsix), "-d", dir]);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, "extension", "package.json"), "utf8")) as { main: string; version: string; engines: { vscode: string } };
  const entry = path.join(dir, "extension", manifest.main);
  console.log(`unpacked ${path.basename(vsix)} ${manifest.version} (engines.vscode ${manifest.engines.vscode}); entry ${manifest.main}: ${fs.existsSync(entry) ? "present" : "MISSING"}`);

  installVscodeStub();
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const ext = require(entry) as Ext;
  if (typeof ext.activate !== "function" || typeof ext.deactivate !== "function") {
    throw new Error("the entry point does not export activate/deactivate");
  }
  recorded.config.set("dspark.serverPath", path.resolve(server));
  // DSPARK_CHECK_SETTINGS='{"model": "/dir", ...}': user settings (dspark.*), as in settings.json.
  for (const [key, value] of Object.entries(JSON.parse(process.env.DSPARK_CHECK_SETTINGS ?? "{}") as Record<string, unknown>)) {
    recorded.config.set(`dspark.${key}`, value);
  }
  const ctx = { subscriptions: [] as { dispose(): unknown }[] };
  await ext.activate(ctx);
  console.log(`commands: ${[...recorded.commands.keys()].join(", ")}`);
  const status = (): string => (recorded.statusItems[0] as { text: string }).text;
  await until(() => status().startsWith("$(zap)") || status().startsWith("$(error)"), "the server to be ready", 120000);
  console.log(`status bar: ${status()}`);
  if (status().startsWith("$(error)")) {
    throw new Error(`server error: ${recorded.messages.map((m) => m.text).join(" | ")}`);
  }
  const { provider } = recorded.inlineProviders[0] as { provider: { provideInlineCompletionItems: (...a: unknown[]) => Promise<unknown> } };
  const text = "def answer():\n    ";
  const document = textDocument(path.join(dir, "sample.py"), "python", text) as unknown;
  recorded.documentOpened.fire(document); // didOpen reaches the server, as when the user opens the file
  await new Promise((r) => setTimeout(r, 200));
  const token = { isCancellationRequested: false, onCancellationRequested: () => ({ dispose: () => undefined }) };
  const result = (await provider.provideInlineCompletionItems(document, new Position(1, 4), { triggerKind: 0 }, token)) as
    { items: { insertText: unknown }[] } | { insertText: unknown }[] | undefined;
  const items = result === undefined ? [] : Array.isArray(result) ? result : result.items;
  console.log(`inline completion items: ${JSON.stringify(items.map((i) => i.insertText))}`);
  await ext.deactivate();
  ctx.subscriptions.forEach((d) => void d.dispose());
  if (expected !== undefined && !items.some((i) => i.insertText === expected)) {
    throw new Error(`expected an item ${JSON.stringify(expected)}`);
  }
  console.log("vsix check: OK");
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(`vsix check FAILED: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
