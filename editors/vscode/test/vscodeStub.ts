/* eslint-disable @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-return, @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-explicit-any */
// A stand-in for the `vscode` module, enough for the extension and vscode-languageclient to load,
// activate and talk to a real server process in plain node (no VS Code binary is reachable here).
// It records what the extension does (commands, status bar text, messages, providers) for assertions.
import Module from "node:module";
import * as path from "node:path";

type Listener = (e: any) => unknown;

export class Disposable {
  constructor(private readonly fn: () => void = () => undefined) {}
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((i) => i.dispose()));
  }
  dispose(): void {
    this.fn();
  }
}

export class EventEmitter<T> {
  private listeners: Listener[] = [];
  event = (listener: Listener): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  };
  fire(e: T): void {
    this.listeners.forEach((l) => void l(e));
  }
  dispose(): void {
    this.listeners = [];
  }
}

class Position {
  constructor(public line: number, public character: number) {}
}
class Range {
  start: Position;
  end: Position;
  constructor(a: any, b: any, c?: number, d?: number) {
    if (typeof a === "number") {
      this.start = new Position(a, b);
      this.end = new Position(c ?? a, d ?? b);
    } else {
      this.start = a;
      this.end = b;
    }
  }
}
class Uri {
  constructor(public scheme: string, public path: string) {}
  static file(p: string): Uri {
    return new Uri("file", p);
  }
  static parse(s: string): Uri {
    const m = /^([a-z-]+):\/\/(.*)$/.exec(s);
    return m ? new Uri(m[1], m[2]) : new Uri("file", s);
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return `${this.scheme}://${this.path}`;
  }
  with(): Uri {
    return this;
  }
}
class InlineCompletionItem {
  constructor(public insertText: any, public range?: Range, public command?: any) {}
}
class InlineCompletionList {
  constructor(public items: InlineCompletionItem[]) {}
}
class CancellationTokenSource {
  private emitter = new EventEmitter<void>();
  token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
  cancel(): void {
    this.token.isCancellationRequested = true;
    this.emitter.fire();
  }
  dispose(): void {
    this.emitter.dispose();
  }
}

/** Everything the tests look at afterwards. */
export interface Recorded {
  commands: Map<string, (...args: any[]) => unknown>;
  statusItems: any[];
  messages: { level: string; text: string }[];
  inlineProviders: { selector: any; provider: any }[];
  openedDocuments: { language?: string; content?: string }[];
  config: Map<string, unknown>;
  configChanged: EventEmitter<any>;
  /** Fires workspace.onDidOpenTextDocument, as VS Code does when the user opens a file. */
  documentOpened: EventEmitter<any>;
}

export const recorded: Recorded = {
  commands: new Map(),
  statusItems: [],
  messages: [],
  inlineProviders: [],
  openedDocuments: [],
  config: new Map(),
  configChanged: new EventEmitter<any>(),
  documentOpened: new EventEmitter<any>(),
};

/** A text document as the language client reads it. */
export function textDocument(file: string, languageId: string, text: string): any {
  return { uri: Uri.file(file), fileName: file, languageId, version: 1, isClosed: false, getText: () => text, lineCount: text.split("\n").length };
}

const event = (): ((l: Listener) => Disposable) => new EventEmitter<any>().event;

function configuration(section: string): any {
  return {
    get: (key: string, dflt?: unknown) => {
      const full = section ? `${section}.${key}` : key;
      return recorded.config.has(full) ? recorded.config.get(full) : dflt;
    },
    has: (key: string) => recorded.config.has(`${section}.${key}`),
    inspect: () => undefined,
    update: (key: string, value: unknown) => {
      const full = `${section}.${key}`;
      recorded.config.set(full, value);
      recorded.configChanged.fire({ affectsConfiguration: (s: string) => full === s || full.startsWith(`${s}.`) });
      return Promise.resolve();
    },
  };
}

const message = (level: string) => (text: string): Promise<undefined> => {
  recorded.messages.push({ level, text });
  return Promise.resolve(undefined);
};

/** Any member not modelled: registerX returns a Disposable, onDidX is an event, the rest a no-op. */
function namespace(known: Record<string, unknown>): any {
  return new Proxy(known, {
    get(target, prop: string) {
      if (prop in target) {
        return target[prop];
      }
      if (prop.startsWith("register") || prop.startsWith("create")) {
        return () => new Disposable();
      }
      if (prop.startsWith("onDid") || prop.startsWith("onWill")) {
        return event();
      }
      return undefined;
    },
  });
}

