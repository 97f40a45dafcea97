// Entry point: wires the pure modules (settings, launch, status, stats) to VS Code and the language client.
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from "vscode-languageclient/node";
import { TypingSpeed } from "./debounce";
import { INSTALL_HINT, Launch, probeLaunch, resolveLaunch, which } from "./launch";
import { actionForChange, didChangeConfigurationParams, initializationOptions, readServerSettings, ServerSettings } from "./settings";
import { formatStats } from "./stats";
import { parseStatus, renderStatus, StatusPayload } from "./status";

/** Languages the server has grammars for (grammars/<language>/ in the server). */
export const LANGUAGES = ["python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust", "java", "c", "cpp"];

export const COMMANDS = {
  restart: "dspark.restartServer",
  toggle: "dspark.toggle",
  showStats: "dspark.showStats",
  /** Internal (not in the palette): the accepted inline item's command, reports the accept. */
  accepted: "dspark.accepted",
} as const;

const STATUS_NOTIFICATION = "dspark/status";
const STATS_REQUEST = "dspark/stats";
// Feedback the server counts in dspark/stats (dspark_lsp/lsp/handlers/feedback.py).
const DID_SHOW = "textDocument/didShowCompletion";
const DID_ACCEPT = "dspark/didAcceptCompletion";
/** Where the cursor rests (the server prefills the prompt there in the background). */
const CURSOR = "dspark/cursor";
const CURSOR_REST_MS = 250;

type InlineResult = vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined;

function insertTextOf(item: vscode.InlineCompletionItem): string {
  return typeof item.insertText === "string" ? item.insertText : item.insertText.value;
}

/** Resolves after `ms`, or as soon as the token is cancelled. */
function sleep(ms: number, token: vscode.CancellationToken): Promise<void> {
  if (token.isCancellationRequested) {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      sub.dispose();
      resolve();
    }, ms);
    const sub = token.onCancellationRequested(() => {
      clearTimeout(timer);
      sub.dispose();
      resolve();
    });
  });
}

function config(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration("dspark");
}

