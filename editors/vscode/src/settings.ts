// Maps the user's `dspark.*` VS Code settings to the server's settings (docs/ARCHITECTURE.md).
// No `vscode` import: the extension passes a reader, so this module is unit-testable in plain node.

export type Multiline = "auto" | "always" | "never";
/** Pre-pack the target's linear layers for the CPU (flat verify cost); see the README. */
export type PackWeights = "auto" | "on" | "off";

/** The scalar settings of the server's schema, with the names and defaults of docs/ARCHITECTURE.md. */
export interface ScalarSettings {
  enable: boolean;
  model: string;
  draftModel: string | null;
  device: string;
  dtype: string;
  packWeights: PackWeights;
  threshold: number;
  kMin: number;
  kMax: number;
  alternates: number;
  maxNewTokens: number;
  quickAnswerMs: number;
  contextWindow: number;
  prefixShare: number;
  contextBudget: number;
  contextOpenFiles: boolean;
  contextDefinitions: boolean;
  contextDefinitionLanguages: string;
  warmUp: boolean;
  relaxed: boolean;
  debounceMs: number;
  multiline: Multiline;
}

/**
 * The server's `backend` setting (dspark_lsp/remote/config.py): an OpenAI-compatible completions server
 * that decodes instead of the local engine. VS Code spells its fields `dspark.backend.<field>`.
 */
export interface BackendSettings {
  url: string;
  /** The served model name; null: the first one the server's GET /v1/models lists. */
  model: string | null;
  /** The name of an environment variable of the server's process holding the API key (never the key). */
  apiKeyEnv: string | null;
  timeoutMs: number;
  stream: boolean;
  stopTokenIds: boolean;
  extraBody: Record<string, unknown>;
  /** A tokenizer for the prompt when it is not the `model` setting's; null: the model's. */
  tokenizer: string | null;
}

/** What the server is sent: the scalar settings, and `backend` (null: the local engine). */
export interface ServerSettings extends ScalarSettings {
  backend: BackendSettings | null;
}

export const DEFAULT_SETTINGS: Readonly<ScalarSettings> = Object.freeze({
  enable: true,
  model: "default",
  draftModel: null,
  device: "auto",
  dtype: "auto",
  packWeights: "auto",
  threshold: 0.9,
  kMin: 1,
  kMax: 5,
  alternates: 3,
  maxNewTokens: 64,
  quickAnswerMs: 200,
  contextWindow: 768,
  prefixShare: 0.9,
  contextBudget: 256,
  contextOpenFiles: false,
  contextDefinitions: true,
  contextDefinitionLanguages: "python,go",
  warmUp: true,
  relaxed: false,
  debounceMs: 150,
  multiline: "auto",
});

/** Settings that only the client uses: changing them means a new server process. */
export const LAUNCH_KEYS = ["serverPath", "pythonPath", "serverArgs"] as const;

export const SERVER_KEYS = Object.keys(DEFAULT_SETTINGS) as (keyof ScalarSettings)[];

// The server's rules for `backend` (dspark_lsp/remote/config.py: KEYS, MIN/MAX_TIMEOUT_MS, RESERVED,
// RemoteSettings' defaults); tests/clients/test_editor_backend_settings.py fails when these disagree.
export const BACKEND_KEYS = ["url", "model", "apiKeyEnv", "timeoutMs", "stream", "stopTokenIds", "extraBody", "tokenizer"] as const;
export const BACKEND_TIMEOUT_MS = { min: 100, max: 600000, default: 10000 } as const;
/** Request fields the service sets itself: `extraBody` may not override them. */
export const BACKEND_RESERVED: readonly string[] = ["model", "prompt", "stream", "stream_options", "max_tokens", "stop", "temperature"];
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** What the extension hands us: `vscode.workspace.getConfiguration("dspark")` fits this shape. */
export interface ConfigReader {
  get<T>(key: string): T | undefined;
}

export interface SettingsResult {
  settings: ServerSettings;
  /** One line per invalid value, already replaced by its default; shown to the user once. */
  problems: string[];
}

type Check = (value: unknown) => boolean;

/** The dtypes the server loads (dspark_lsp.models.loader.DTYPES). */
const DTYPES: readonly string[] = ["auto", "gguf", "float32", "bfloat16", "float16"];

const isString: Check = (v) => typeof v === "string" && v.trim().length > 0;
const isBool: Check = (v) => typeof v === "boolean";
/** `openLow`: lo itself is invalid, (lo, hi]. */
const inRange = (lo: number, hi: number, integer: boolean, openLow = false): Check => (v) =>
  typeof v === "number" && Number.isFinite(v) && (openLow ? v > lo : v >= lo) && v <= hi && (!integer || Number.isInteger(v));

