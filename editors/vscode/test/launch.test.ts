import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { probeLaunch, resolveLaunch, which } from "../src/launch";

const none = { platform: "linux" as NodeJS.Platform, which: () => undefined };
const onPath = { platform: "linux" as NodeJS.Platform, which: (n: string) => (n === "dspark-lsp" ? "/usr/bin/dspark-lsp" : undefined) };

test("serverPath wins and gets --stdio once, after the extra args", () => {
  const l = resolveLaunch({ serverPath: "/opt/dspark-lsp", pythonPath: "/usr/bin/python3", serverArgs: ["--log-level", "debug", "--stdio"] }, onPath);
  assert.deepEqual([l.command, l.args, l.source, l.python], ["/opt/dspark-lsp", ["--log-level", "debug", "--stdio"], "serverPath", false]);
});

test("pythonPath runs the module", () => {
  const l = resolveLaunch({ serverPath: " ", pythonPath: "/venv/bin/python", serverArgs: [] }, onPath);
  assert.deepEqual([l.command, l.args, l.python], ["/venv/bin/python", ["-m", "dspark_lsp.cli", "--stdio"], true]);
});

test("then dspark-lsp on PATH, then the default python", () => {
  assert.equal(resolveLaunch({ serverPath: "", pythonPath: "", serverArgs: [] }, onPath).command, "/usr/bin/dspark-lsp");
  const l = resolveLaunch({ serverPath: "", pythonPath: "", serverArgs: [] }, none);
  assert.deepEqual([l.command, l.source], ["python3", "default python"]);
  assert.equal(resolveLaunch({ serverPath: "", pythonPath: "", serverArgs: [] }, { ...none, platform: "win32" }).command, "python");
});

test("~ is expanded", () => {
  const l = resolveLaunch({ serverPath: "~/bin/dspark-lsp", pythonPath: "", serverArgs: [] }, none);
  assert.equal(l.command, path.join(os.homedir(), "bin/dspark-lsp"));
});

test("which finds executables only", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-which-"));
  fs.writeFileSync(path.join(dir, "tool"), "#!/bin/sh\n", { mode: 0o755 });
  fs.writeFileSync(path.join(dir, "plain"), "", { mode: 0o644 });
  assert.equal(which("tool", dir, "linux"), path.join(dir, "tool"));
  assert.equal(which("plain", dir, "linux"), undefined);
  assert.equal(which("missing", dir, "linux"), undefined);
});

test("probe: a missing executable gives the install hint", async () => {
  const r = await probeLaunch({ command: "/nonexistent/dspark-lsp", args: ["--stdio"], source: "serverPath", python: false });
  assert.equal(r.ok, false);
  assert.ok(!r.ok && /not found or not executable: \/nonexistent\/dspark-lsp/.test(r.message) && /pip install dspark-lsp/.test(r.message));
});

test("probe: a missing python interpreter is named", async () => {
  const r = await probeLaunch({ command: "/nonexistent/python3", args: [], source: "pythonPath", python: true });
  assert.ok(!r.ok && /Python interpreter not found: \/nonexistent\/python3/.test(r.message));
});

test("probe: python without the package vs with it", async () => {
  const python = which("python3");
  if (!python) {
    return; // no interpreter on this machine: nothing to probe
  }
  const launch = { command: python, args: [], source: "pythonPath" as const, python: true };
  const saved = process.env.PYTHONPATH;
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-nopkg-"));
  const fake = fs.mkdtempSync(path.join(os.tmpdir(), "dspark-pkg-"));
  fs.mkdirSync(path.join(fake, "dspark_lsp"));
  fs.writeFileSync(path.join(fake, "dspark_lsp", "__init__.py"), "");
  try {
    // -I would also hide PYTHONPATH; the probe inherits the environment, like the real server start.
    process.env.PYTHONPATH = empty;
    const withoutPkg = await probeLaunch({ ...launch, command: python });
    process.env.PYTHONPATH = fake;
    const withPkg = await probeLaunch(launch);
    assert.deepEqual(withPkg, { ok: true });
    // The machine may have dspark_lsp installed globally; only assert the negative case when it does not.
    if (!withoutPkg.ok) {
      assert.match(withoutPkg.message, /not installed in .*import dspark_lsp failed/);
    }
  } finally {
    process.env.PYTHONPATH = saved;
    if (saved === undefined) {
      delete process.env.PYTHONPATH;
    }
  }
});