/** Owns the client process, the status bar item and the output channel for one activation. */
export class DsparkController implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private status: StatusPayload = { state: "starting", message: "" };
  private readonly output: vscode.LogOutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private reportedProblems = new Set<string>();
  /** Typing speed in the active editor, for the adaptive wait before an automatic request. */
  readonly typing = new TypingSpeed();
  private cursorTimer: ReturnType<typeof setTimeout> | undefined;

  constructor() {
    this.output = vscode.window.createOutputChannel("DSpark", { log: true });
    this.statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
    this.statusItem.command = COMMANDS.showStats;
    this.statusItem.name = "DSpark";
    this.render();
    this.statusItem.show();
  }

  get enabled(): boolean {
    return this.currentSettings().enable;
  }

  /** The server settings now, reporting each invalid value once (it falls back to its default). */
  currentSettings(): ServerSettings {
    const { settings, problems } = readServerSettings(config());
    for (const p of problems) {
      if (!this.reportedProblems.has(p)) {
        this.reportedProblems.add(p);
        this.output.appendLine(`settings: ${p}`);
        void vscode.window.showWarningMessage(`DSpark: ${p}`);
      }
    }
    return settings;
  }

  setStatus(status: StatusPayload): void {
    this.status = status;
    this.render();
  }

  private render(): void {
    const view = renderStatus(this.status, this.enabled);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.isError ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }

  private launch(): Launch {
    const c = config();
    return resolveLaunch(
      {
        serverPath: c.get<string>("serverPath") ?? "",
        pythonPath: c.get<string>("pythonPath") ?? "",
        serverArgs: c.get<string[]>("serverArgs") ?? [],
      },
      { platform: process.platform, which: (name) => which(name) },
    );
  }

  async start(): Promise<void> {
    const launch = this.launch();
    this.output.appendLine(`starting ${launch.command} ${launch.args.join(" ")} (from ${launch.source})`);
    this.setStatus({ state: "starting", message: `${launch.command} ${launch.args.join(" ")}` });
    const probe = await probeLaunch(launch);
    if (!probe.ok) {
      this.output.appendLine(probe.message);
      this.setStatus({ state: "error", message: probe.message });
      void this.offerFix(probe.message);
      return;
    }

    // No `transport` here: with TransportKind.stdio vscode-languageclient appends its own `--stdio` to
    // the arguments, and launch.args already ends with the one the server needs (it was started as
    // `dspark-lsp --stdio --stdio`). Left undefined, the client still talks over the child's stdin/stdout.
    const serverOptions: ServerOptions = { command: launch.command, args: launch.args };
    const clientOptions: LanguageClientOptions = {
      documentSelector: LANGUAGES.flatMap((language) => [
        { scheme: "file", language },
        { scheme: "untitled", language },
      ]),
      outputChannel: this.output,
      initializationOptions: initializationOptions(this.currentSettings()),
      middleware: {
        // The toggle acts at once on the client side too, without waiting for the server to hear of it.
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!this.enabled) {
            return undefined;
          }
          if (context.triggerKind === vscode.InlineCompletionTriggerKind.Automatic) {
            // Adaptive debounce: in the middle of a fast burst, wait until the burst has probably
            // ended (VS Code cancels this call when the next key comes, and nothing is sent).
            const wait = this.typing.delayMs(Date.now(), this.currentSettings().debounceMs);
            if (wait > 0) {
              await sleep(wait, token);
              if (token.isCancellationRequested) {
                return undefined;
              }
            }
          }
          return this.track(document.uri.toString(), await next(document, position, context, token));
        },
        // VS Code shows ghost text from inlineCompletion; the same text as a suggest-list item would be a
        // duplicate, so completion items are opt-in (clients without inline completion use them).
        provideCompletionItem: (document, position, context, token, next) =>
          this.enabled && config().get<boolean>("completionItems") === true ? next(document, position, context, token) : undefined,
        workspace: {
          // A pull of `workspace/configuration` gets the mapped, validated settings, not the raw section.
          configuration: (params, token, next) => {
            if (params.items.every((item) => item.section === "dspark")) {
              return params.items.map(() => this.currentSettings());
            }
            return next(params, token);
          },
        },
      },
    };
    const client = new LanguageClient("dspark", "DSpark", serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped && this.client === client) {
        this.setStatus({ state: "stopped", message: "The server stopped: run 'DSpark: Restart Server'." });
      }
    });
    client.onNotification(STATUS_NOTIFICATION, (raw: unknown) => this.setStatus(parseStatus(raw)));
    try {
      await client.start();
      if (this.status.state === "starting") {
        this.setStatus({ state: "loading", message: "server started; waiting for the models" });
      }
    } catch (e) {
      const message = `The DSpark server failed to start: ${e instanceof Error ? e.message : String(e)}`;
      this.output.appendLine(message);
      this.setStatus({ state: "error", message });
      void this.offerFix(message);
    }
  }

  /**
   * Tells the server what VS Code was given to show and, through the items' command (run by VS Code
   * when an item is accepted whole), what was accepted. VS Code's stable API has no "shown" or
   * "partially accepted" callback (handleDidShowCompletionItem / handleDidPartiallyAcceptCompletionItem
   * are proposed API), so the first item handed over counts as shown: VS Code shows it unless the
   * user typed on first, which makes the acceptance rate a lower bound.
   */
  private track(uri: string, result: InlineResult): InlineResult {
    const items = Array.isArray(result) ? result : result?.items;
    const client = this.client;
    if (!items || items.length === 0 || !client) {
      return result;
    }
    for (const item of items) {
      if (item.command === undefined) {
        item.command = { command: COMMANDS.accepted, title: "DSpark: accepted", arguments: [uri, insertTextOf(item)] };
      }
    }
    const shown = insertTextOf(items[0]);
    if (shown) {
      void client.sendNotification(DID_SHOW, { uri, item: { insertText: shown } }).catch(() => undefined);
    }
    return result;
  }

  /** The accepted item's command. */
  async accepted(uri: unknown, insertText: unknown): Promise<void> {
    if (typeof uri === "string" && typeof insertText === "string" && this.client?.isRunning()) {
      await this.client.sendNotification(DID_ACCEPT, { uri, item: { insertText } }).catch(() => undefined);
    }
  }

  /** The cursor moved: once it has rested CURSOR_REST_MS, tell the server where (an empty selection only). */
  onCursorMoved(e: vscode.TextEditorSelectionChangeEvent): void {
    if (this.cursorTimer !== undefined) {
      clearTimeout(this.cursorTimer);
    }
    const selection = e.selections[0];
    const client = this.client;
    if (!selection || !selection.isEmpty || !client?.isRunning() || e.textEditor.document.uri.scheme !== "file") {
      return;
    }
    const uri = e.textEditor.document.uri.toString();
    const position = { line: selection.active.line, character: selection.active.character };
    this.cursorTimer = setTimeout(() => {
      this.cursorTimer = undefined;
      void client.sendNotification(CURSOR, { textDocument: { uri }, position }).catch(() => undefined);
    }, CURSOR_REST_MS);
  }

  /** A text change: a single small edit in the active editor is a keystroke for the typing speed. */
  onDocumentChanged(e: vscode.TextDocumentChangeEvent): void {
    const active = vscode.window.activeTextEditor?.document;
    if (active === undefined || e.document !== active || e.contentChanges.length !== 1) {
      return;
    }
    const change = e.contentChanges[0];
    // A paste or an accepted completion is not typing speed.
    if (change.text.length <= 2 && change.rangeLength <= 1) {
      this.typing.record(Date.now());
    }
  }

  private async offerFix(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, "Open Settings", "Show Log");
    if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "dspark.");
    } else if (choice === "Show Log") {
      this.output.show();
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client?.isRunning()) {
      await client.stop();
    }
  }

  async restart(): Promise<void> {
    await this.stop();
    this.reportedProblems.clear();
    await this.start();
  }

  async toggle(): Promise<void> {
    // Written to the user settings, so the choice survives a reload and reaches the server as a config change.
    await config().update("enable", !this.enabled, vscode.ConfigurationTarget.Global);
    this.render();
  }

  async showStats(): Promise<void> {
    if (!this.client?.isRunning()) {
      void vscode.window.showWarningMessage(`DSpark: the server is not running (${this.status.state}). ${this.status.message || INSTALL_HINT}`);
      return;
    }
    let stats: unknown;
    try {
      stats = await this.client.sendRequest(STATS_REQUEST, {});
    } catch (e) {
      void vscode.window.showErrorMessage(`DSpark: ${STATS_REQUEST} failed: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    const doc = await vscode.workspace.openTextDocument({ language: "markdown", content: formatStats(stats) });
    await vscode.window.showTextDocument(doc, { preview: true });
  }

  async onConfigurationChanged(e: vscode.ConfigurationChangeEvent): Promise<void> {
    const action = actionForChange((section) => e.affectsConfiguration(section));
    if (action === "restart") {
      await this.restart();
    } else if (action === "forward") {
      this.render();
      if (this.client?.isRunning()) {
        await this.client.sendNotification("workspace/didChangeConfiguration", didChangeConfigurationParams(this.currentSettings()));
      }
    }
  }

  dispose(): void {
    void this.stop();
    this.statusItem.dispose();
    this.output.dispose();
  }
}

let controller: DsparkController | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<DsparkController> {
  const c = new DsparkController();
  controller = c;
  context.subscriptions.push(
    c,
    vscode.commands.registerCommand(COMMANDS.restart, () => c.restart()),
    vscode.commands.registerCommand(COMMANDS.toggle, () => c.toggle()),
    vscode.commands.registerCommand(COMMANDS.showStats, () => c.showStats()),
    vscode.commands.registerCommand(COMMANDS.accepted, (uri: unknown, text: unknown) => c.accepted(uri, text)),
    vscode.workspace.onDidChangeTextDocument((e) => c.onDocumentChanged(e)),
    vscode.window.onDidChangeTextEditorSelection((e) => c.onCursorMoved(e)),
    vscode.workspace.onDidChangeConfiguration((e) => c.onConfigurationChanged(e)),
  );
  await c.start();
  return c;
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}
