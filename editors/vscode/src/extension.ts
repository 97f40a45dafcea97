// Entry point: wires the pure modules (settings, launch, status, stats) to VS Code and the language client.
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from "vscode-languageclient/node";
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
} as const;

const STATUS_NOTIFICATION = "dspark/status";
const STATS_REQUEST = "dspark/stats";

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
        provideInlineCompletionItems: (document, position, context, token, next) =>
          this.enabled ? next(document, position, context, token) : undefined,
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
    vscode.workspace.onDidChangeConfiguration((e) => c.onConfigurationChanged(e)),
  );
  await c.start();
  return c;
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}