// The server's ranges, from its one settings schema (dspark_lsp/settings_schema.py, which also
// generates package.json's configuration); tests/lsp/test_settings_schema.py fails when these disagree.
const CHECKS: Record<keyof ScalarSettings, [Check, string]> = {
  enable: [isBool, "true or false"],
  model: [isString, "a non-empty string"],
  // null means "the pair's own draft"; an empty string in the settings UI means the same.
  draftModel: [(v) => v === null || typeof v === "string", "null or a string"],
  device: [isString, "a non-empty string"],
  dtype: [(v) => typeof v === "string" && DTYPES.includes(v), `one of ${DTYPES.join(", ")}`],
  packWeights: [(v) => v === "auto" || v === "on" || v === "off", '"auto", "on" or "off"'],
  threshold: [inRange(0, 1, false, true), "a number in (0, 1]"],
  kMin: [inRange(1, 16, true), "an integer in [1, 16]"],
  kMax: [inRange(1, 16, true), "an integer in [1, 16]"],
  alternates: [inRange(0, 8, true), "an integer in [0, 8]"],
  maxNewTokens: [inRange(1, 2048, true), "an integer in [1, 2048]"],
  quickAnswerMs: [inRange(0, 60000, true), "an integer in [0, 60000]"],
  contextWindow: [inRange(32, 32768, true), "an integer in [32, 32768]"],
  prefixShare: [inRange(0.1, 1, false), "a number in [0.1, 1]"],
  contextBudget: [inRange(0, 8192, true), "an integer in [0, 8192]"],
  contextOpenFiles: [isBool, "true or false"],
  contextDefinitions: [isBool, "true or false"],
  contextDefinitionLanguages: [
    (v) => typeof v === "string" && /^(\*|[a-z]+( *, *[a-z]+)*)$/.test(v),
    "comma-separated language ids, or *",
  ],
  warmUp: [isBool, "true or false"],
  relaxed: [isBool, "true or false"],
  debounceMs: [inRange(0, 5000, true), "an integer in [0, 5000] (milliseconds)"],
  multiline: [(v) => v === "auto" || v === "always" || v === "never", '"auto", "always" or "never"'],
};

/** Why `url` is not a backend URL the server accepts (http(s)://host[:port][/path]), or null. */
export function backendUrlProblem(url: string): string | null {
  // The parts Python's urlsplit finds; WHATWG's URL parser would accept "http:/host", which the server refuses.
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/s.exec(url.trim());
  const scheme = m?.[1].toLowerCase();
  if (!m || (scheme !== "http" && scheme !== "https")) {
    return "must be an http:// or https:// URL with a host";
  }
  const hostPort = m[2].replace(/^.*@/s, "");
  const parts = /^(\[[^\]]*\]|[^:]*)(?::(.*))?$/s.exec(hostPort);
  const host = parts?.[1] ?? "";
  const port = parts?.[2];
  if (port !== undefined && port !== "" && !(/^\d+$/.test(port) && Number(port) <= 65535)) {
    return `is not a URL (port ${JSON.stringify(port)} is not a number in [0, 65535])`;
  }
  if (host === "" || host === "[]") {
    return "must be an http:// or https:// URL with a host";
  }
  if ((m[4] ?? "").length > 1 || (m[5] ?? "").length > 1) {
    return "must not have a query or fragment";
  }
  return null;
}

