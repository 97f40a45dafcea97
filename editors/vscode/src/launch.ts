// Decides which process to start as the server, and checks that it is there before starting it,
// so a missing install gives one clear message with the fix instead of a crashed client.
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export interface LaunchConfig {
  serverPath: string;
  pythonPath: string;
  serverArgs: string[];
}

export interface Launch {
  command: string;
  args: string[];
  /** How the command was chosen, for the output channel and error messages. */
  source: "serverPath" | "pythonPath" | "PATH" | "default python";
  /** When the command is a Python interpreter (probed by importing the package). */
  python: boolean;
}

export interface LaunchEnv {
  platform: NodeJS.Platform;
  /** Absolute path of an executable on PATH, or undefined. */
  which(name: string): string | undefined;
}

export function expandHome(p: string): string {
  if (p === "~") {
    return os.homedir();
  }
  if (p.startsWith("~/") || p.startsWith("~\\")) {
    return path.join(os.homedir(), p.slice(2));
  }
  return p;
}

/** serverPath > pythonPath > `dspark-lsp` on PATH > the default python with `-m dspark_lsp.cli` (works without the package's __main__). */
export function resolveLaunch(cfg: LaunchConfig, env: LaunchEnv): Launch {
  const extra = cfg.serverArgs.filter((a) => a !== "--stdio");
  const serverPath = cfg.serverPath.trim();
  const pythonPath = cfg.pythonPath.trim();
  if (serverPath) {
    return { command: expandHome(serverPath), args: [...extra, "--stdio"], source: "serverPath", python: false };
  }
  if (pythonPath) {
    return { command: expandHome(pythonPath), args: ["-m", "dspark_lsp.cli", ...extra, "--stdio"], source: "pythonPath", python: true };
  }
  const onPath = env.which("dspark-lsp");
  if (onPath) {
    return { command: onPath, args: [...extra, "--stdio"], source: "PATH", python: false };
  }
  const python = env.platform === "win32" ? "python" : "python3";
  return { command: python, args: ["-m", "dspark_lsp.cli", ...extra, "--stdio"], source: "default python", python: true };
}

/** A `which` on the real PATH (PATHEXT-aware on Windows). */
export function which(name: string, envPath = process.env.PATH ?? "", platform = process.platform): string | undefined {
  const exts = platform === "win32" ? (process.env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";") : [""];
  for (const dir of envPath.split(path.delimiter)) {
    if (!dir) {
      continue;
    }
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        if (fs.statSync(candidate).isFile()) {
          return candidate;
        }
      } catch {
        // not here: try the next directory
      }
    }
  }
  return undefined;
}

export const INSTALL_HINT =
  "Install the server with `pip install dspark-lsp` (or `pip install -e .` in a dspark-lsp checkout), " +
  "then set `dspark.pythonPath` to that Python or `dspark.serverPath` to its `dspark-lsp` executable.";

export type ProbeResult = { ok: true } | { ok: false; message: string };

/** Runs a short command and reports its exit code, or the spawn error (ENOENT, EACCES...). */
function runQuiet(command: string, args: string[], timeoutMs: number): Promise<{ code: number | null; error?: NodeJS.ErrnoException; stderr: string }> {
  return new Promise((resolve) => {
    let stderr = "";
    let settled = false;
    const finish = (r: { code: number | null; error?: NodeJS.ErrnoException; stderr: string }): void => {
      if (!settled) {
        settled = true;
        resolve(r);
      }
    };
    let child;
    try {
      child = spawn(command, args, { stdio: ["ignore", "ignore", "pipe"], timeout: timeoutMs });
    } catch (e) {
      finish({ code: null, error: e as NodeJS.ErrnoException, stderr: "" });
      return;
    }
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("error", (error: NodeJS.ErrnoException) => finish({ code: null, error, stderr }));
    child.on("close", (code) => finish({ code, stderr }));
  });
}

/**
 * Checks that the launch can work: the executable exists, and for a Python launch that it can import
 * `dspark_lsp` (only the package's `__init__`, so this costs well under a second, no model loading).
 */
export async function probeLaunch(launch: Launch, timeoutMs = 15000): Promise<ProbeResult> {
  if (launch.python) {
    const r = await runQuiet(launch.command, ["-c", "import dspark_lsp"], timeoutMs);
    if (r.error?.code === "ENOENT") {
      return { ok: false, message: `Python interpreter not found: ${launch.command} (from ${launch.source}). ${INSTALL_HINT}` };
    }
    if (r.error) {
      return { ok: false, message: `Cannot run ${launch.command}: ${r.error.message}. ${INSTALL_HINT}` };
    }
    if (r.code !== 0) {
      return { ok: false, message: `The DSpark server is not installed in ${launch.command} (import dspark_lsp failed). ${INSTALL_HINT}` };
    }
    return { ok: true };
  }
  try {
    fs.accessSync(launch.command, fs.constants.X_OK);
  } catch {
    return { ok: false, message: `DSpark server not found or not executable: ${launch.command} (from ${launch.source}). ${INSTALL_HINT}` };
  }
  return { ok: true };
}
