import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import {
  actionForChange,
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
    kMin: 1, kMax: 5, alternates: 3, maxNewTokens: 64, contextWindow: 256, prefixShare: 0.75, relaxed: false,
    debounceMs: 150, multiline: "auto",
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
  const s = { ...DEFAULT_SETTINGS, model: "m" };
  assert.equal(initializationOptions(s).model, "m");
  assert.deepEqual(didChangeConfigurationParams(s), { settings: { dspark: s } });
});

test("launch settings restart the server; server settings are forwarded; others ignored", () => {
  const affects = (changed: string[]) => (section: string) => changed.includes(section);
  assert.equal(actionForChange(affects(["dspark.pythonPath"])), "restart");
  assert.equal(actionForChange(affects(["dspark.serverArgs", "dspark.model"])), "restart");
  assert.equal(actionForChange(affects(["dspark.threshold"])), "forward");
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
    [0.9, 64, 256, 0.75, 150],
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
