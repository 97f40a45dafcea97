// Maps the user's `dspark.*` VS Code settings to the server's settings (docs/ARCHITECTURE.md).
// No `vscode` import: the extension passes a reader, so this module is unit-testable in plain node.

export type Multiline = "auto" | "always" | "never";
/** Pre-pack the target's linear layers for the CPU (flat verify cost); see the README. */
export type PackWeights = "auto" | "on" | "off";

/** The settings the server understands, with the names and defaults of docs/ARCHITECTURE.md. */
export interface ServerSettings {
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
  contextWindow: number;
  prefixShare: number;
  relaxed: boolean;
  debounceMs: number;
  multiline: Multiline;
}

export const DEFAULT_SETTINGS: Readonly<ServerSettings> = Object.freeze({
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
  contextWindow: 256,
  prefixShare: 0.75,
  relaxed: false,
  debounceMs: 150,
  multiline: "auto",
});

/** Settings that only the client uses: changing them means a new server process. */
export const LAUNCH_KEYS = ["serverPath", "pythonPath", "serverArgs"] as const;

export const SERVER_KEYS = Object.keys(DEFAULT_SETTINGS) as (keyof ServerSettings)[];

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

// The server's ranges, from its one settings schema (dspark_lsp/lsp/settings_schema.py, which also
// generates package.json's configuration); tests/test_settings_schema.py fails when these disagree.
const CHECKS: Record<keyof ServerSettings, [Check, string]> = {
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
  contextWindow: [inRange(32, 32768, true), "an integer in [32, 32768]"],
  prefixShare: [inRange(0.1, 1, false), "a number in [0.1, 1]"],
  relaxed: [isBool, "true or false"],
  debounceMs: [inRange(0, 5000, true), "an integer in [0, 5000] (milliseconds)"],
  multiline: [(v) => v === "auto" || v === "always" || v === "never", '"auto", "always" or "never"'],
};

/** Reads every server setting, replacing invalid values by their defaults and saying why. */
export function readServerSettings(cfg: ConfigReader): SettingsResult {
  const settings: ServerSettings = { ...DEFAULT_SETTINGS };
  const problems: string[] = [];
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
  if (SERVER_KEYS.some((k) => affects(`dspark.${k}`))) {
    return "forward";
  }
  return "none";
}