/** The `dspark.backend.*` settings as the server's `backend`: null when no URL is set (the local engine). */
export function readBackend(cfg: ConfigReader): { backend: BackendSettings | null; problems: string[] } {
  const raw = (key: string): unknown => cfg.get<unknown>(`backend.${key}`);
  const url = raw("url");
  if (url === undefined || url === null || (typeof url === "string" && url.trim() === "")) {
    return { backend: null, problems: [] };
  }
  const problems: string[] = [];
  const bad = (key: string, expected: string, value: unknown): void => {
    problems.push(`dspark.backend.${key} ${expected}, got ${JSON.stringify(value)}; using the local engine`);
  };
  if (typeof url !== "string") {
    bad("url", "must be a string", url);
  } else {
    const problem = backendUrlProblem(url);
    if (problem !== null) {
      bad("url", problem, url);
    }
  }
  // "" in the settings UI means "not set", as null does in settings.json.
  const optionalString = (key: string): string | null => {
    const v = raw(key);
    if (v === undefined || v === null || (typeof v === "string" && v.trim() === "")) {
      return null;
    }
    if (typeof v !== "string") {
      bad(key, "must be a string", v);
      return null;
    }
    return v.trim();
  };
  const model = optionalString("model");
  const tokenizer = optionalString("tokenizer");
  const apiKeyEnv = optionalString("apiKeyEnv");
  if (apiKeyEnv !== null && !ENV_NAME.test(apiKeyEnv)) {
    bad("apiKeyEnv", "must be the name of an environment variable (letters, digits, _), not the key itself", raw("apiKeyEnv"));
  }
  const timeout = raw("timeoutMs") ?? BACKEND_TIMEOUT_MS.default;
  if (!inRange(BACKEND_TIMEOUT_MS.min, BACKEND_TIMEOUT_MS.max, true)(timeout)) {
    bad("timeoutMs", `must be an integer in [${BACKEND_TIMEOUT_MS.min}, ${BACKEND_TIMEOUT_MS.max}] (milliseconds)`, timeout);
  }
  const flag = (key: string): boolean => {
    const v = raw(key) ?? true;
    if (typeof v !== "boolean") {
      bad(key, "must be true or false", v);
      return true;
    }
    return v;
  };
  const stream = flag("stream");
  const stopTokenIds = flag("stopTokenIds");
  const extra = raw("extraBody") ?? {};
  let extraBody: Record<string, unknown> = {};
  if (typeof extra !== "object" || extra === null || Array.isArray(extra)) {
    bad("extraBody", "must be an object", extra);
  } else {
    const reserved = Object.keys(extra).filter((k) => BACKEND_RESERVED.includes(k)).sort();
    if (reserved.length > 0) {
      bad("extraBody", `may not set ${reserved.join(", ")} (the server sets them)`, extra);
    }
    extraBody = { ...(extra as Record<string, unknown>) };
  }
  if (problems.length > 0) {
    return { backend: null, problems };
  }
  const backend: BackendSettings = {
    url: (url as string).trim(), model, apiKeyEnv, timeoutMs: timeout as number, stream, stopTokenIds, extraBody, tokenizer,
  };
  return { backend, problems };
}

/** Reads every server setting, replacing invalid values by their defaults and saying why. */
export function readServerSettings(cfg: ConfigReader): SettingsResult {
  const read = readBackend(cfg);
  const settings: ServerSettings = { ...DEFAULT_SETTINGS, backend: read.backend };
  const problems: string[] = [...read.problems];
  const out = settings as unknown as Record<string, unknown>;
  for (const key of SERVER_KEYS) {
    const raw = cfg.get<unknown>(key);
    if (raw === undefined) {
      continue;
    }
    const [check, expected] = CHECKS[key];
    if (check(raw)) {
      out[key] = raw;
    } else {
      problems.push(`dspark.${key} must be ${expected}, got ${JSON.stringify(raw)}; using ${JSON.stringify(DEFAULT_SETTINGS[key])}`);
    }
  }
  if (settings.draftModel !== null && settings.draftModel.trim() === "") {
    settings.draftModel = null;
  }
  if (settings.kMin > settings.kMax) {
    problems.push(`dspark.kMin (${settings.kMin}) is above dspark.kMax (${settings.kMax}); using ${DEFAULT_SETTINGS.kMin}..${DEFAULT_SETTINGS.kMax}`);
    settings.kMin = DEFAULT_SETTINGS.kMin;
    settings.kMax = DEFAULT_SETTINGS.kMax;
  }
  return { settings, problems };
}

/** `initializationOptions` sent at start-up: the same flat object the server reads. */
export function initializationOptions(settings: ServerSettings): Record<string, unknown> {
  return { ...settings };
}

/** The `workspace/didChangeConfiguration` payload: the settings under the key `dspark`. */
export function didChangeConfigurationParams(settings: ServerSettings): { settings: { dspark: ServerSettings } } {
  return { settings: { dspark: { ...settings } } };
}

/** What a configuration change needs: nothing, a notification to the server, or a new server process. */
export type ChangeAction = "none" | "forward" | "restart";

export function actionForChange(affects: (section: string) => boolean): ChangeAction {
  if (LAUNCH_KEYS.some((k) => affects(`dspark.${k}`))) {
    return "restart";
  }
  if (SERVER_KEYS.some((k) => affects(`dspark.${k}`)) || affects("dspark.backend")) {
    return "forward";
  }
  return "none";
}
