// Formats the reply of the `dspark/stats` request as a Markdown document for the "Show Stats" command.
// The server owns the shape of the figures (each completion's: dspark_lsp/contract.py, CompletionStats and
// ServiceRecord, one wire form); this renders any list of flat records as a table and anything else as
// JSON, so a new field on the server shows up without a client release.

function cell(v: unknown): string {
  if (typeof v === "number") {
    return Number.isInteger(v) ? String(v) : v.toFixed(3);
  }
  if (v === null || v === undefined) {
    return "";
  }
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

function table(rows: Record<string, unknown>[]): string {
  const columns: string[] = [];
  for (const row of rows) {
    for (const key of Object.keys(row)) {
      if (!columns.includes(key)) {
        columns.push(key);
      }
    }
  }
  const head = `| ${columns.join(" | ")} |`;
  const rule = `| ${columns.map(() => "---").join(" | ")} |`;
  const body = rows.map((r) => `| ${columns.map((c) => cell(r[c])).join(" | ")} |`);
  return [head, rule, ...body].join("\n");
}

function isRecordList(v: unknown): v is Record<string, unknown>[] {
  return Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === "object" && x !== null && !Array.isArray(x));
}

export function formatStats(raw: unknown): string {
  const out: string[] = ["# DSpark stats", ""];
  if (raw === null || raw === undefined) {
    out.push("The server returned no stats yet.");
    return out.join("\n");
  }
  if (isRecordList(raw)) {
    out.push(table(raw));
    return out.join("\n");
  }
  if (typeof raw === "object" && !Array.isArray(raw)) {
    const rest: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(raw as Record<string, unknown>)) {
      if (isRecordList(value)) {
        out.push(`## ${key}`, "", table(value), "");
      } else {
        rest[key] = value;
      }
    }
    if (Object.keys(rest).length > 0) {
      out.push("## summary", "", "```json", JSON.stringify(rest, null, 2), "```");
    }
    return out.join("\n").trimEnd();
  }
  out.push("```json", JSON.stringify(raw, null, 2), "```");
  return out.join("\n");
}
