"""Every hole whose service answer is empty while the oracle cut is not: context, raw output, oracle cut,
and the rule that emptied it. Run from the repository root:
    python bench/results/2026-12-02-s14-eval/empties.py DIR single,multi,span
where DIR holds <set>.json rescored reports (e.g. copies of this folder's <set>-rescored.json)."""

import inspect
import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from dspark_lsp.bench.prompts import find_humaneval_dir
from dspark_lsp.evaluation.problems import load_problems
from dspark_lsp.models.loader import resolve_model
from dspark_lsp.models.registry import pair_for
from dspark_lsp.service import decide_scope
from dspark_lsp.syntax import Scope, SyntaxDocument, detect_language
from dspark_lsp.syntax import stops as _st

_orig = _st.StopRules._cut_before_line
FIRED = []


def _traced(self):
    fr = inspect.stack()[1]
    FIRED.append(
        f"{fr.function}:{fr.lineno}: {fr.code_context[0].strip()[:90]} [before_header={self._before_header}]"
    )
    return _orig(self)


_st.StopRules._cut_before_line = _traced

res_dir = sys.argv[1]
sets = sys.argv[2].split(",")
only = sys.argv[3] if len(sys.argv) > 3 else None
tok = None
for s in sets:
    saved = json.load(open(f"bench/results/2026-12-01-s10-eval/{s}.json"))
    cur = json.load(open(f"{res_dir}/{s}.json"))
    st = saved["settings"]
    sc = st["service"]
    if tok is None:
        tok = AutoTokenizer.from_pretrained(
            str(resolve_model(pair_for(sc["model"], sc.get("draft_model")).target, sc.get("cache_dir")))
        )
    probs = {
        (p.set, p.id): p
        for p in load_problems(
            Path(st["humaneval"]) if st.get("humaneval") else find_humaneval_dir("auto"),
            st["sets"],
            None,
            st["limit"],
            st["seed"],
        )
    }
    raw_by = {p["id"]: p for p in saved["problems"]}
    n = 0
    for item in cur["problems"]:
        a = item["attempts"]
        if a["service"]["text"].strip() or not a["oracle_cut"]["text"].strip():
            continue
        if only and only not in item["id"]:
            continue
        n += 1
        p = probs[(item["set"], item["id"])]
        raw_ids = raw_by[item["id"]]["raw_ids"]
        doc = SyntaxDocument(p.text, detect_language(p.path, p.language if p.language != "plain" else None))
        scope = decide_scope(doc, p.offset, sc["multiline"])
        print("=" * 100)
        print(
            f"{s} {item['id']}  scope={scope.value} oracle_passed={a['oracle_cut']['passed']} raw_passed={a['raw']['passed']}"
        )
        ls = p.text.rfind("\n", 0, p.offset) + 1
        before = p.text[: p.offset].split("\n")[-5:]
        after = p.text[p.offset :].split("\n")[:4]
        print("--- context (| = cursor)")
        print("\n".join(before[:-1]))
        print(before[-1] + "|" + after[0])
        print("\n".join(after[1:]))
        print("--- reference:", repr(p.reference[:200]))
        full = tok.decode(
            raw_ids[: sc["max_new_tokens"]], skip_special_tokens=False, clean_up_tokenization_spaces=False
        ).rstrip("\ufffd")
        print("--- raw first lines:", repr("\n".join(full.split("\n")[:6])[:400]))
        print("--- oracle:", repr(a["oracle_cut"]["text"][:300]))
        if scope is Scope.NONE:
            print("--- CAUSE: scope none")
            continue
        tr = doc.generation(p.offset, scope, continue_lines=sc["multiline"] == "auto")
        capped = len(raw_ids) > sc["max_new_tokens"]
        FIRED.clear()
        cut = tr.stop_index(full, final=True, capped=capped)
        print("--- fired:", FIRED[-3:])
        pre = full if cut is None else full[:cut]
        print(f"--- cut={cut} tracker_scope={tr.scope.value} capped={capped} pre_clean={pre[:200]!r}")
        if not pre.strip():
            print("--- CAUSE: stop rule cut to empty")
        else:
            print(
                "--- CAUSE: clean-up emptied",
                repr(pre[:100]),
                "line_after=",
                repr(p.text[p.offset :].split("\n", 1)[0]),
            )
    print(f"##### {s}: {n} empty-but-oracle-not")
