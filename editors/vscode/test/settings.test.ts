import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { spawnSync } from "node:child_process";
import {
  actionForChange,
  BACKEND_KEYS,
  backendUrlProblem,
  ConfigReader,
  DEFAULT_SETTINGS,
  didChangeConfigurationParams,
  initializationOptions,
  readServerSettings,
  SERVER_KEYS,
} from "../src/settings";

function reader(values: Record<string, unknown>): ConfigReader {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

test("defaults match docs/ARCHITECTURE.md", () => {
  const { settings, problems } = readServerSettings(reader({}));
  assert.deepEqual(problems, []);
  assert.deepEqual(settings, {
    enable: true, model: "default", draftModel: null, device: "auto", dtype: "auto", packWeights: "auto", threshold: 0.9,
    kMin: 1, kMax: 5, alternates: 3, maxNewTokens: 64, quickAnswerMs: 200, contextWindow: 768, prefixShare: 0.9, contextBudget: 256,
    contextOpenFiles: false, contextDefinitions: true, contextDefinitionLanguages: "python,go", warmUp: true, relaxed: false,
    debounceMs: 150, multiline: "auto", backend: null,
  });
});

test("every server setting is declared in package.json with the same default", async () => {
  const pkg = (await import("node:fs")).readFileSync(`${__dirname}/../../package.json`, "utf8");
  const props = (JSON.parse(pkg) as { contributes: { configuration: { properties: Record<string, { default: unknown }> } } })
    .contributes.configuration.properties;
  for (const key of SERVER_KEYS) {
    assert.ok(props[`dspark.${key}`], `dspark.${key} missing from package.json`);
    assert.deepEqual(props[`dspark.${key}`].default, DEFAULT_SETTINGS[key], `default of dspark.${key}`);
  }
});

test("valid user values are passed through; client-only keys are not", () => {
  const { settings, problems } = readServerSettings(
    reader({ model: "/models/mine", draftModel: "ngram", threshold: 0.5, kMin: 2, kMax: 8, multiline: "never", serverPath: "/x" }),
  );
  assert.deepEqual(problems, []);
  assert.equal(settings.model, "/models/mine");
  assert.equal(settings.draftModel, "ngram");
  assert.equal(settings.threshold, 0.5);
  assert.equal(settings.kMin, 2);
  assert.equal(settings.kMax, 8);
  assert.equal(settings.multiline, "never");
  assert.ok(!("serverPath" in settings));
});

test("invalid values fall back to defaults with one clear problem each", () => {
  const { settings, problems } = readServerSettings(
    reader({ threshold: 1.5, kMax: 2.5, multiline: "sometimes", model: "", debounceMs: -1 }),
  );
  assert.equal(settings.threshold, 0.9);
  assert.equal(settings.kMax, 5);
  assert.equal(settings.multiline, "auto");
  assert.equal(settings.model, "default");
  assert.equal(settings.debounceMs, 150);
  assert.equal(problems.length, 5);
  assert.match(problems.find((p) => p.startsWith("dspark.threshold")) ?? "", /dspark\.threshold must be a number in \(0, 1\], got 1\.5; using 0\.9/);
});

test("kMin above kMax resets both", () => {
  const { settings, problems } = readServerSettings(reader({ kMin: 4, kMax: 2 }));
  assert.equal(settings.kMin, 1);
  assert.equal(settings.kMax, 5);
  assert.equal(problems.length, 1);
  assert.match(problems[0], /kMin \(4\) is above dspark\.kMax \(2\)/);
});

test("an empty draftModel string means the pair's draft (null)", () => {
  assert.equal(readServerSettings(reader({ draftModel: "  " })).settings.draftModel, null);
});

test("payloads: flat initializationOptions, didChangeConfiguration under dspark", () => {
  const s = { ...DEFAULT_SETTINGS, model: "m", backend: null };
  assert.equal(initializationOptions(s).model, "m");
  assert.deepEqual(didChangeConfigurationParams(s), { settings: { dspark: s } });
});

test("launch settings restart the server; server settings are forwarded; others ignored", () => {
  const affects = (changed: string[]) => (section: string) => changed.includes(section);
  assert.equal(actionForChange(affects(["dspark.pythonPath"])), "restart");
  assert.equal(actionForChange(affects(["dspark.serverArgs", "dspark.model"])), "restart");
  assert.equal(actionForChange(affects(["dspark.threshold"])), "forward");
  // VS Code reports a change of dspark.backend.url as affecting "dspark.backend" too.
  assert.equal(actionForChange(affects(["dspark.backend", "dspark.backend.url"])), "forward");
  assert.equal(actionForChange(affects(["editor.fontSize"])), "none");
});

test("the server's ranges (issue 15 drifts): bounds accepted, one step outside refused", () => {
  const accepted = { threshold: 1, maxNewTokens: 2048, contextWindow: 32768, prefixShare: 0.1, debounceMs: 5000 };
  assert.deepEqual(readServerSettings(reader(accepted)).problems, []);
  assert.deepEqual(readServerSettings(reader({ contextWindow: 32 })).problems, []);
  const refused = { threshold: 0, maxNewTokens: 4096, contextWindow: 16, prefixShare: 0, debounceMs: 10000 };
  const { settings, problems } = readServerSettings(reader(refused));
  assert.equal(problems.length, 5);
  assert.deepEqual(
    [settings.threshold, settings.maxNewTokens, settings.contextWindow, settings.prefixShare, settings.debounceMs],
    [0.9, 64, 768, 0.9, 150],
  );
});

test("package.json's configuration agrees with these checks and defaults", () => {
  // package.json is generated from the server's schema (python -m dspark_lsp.lsp.settings_schema);
  // here the extension's own checks are held against it at every declared bound.
  type Package = { contributes: { configuration: { properties: Record<string, Record<string, unknown>> } } };
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8")) as Package;
  const props = pkg.contributes.configuration.properties;
  for (const key of SERVER_KEYS) {
    const prop = props[`dspark.${key}`];
    assert.ok(prop, `package.json lacks dspark.${key}`);
    assert.deepEqual(prop.default, DEFAULT_SETTINGS[key], `default of dspark.${key}`);
    // kMin is probed with kMax at its top, so only the bound under test can be refused.
    const others = key === "kMin" ? { kMax: 16 } : {};
    const check = (value: unknown): boolean => readServerSettings(reader({ ...others, [key]: value })).problems.length === 0;
    const step = prop.type === "integer" ? 1 : 0.01;
    if (typeof prop.minimum === "number") {
      assert.ok(check(prop.minimum) && !check(prop.minimum - step), `minimum of dspark.${key}`);
    }
    if (typeof prop.exclusiveMinimum === "number") {
      assert.ok(!check(prop.exclusiveMinimum) && check(prop.exclusiveMinimum + step), `exclusiveMinimum of dspark.${key}`);
    }
    if (typeof prop.maximum === "number") {
      assert.ok(check(prop.maximum) && !check(prop.maximum + step), `maximum of dspark.${key}`);
    }
    if (Array.isArray(prop.enum)) {
      for (const v of prop.enum) {
        assert.ok(check(v), `dspark.${key} = ${JSON.stringify(v)}`);
      }
      assert.ok(!check("surely-not-a-value"), `dspark.${key} accepts a value outside its enum`);
    }
  }
});

// ------------------------------------------------------------------------------------- backend (issue 18)
const backendDefaults = { model: null, apiKeyEnv: null, timeoutMs: 10000, stream: true, stopTokenIds: true, extraBody: {}, tokenizer: null };

test("backend: no URL is the local engine (null), whatever else is set", () => {
  assert.equal(readServerSettings(reader({})).settings.backend, null);
  const { settings, problems } = readServerSettings(reader({ "backend.url": "  ", "backend.model": "m", "backend.timeoutMs": 5 }));
  assert.deepEqual(problems, []);
  assert.equal(settings.backend, null);
});

test("backend: the dspark.backend.* settings become the server's backend object", () => {
  const { settings, problems } = readServerSettings(
    reader({
      "backend.url": "http://gpu-box:8000", "backend.model": "qwen2.5-coder-0.5b", "backend.apiKeyEnv": "DSPARK_API_KEY",
      "backend.timeoutMs": 2500, "backend.stream": false, "backend.extraBody": { top_k: 1 }, "backend.tokenizer": "",
    }),
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(settings.backend, {
    url: "http://gpu-box:8000", model: "qwen2.5-coder-0.5b", apiKeyEnv: "DSPARK_API_KEY", timeoutMs: 2500,
    stream: false, stopTokenIds: true, extraBody: { top_k: 1 }, tokenizer: null,
  });
  // Sent both ways, under the server's own names.
  assert.deepEqual(initializationOptions(settings).backend, settings.backend);
  assert.deepEqual(didChangeConfigurationParams(settings).settings.dspark.backend, settings.backend);
  // Empty strings (the settings UI's "unset") are null; the other fields take the server's defaults.
  assert.deepEqual(readServerSettings(reader({ "backend.url": "https://h/v1", "backend.model": "" })).settings.backend,
    { url: "https://h/v1", ...backendDefaults });
});

test("backend: a bad value is one clear warning naming the VS Code setting, and the local engine", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ "backend.url": "gpu-box:8000" }, 'dspark.backend.url must be an http:// or https:// URL with a host, got "gpu-box:8000"; using the local engine'],
    [{ "backend.url": "http://h:80x" }, 'dspark.backend.url is not a URL (port "80x" is not a number in [0, 65535]), got "http://h:80x"; using the local engine'],
    [{ "backend.url": "http://h/v1?x=1" }, "dspark.backend.url must not have a query or fragment"],
    [{ "backend.url": "http://h", "backend.timeoutMs": 50 }, "dspark.backend.timeoutMs must be an integer in [100, 600000] (milliseconds), got 50; using the local engine"],
    [{ "backend.url": "http://h", "backend.apiKeyEnv": "sk-123" }, 'dspark.backend.apiKeyEnv must be the name of an environment variable (letters, digits, _), not the key itself, got "sk-123"'],
    [{ "backend.url": "http://h", "backend.stream": "yes" }, 'dspark.backend.stream must be true or false, got "yes"'],
    [{ "backend.url": "http://h", "backend.extraBody": { prompt: "x", top_k: 1 } }, "dspark.backend.extraBody may not set prompt (the server sets them)"],
    [{ "backend.url": "http://h", "backend.extraBody": [1] }, "dspark.backend.extraBody must be an object, got [1]"],
    [{ "backend.url": "http://h", "backend.model": 3 }, "dspark.backend.model must be a string, got 3"],
  ];
  for (const [values, words] of cases) {
    const { settings, problems } = readServerSettings(reader(values));
    assert.equal(settings.backend, null, JSON.stringify(values));
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.ok(problems[0].startsWith(words), `${problems[0]}\n  should start with\n${words}`);
  }
});

