/**
 * A typed command-line argument parser.
 *
 * Options are declared once with their type, default and help text; `parse`
 * returns a plain object with the parsed values plus the positional arguments.
 * Supports `--name value`, `--name=value`, `-n value`, grouped short flags
 * (`-abc`), `--no-flag` negation, repeated list options and `--` to stop parsing.
 */

export type OptionType = "string" | "number" | "boolean" | "list";

export interface OptionSpec {
  name: string;
  short?: string;
  type: OptionType;
  help: string;
  default?: string | number | boolean | string[];
  required?: boolean;
  choices?: readonly string[];
}

export type ParsedValue = string | number | boolean | string[] | undefined;

export interface ParseResult {
  options: Record<string, ParsedValue>;
  positionals: string[];
}

export class ArgumentError extends Error {
  constructor(message: string, public readonly option?: string) {
    super(message);
    this.name = "ArgumentError";
  }
}

export class ArgumentParser {
  private readonly specs = new Map<string, OptionSpec>();
  private readonly shortNames = new Map<string, string>();

  constructor(private readonly program: string, private readonly description = "") {
    this.option({ name: "help", short: "h", type: "boolean", help: "show this help and exit" });
  }

  option(spec: OptionSpec): this {
    if (this.specs.has(spec.name)) {
      throw new ArgumentError(`option --${spec.name} declared twice`, spec.name);
    }
    if (spec.short !== undefined) {
      if (spec.short.length !== 1) {
        throw new ArgumentError(`short name for --${spec.name} must be one character`, spec.name);
      }
      if (this.shortNames.has(spec.short)) {
        throw new ArgumentError(`short option -${spec.short} declared twice`, spec.name);
      }
      this.shortNames.set(spec.short, spec.name);
    }
    this.specs.set(spec.name, spec);
    return this;
  }

  parse(argv: readonly string[]): ParseResult {
    const options: Record<string, ParsedValue> = {};
    const positionals: string[] = [];

    for (const spec of this.specs.values()) {
      if (spec.default !== undefined) {
        options[spec.name] = Array.isArray(spec.default) ? [...spec.default] : spec.default;
      } else if (spec.type === "boolean") {
        options[spec.name] = false;
      } else if (spec.type === "list") {
        options[spec.name] = [];
      }
    }

    let i = 0;
    const takeValue = (name: string, inline?: string): string => {
      if (inline !== undefined) return inline;
      i += 1;
      if (i >= argv.length) {
        throw new ArgumentError(`option --${name} expects a value`, name);
      }
      return argv[i];
    };

    for (; i < argv.length; i++) {
      const arg = argv[i];
      if (arg === "--") {
        positionals.push(...argv.slice(i + 1));
        break;
      }
      if (arg.startsWith("--")) {
        const eq = arg.indexOf("=");
        let name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
        const inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
        let negated = false;
        if (!this.specs.has(name) && name.startsWith("no-")) {
          name = name.slice(3);
          negated = true;
        }
        const spec = this.lookup(name);
        if (spec.type === "boolean") {
          if (inline !== undefined) {
            throw new ArgumentError(`flag --${name} does not take a value`, name);
          }
          options[name] = !negated;
        } else if (negated) {
          throw new ArgumentError(`only flags can be negated, not --${name}`, name);
        } else {
          this.assign(options, spec, takeValue(name, inline));
        }
      } else if (arg.startsWith("-") && arg.length > 1) {
        const letters = arg.slice(1);
        for (let j = 0; j < letters.length; j++) {
          const name = this.shortNames.get(letters[j]);
          if (name === undefined) {
            throw new ArgumentError(`unknown option -${letters[j]}`);
          }
          const spec = this.lookup(name);
          if (spec.type === "boolean") {
            options[name] = true;
            continue;
          }
          // The rest of the group, if any, is the value: -n5 or -n 5.
          const rest = letters.slice(j + 1);
          this.assign(options, spec, takeValue(name, rest.length > 0 ? rest : undefined));
          break;
        }
      } else {
        positionals.push(arg);
      }
    }

    if (options.help === true) {
      return { options, positionals };
    }
    for (const spec of this.specs.values()) {
      if (spec.required && options[spec.name] === undefined) {
        throw new ArgumentError(`missing required option --${spec.name}`, spec.name);
      }
    }
    return { options, positionals };
  }

  private lookup(name: string): OptionSpec {
    const spec = this.specs.get(name);
    if (spec === undefined) {
      throw new ArgumentError(`unknown option --${name}`, name);
    }
    return spec;
  }

  private assign(options: Record<string, ParsedValue>, spec: OptionSpec, raw: string): void {
    if (spec.choices && !spec.choices.includes(raw)) {
      throw new ArgumentError(
        `invalid value '${raw}' for --${spec.name} (choose from ${spec.choices.join(", ")})`,
        spec.name,
      );
    }
    switch (spec.type) {
      case "number": {
        const value = Number(raw);
        if (raw.trim() === "" || Number.isNaN(value)) {
          throw new ArgumentError(`--${spec.name} expects a number, got '${raw}'`, spec.name);
        }
        options[spec.name] = value;
        break;
      }
      case "list": {
        const current = options[spec.name];
        const list = Array.isArray(current) ? current : [];
        list.push(...raw.split(",").filter((part) => part.length > 0));
        options[spec.name] = list;
        break;
      }
      default:
        options[spec.name] = raw;
    }
  }

  help(): string {
    const lines = [`usage: ${this.program} [options] [args...]`];
    if (this.description) lines.push("", this.description);
    lines.push("", "options:");
    const rows: Array<[string, string]> = [];
    for (const spec of this.specs.values()) {
      const flag = (spec.short ? `-${spec.short}, ` : "    ") + `--${spec.name}`;
      const value = spec.type === "boolean" ? "" : ` <${spec.type}>`;
      let text = spec.help;
      if (spec.choices) text += ` [${spec.choices.join("|")}]`;
      if (spec.default !== undefined) text += ` (default: ${String(spec.default)})`;
      rows.push([flag + value, text]);
    }
    const width = Math.max(...rows.map(([left]) => left.length));
    for (const [left, right] of rows) {
      lines.push(`  ${left.padEnd(width)}  ${right}`);
    }
    return lines.join("\n");
  }
}

export function main(argv: string[]): number {
  const parser = new ArgumentParser("resize", "Resize images in a folder.")
    .option({ name: "width", short: "w", type: "number", help: "target width", required: true })
    .option({ name: "format", short: "f", type: "string", help: "output format", default: "png", choices: ["png", "jpeg", "webp"] })
    .option({ name: "exclude", short: "x", type: "list", help: "glob to skip (repeatable)" })
    .option({ name: "verbose", short: "v", type: "boolean", help: "print each file" });
  try {
    const { options, positionals } = parser.parse(argv);
    if (options.help) {
      console.log(parser.help());
      return 0;
    }
    console.log(JSON.stringify({ options, positionals }));
    return 0;
  } catch (err) {
    if (err instanceof ArgumentError) {
      console.error(`error: ${err.message}\n\n${parser.help()}`);
      return 2;
    }
    throw err;
  }
}
