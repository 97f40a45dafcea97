// Turns the server's `dspark/status` notifications into the status bar's text and tooltip.
// Pure: the extension owns the StatusBarItem, this module only decides what it says.

export type ServerState = "starting" | "loading" | "ready" | "error" | "disabled" | "stopped";

export interface StatusPayload {
  state: ServerState;
  message: string;
  /** ms from the request to the answer (debounce included), for the last completion. */
  lastLatencyMs?: number;
  /**
   * The server's speed-up for the last decoded completion: target forwards the target alone would have
   * run (one per token) over the forwards run, i.e. tokens per target forward. It counts forwards, not
   * seconds, so the tooltip says so.
   */
  speedup?: number;
  acceptedPerForward?: number;
  /** While loading: the load's progress in [0, 1] (the server's load steps; absent when unknown). */
  progress?: number;
}

export interface StatusView {
  text: string;
  tooltip: string;
  /** The bar item gets the error background colour. */
  isError: boolean;
}

const STATES: readonly ServerState[] = ["starting", "loading", "ready", "error", "disabled", "stopped"];

function finiteNumber(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** A fraction in [0, 1]; anything else (a percentage by mistake, NaN, a string) is dropped. */
function fraction(v: unknown): number | undefined {
  const n = finiteNumber(v);
  return n !== undefined && n >= 0 && n <= 1 ? n : undefined;
}

/** Accepts whatever arrived on the wire; an unknown shape becomes an error state, never an exception. */
export function parseStatus(raw: unknown): StatusPayload {
  if (typeof raw !== "object" || raw === null) {
    return { state: "error", message: `malformed dspark/status: ${JSON.stringify(raw)}` };
  }
  const r = raw as Record<string, unknown>;
  const state = STATES.includes(r.state as ServerState) ? (r.state as ServerState) : undefined;
  if (state === undefined) {
    return { state: "error", message: `unknown server state: ${JSON.stringify(r.state)}` };
  }
  return {
    state,
    message: typeof r.message === "string" ? r.message : "",
    lastLatencyMs: finiteNumber(r.lastLatencyMs),
    speedup: finiteNumber(r.speedup),
    acceptedPerForward: finiteNumber(r.acceptedPerForward),
    progress: fraction(r.progress),
  };
}

function formatLatency(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

function formatPercent(f: number): string {
  return `${Math.round(f * 100)}%`;
}

/** `enabled` is the client-side toggle: off wins over whatever the server last said. */
export function renderStatus(status: StatusPayload, enabled: boolean): StatusView {
  const figures: string[] = [];
  if (status.lastLatencyMs !== undefined) {
    figures.push(`last completion ${formatLatency(status.lastLatencyMs)}`);
  }
  if (status.speedup !== undefined) {
    figures.push(`${status.speedup.toFixed(2)}× fewer target forwards than the target alone (tokens per target forward)`);
  } else if (status.acceptedPerForward !== undefined) {
    figures.push(`${status.acceptedPerForward.toFixed(2)} tokens per target forward`);
  }
  if (status.state === "loading" && status.progress !== undefined) {
    figures.push(`models loaded: ${formatPercent(status.progress)}`);
  }
  const lines = [`DSpark: ${enabled ? status.state : "disabled"}`];
  if (status.message) {
    lines.push(status.message);
  }
  lines.push(...figures);
  lines.push("", "Click for stats");
  const tooltip = lines.join("\n");

  if (!enabled || status.state === "disabled") {
    return { text: "$(circle-slash) DSpark", tooltip, isError: false };
  }
  switch (status.state) {
    // The words say what the spinner means, and the load's progress when the server sent one.
    case "starting":
      return { text: "$(sync~spin) DSpark starting…", tooltip, isError: false };
    case "loading": {
      const pct = status.progress !== undefined ? ` ${formatPercent(status.progress)}` : "";
      return { text: `$(sync~spin) DSpark loading…${pct}`, tooltip, isError: false };
    }
    case "error":
      return { text: "$(error) DSpark", tooltip, isError: true };
    case "stopped":
      return { text: "$(debug-disconnect) DSpark", tooltip, isError: true };
    case "ready": {
      const parts: string[] = [];
      if (status.lastLatencyMs !== undefined) {
        parts.push(formatLatency(status.lastLatencyMs));
      }
      if (status.speedup !== undefined) {
        parts.push(`${status.speedup.toFixed(1)}×`);
      }
      const suffix = parts.length > 0 ? ` ${parts.join(" · ")}` : "";
      return { text: `$(zap) DSpark${suffix}`, tooltip, isError: false };
    }
  }
}