test("backend: URL forms the server takes and refuses", () => {
  for (const ok of ["http://gpu-box:8000", "https://gpu-box/v1", "HTTP://10.0.0.2:8000/", "http://[::1]:8000", "http://user@h:1", "http://h:"]) {
    assert.equal(backendUrlProblem(ok), null, ok);
  }
  for (const bad of ["", "gpu-box:8000", "ftp://h", "http://", "http:/h", "http://:80", "http://h:99999", "http://h#top"]) {
    assert.notEqual(backendUrlProblem(bad), null, bad);
  }
});

/** The Python that has the repository's server package: the one ci.sh uses, else the checkout's venv. */
function python(): string | undefined {
  const repo = path.resolve(__dirname, "..", "..", "..", "..");
  for (const candidate of [process.env.PYTHON, path.join(repo, ".venv", "bin", "python"), "python3"]) {
    if (candidate && spawnSync(candidate, ["-c", "import dspark_lsp.remote.config"], { cwd: repo }).status === 0) {
      return candidate;
    }
  }
  return undefined;
}

test("backend: the extension accepts and refuses what the server's parse_backend does", (t) => {
  const repo = path.resolve(__dirname, "..", "..", "..", "..");
  const py = python();
  if (py === undefined) {
    t.skip("no Python with dspark_lsp importable");
    return;
  }
  const cases: Record<string, unknown>[] = [
    { url: "http://gpu-box:8000" }, { url: "gpu-box:8000" }, { url: "ftp://h" }, { url: "http://" }, { url: "http:/h" },
    { url: "http://h:99999" }, { url: "http://h:8x" }, { url: "http://h/v1?x" }, { url: "http://h#top" }, { url: "http://[::1]:8000/v1" },
    { url: "http://h", model: "m", apiKeyEnv: "DSPARK_KEY", timeoutMs: 100 }, { url: "http://h", timeoutMs: 600001 },
    { url: "http://h", timeoutMs: 99 }, { url: "http://h", timeoutMs: 1000.5 }, { url: "http://h", apiKeyEnv: "1ABC" },
    { url: "http://h", apiKeyEnv: "my key" }, { url: "http://h", stream: false, stopTokenIds: false }, { url: "http://h", stream: 1 },
    { url: "http://h", extraBody: { top_k: 1 } }, { url: "http://h", extraBody: { max_tokens: 3 } }, { url: "http://h", extraBody: { stream_options: {} } },
    { url: "http://h", extraBody: "x" }, { url: "http://h", tokenizer: "/models/tok" }, { url: "http://h", model: 7 },
  ];
  const script = [
    "import json, sys",
    "from dspark_lsp.remote.config import parse_backend",
    "print(json.dumps([parse_backend(v)[0] is not None for v in json.load(sys.stdin)]))",
  ].join("\n");
  const run = spawnSync(py, ["-c", script], { cwd: repo, input: JSON.stringify(cases), encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const server = JSON.parse(run.stdout) as boolean[];
  cases.forEach((value, i) => {
    const values = Object.fromEntries(Object.entries(value).map(([k, v]) => [`backend.${k}`, v]));
    const ours = readServerSettings(reader(values)).settings.backend !== null;
    assert.equal(ours, server[i], `${JSON.stringify(value)}: the server ${server[i] ? "accepts" : "refuses"} it, the extension does not`);
  });
});

test("backend: package.json declares every field as dspark.backend.<field>, with the defaults used here", () => {
  type Package = { contributes: { configuration: { properties: Record<string, Record<string, unknown>> } } };
  const props = (JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8")) as Package)
    .contributes.configuration.properties;
  const declared = Object.keys(props).filter((k) => k.startsWith("dspark.backend.")).map((k) => k.slice("dspark.backend.".length));
  assert.deepEqual(declared, [...BACKEND_KEYS]);
  for (const key of BACKEND_KEYS) {
    assert.ok(props[`dspark.backend.${key}`].description ?? props[`dspark.backend.${key}`].markdownDescription, `description of ${key}`);
  }
  // A URL plus every field at its package.json default gives the server's defaults.
  const values = Object.fromEntries(BACKEND_KEYS.map((k) => [`backend.${k}`, props[`dspark.backend.${k}`].default]));
  values["backend.url"] = "http://h";
  assert.deepEqual(readServerSettings(reader(values)).settings.backend, { url: "http://h", ...backendDefaults });
  // The URL pattern the settings UI checks agrees with ours on the usual mistakes.
  const pattern = new RegExp(props["dspark.backend.url"].pattern as string);
  for (const url of ["", "http://gpu-box:8000", "https://h/v1", "gpu-box:8000", "http:/h", "http://h?x"]) {
    assert.equal(pattern.test(url), url === "" || backendUrlProblem(url) === null, url);
  }
});