const logChannel = (): any => {
  const lines: string[] = [];
  const log = (...a: unknown[]): void => void lines.push(a.map(String).join(" "));
  return {
    name: "DSpark", lines, logLevel: 2, onDidChangeLogLevel: event(),
    append: log, appendLine: log, replace: log, clear: () => undefined, show: () => undefined, hide: () => undefined,
    dispose: () => undefined, trace: log, debug: log, info: log, warn: log, error: log,
  };
};

const stub: Record<string, unknown> = {
  // Compiled `import * as code from "vscode"` would copy own properties only; as an ES module namespace
  // the Proxy below is used as is, so classes we do not model still resolve.
  __esModule: true,
  version: "1.91.0",
  Disposable, EventEmitter, Position, Range, Uri, InlineCompletionItem, InlineCompletionList, CancellationTokenSource,
  CancellationError: class extends Error {},
  ThemeColor: class { constructor(public id: string) {} },
  StatusBarAlignment: { Left: 1, Right: 2 },
  ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
  LogLevel: { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 },
  ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
  InlineCompletionTriggerKind: { Invoke: 0, Automatic: 1 },
  CompletionTriggerKind: { Invoke: 0, TriggerCharacter: 1, TriggerForIncompleteCompletions: 2 },
  env: { appName: "stub", language: "en", openExternal: () => Promise.resolve(true) },
  commands: namespace({
    registerCommand: (id: string, fn: (...args: any[]) => unknown) => {
      recorded.commands.set(id, fn);
      return new Disposable(() => recorded.commands.delete(id));
    },
    executeCommand: () => Promise.resolve(undefined),
  }),
  window: namespace({
    createOutputChannel: logChannel,
    createStatusBarItem: () => {
      const item = { text: "", tooltip: "", command: undefined, name: "", backgroundColor: undefined, show: () => undefined, hide: () => undefined, dispose: () => undefined };
      recorded.statusItems.push(item);
      return item;
    },
    showErrorMessage: message("error"),
    showWarningMessage: message("warning"),
    showInformationMessage: message("info"),
    showTextDocument: () => Promise.resolve(undefined),
    withProgress: (_o: unknown, task: (p: unknown, t: unknown) => unknown) => task({ report: () => undefined }, new CancellationTokenSource().token),
    activeTextEditor: undefined,
    visibleTextEditors: [],
    tabGroups: { all: [], onDidChangeTabs: event(), onDidChangeTabGroups: event() },
  }),
  workspace: namespace({
    getConfiguration: (section = "") => configuration(section),
    onDidChangeConfiguration: recorded.configChanged.event,
    onDidOpenTextDocument: recorded.documentOpened.event,
    textDocuments: [],
    notebookDocuments: [],
    workspaceFolders: undefined,
    openTextDocument: (doc: { language?: string; content?: string }) => {
      recorded.openedDocuments.push(doc);
      return Promise.resolve(doc);
    },
    createFileSystemWatcher: () => ({ onDidCreate: event(), onDidChange: event(), onDidDelete: event(), dispose: () => undefined }),
  }),
  languages: namespace({
    match: () => 10,
    registerInlineCompletionItemProvider: (selector: any, provider: any) => {
      recorded.inlineProviders.push({ selector, provider });
      return new Disposable();
    },
    createDiagnosticCollection: () => ({ set: () => undefined, delete: () => undefined, clear: () => undefined, dispose: () => undefined }),
  }),
  extensions: namespace({ all: [], getExtension: () => undefined }),
};

// Unmodelled classes (CompletionItem, Hover...) are plain records of their constructor arguments.
const fullStub = new Proxy(stub, {
  get(target, prop: string) {
    if (prop in target) {
      return target[prop];
    }
    if (/^[A-Z]/.test(prop)) {
      const cls = class { args: unknown[]; constructor(...args: unknown[]) { this.args = args; } };
      target[prop] = cls;
      return cls;
    }
    return undefined;
  },
});

/** Makes `require("vscode")` return the stub, for every module loaded after this call. */
export function installVscodeStub(): void {
  const m = Module as unknown as { _resolveFilename: (req: string, ...rest: any[]) => string; _cache: Record<string, any> };
  const original = m._resolveFilename;
  const fake = path.join(__dirname, "__vscode_stub__.js");
  m._resolveFilename = function (req: string, ...rest: any[]) {
    return req === "vscode" ? fake : original.call(this, req, ...rest);
  };
  const mod = new Module(fake);
  mod.exports = fullStub;
  (mod as any).loaded = true;
  m._cache[fake] = mod;
}

export { Position, Range, Uri };
