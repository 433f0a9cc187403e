"""The HTML page of validation samples: one table per validation step with source, reference and
translation, xCOMET error spans highlighted by severity, sortable by clicking a column header.

Each sample is one line of verl's validation dump (`<validation_data_dir>/<step>.jsonl`): `input`
(decoded prompt), `output` (decoded response), `gts` (reference), `score`, plus whatever the reward
function returned in its dict. Read from that dict when present: `src`, `translation` (the text that
was scored; span offsets point into it) and `error_spans` (xCOMET spans, a JSON string or a list of
{start, end, severity, text, confidence}); otherwise the source is recovered from the prompt and
the translation from the `<translate>` tag of the response. With reward.credit=token, `credit_tokens`
adds a line under the translation with its tokens coloured by the penalty each gets in training.

Every piece of text from the run goes through html.escape: model outputs are arbitrary strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from src.data.templates import parse_prompt, translation_of
from src.scorer.backends import SCALES
from src.scorer.vocabulary import SEVERITIES

LIGHTEST = SEVERITIES[0]  # what a span with no (or an unknown) severity is shown as
# Keys of a dump line that are not reward components.
_NOT_COMPONENTS = {"step", "score", "reward", "acc", "uid", "index"}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    severity: str
    confidence: float | None = None


def parse_spans(raw) -> list[dict]:
    """`error_spans` as the reward function stored it: a JSON string (verl's validation metrics
    skip strings but average any other value, so a list per sample would break them) or a list."""
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return []
    return [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []


def place_spans(mt: str, spans: list[dict]) -> tuple[list[Span], list[dict]]:
    """Spans with trusted offsets into `mt`, and the ones that could not be placed.

    Offsets are trusted when they are in range and, if the span carries its text, match it (xCOMET
    offsets include a leading space, hence the strip). A span whose offsets do not match is placed
    at the first occurrence of its text that no trusted span covers. Overlaps are then cut so no
    character is in two marks."""
    resolved: list[tuple[int, int, dict]] = []
    searched: list[dict] = []
    unplaced: list[dict] = []
    for raw in spans:
        text, start, end = raw.get("text"), raw.get("start"), raw.get("end")
        ok = isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(mt)
        if ok and text is not None and mt[start:end].strip() != str(text).strip():
            ok = False
        if ok:
            resolved.append((start, end, raw))
        elif text and str(text).strip():
            searched.append(raw)
        else:
            unplaced.append(raw)
    for raw in searched:
        needle = str(raw["text"]).strip()
        idx = mt.find(needle)
        while idx >= 0 and any(s < idx + len(needle) and idx < e for s, e, _ in resolved):
            idx = mt.find(needle, idx + 1)
        if idx >= 0:
            resolved.append((idx, idx + len(needle), raw))
        else:
            unplaced.append(raw)

    placed: list[Span] = []
    for start, end, raw in sorted(resolved, key=lambda r: (r[0], r[1])):
        if placed and start < placed[-1].end:
            start = placed[-1].end
            if start >= end:
                continue
        sev = str(raw.get("severity", LIGHTEST)).lower()
        conf = raw.get("confidence")
        placed.append(Span(start, end, sev if sev in SEVERITIES else LIGHTEST,
                           float(conf) if isinstance(conf, (int, float)) else None))
    return placed, unplaced


def highlight(mt: str, spans: list[dict]) -> str:
    """`mt` as HTML with <mark class="sev-..."> around each placed span."""
    placed, unplaced = place_spans(mt, spans)
    out, pos = [], 0
    for s in placed:
        out.append(escape(mt[pos:s.start]))
        title = s.severity + (f" ({s.confidence:.2f})" if s.confidence is not None else "")
        out.append(f'<mark class="sev-{s.severity}" title="{escape(title)}">{escape(mt[s.start:s.end])}</mark>')
        pos = s.end
    out.append(escape(mt[pos:]))
    html = "".join(out)
    if unplaced:
        items = ", ".join(
            f'<span class="sev-{escape(str(u.get("severity", LIGHTEST)).lower())}">'
            f'{escape(str(u.get("text", "")))}</span>'
            for u in unplaced
        )
        html += f'<div class="unplaced">spans not found in the text: {items}</div>'
    return html


def credit_html(output: str, translation: str | None, raw) -> str:
    """The translation's tokens coloured by token-level credit (reward.credit=token): `raw` is the
    agent loop's `credit_tokens` JSON, [[start, end, penalty], ...] in characters of the decoded
    response `output` (src/rewards/credit/agent_loop.py); the redder, the larger the penalty the
    token gets in training. "" when there is nothing to show."""
    if not isinstance(raw, str) or not raw or not translation:
        return ""
    try:
        toks = [t for t in json.loads(raw) if isinstance(t, list) and len(t) == 3]
    except json.JSONDecodeError:
        return ""
    open_at = output.find("<translate>")
    at = output.find(translation, open_at if open_at >= 0 else 0)
    if at < 0 or not toks:
        return ""
    end = at + len(translation)
    worst = max((-float(p) for _, _, p in toks), default=0.0) or 1.0
    parts = []
    for s, e, p in toks:
        s, e = max(int(s), at), min(int(e), end)
        if s >= e:
            continue
        alpha = min(1.0, -float(p) / worst) if p < 0 else 0.0
        parts.append(f'<span class="tok" style="background: rgba(230, 40, 40, {alpha:.2f})" '
                     f'title="{float(p):g}">{escape(output[s:e])}</span>')
    return f'<div class="credit">token credit: {"".join(parts)}</div>' if parts else ""


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sample_view(rec: dict) -> dict:
    parsed = parse_prompt(str(rec.get("input", "")))
    src = rec.get("src") if isinstance(rec.get("src"), str) else (parsed[0] if parsed else str(rec.get("input", "")))
    if isinstance(rec.get("lang_pair"), str):
        direction = rec["lang_pair"]
    else:
        direction = f"{parsed[1]}-{parsed[2]}" if parsed else ""
    output = str(rec.get("output", ""))
    given = rec.get("translation")
    # An empty `translation` from the reward function means it found none; say so, from the response.
    translation = given if isinstance(given, str) and given else translation_of(output)
    components = {
        k: _number(v) for k, v in rec.items() if k not in _NOT_COMPONENTS and _number(v) is not None
    }
    return {
        "src": src,
        "direction": direction,
        "ref": "" if rec.get("gts") is None else str(rec["gts"]),
        "output": output,
        "translation": translation,
        "spans": parse_spans(rec.get("error_spans")),
        "credit": credit_html(output, translation, rec.get("credit_tokens")),
        "score": _number(rec.get("score")),
        "components": components,
    }


def _row(i: int, v: dict) -> str:
    score = v["score"]
    if v["translation"] is None:
        mt_html = '<span class="missing">no &lt;translate&gt; tag</span>'
    else:
        mt_html = highlight(v["translation"], v["spans"]) + v.get("credit", "")
    # a component on a scale of its own says it (a backend's own metric, logged raw)
    comps = "<br>".join(f"{escape(k)}: {val:.3f}" + (f" ({SCALES[k].describe()})" if k in SCALES else "")
                        for k, val in v["components"].items())
    return (
        "<tr>"
        f'<td data-sort="{i}">{i}</td>'
        f'<td data-sort="{escape(v["direction"])}">{escape(v["direction"])}</td>'
        f'<td data-sort="{score if score is not None else ""}" class="num">'
        f'{"" if score is None else f"{score:.4f}"}</td>'
        f'<td class="text">{escape(v["src"])}</td>'
        f'<td class="text">{escape(v["ref"])}</td>'
        f'<td class="text">{mt_html}<details><summary>full response</summary><pre>{escape(v["output"])}</pre>'
        "</details></td>"
        f'<td class="comps">{comps}</td>'
        "</tr>"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; }
table.samples { border-collapse: collapse; width: 100%; font-size: 13px; }
table.samples th, table.samples td { border: 1px solid #ddd; padding: 4px 6px; vertical-align: top; }
table.samples th { background: #f4f4f4; cursor: pointer; position: sticky; top: 0; }
table.samples th.sorted-asc::after { content: " \\25B2"; } table.samples th.sorted-desc::after { content: " \\25BC"; }
td.text { white-space: pre-wrap; max-width: 28em; } td.num { text-align: right; }
td.comps { font-size: 11px; color: #444; white-space: nowrap; }
.unplaced { font-size: 11px; color: #a00; } .missing { color: #a00; font-style: italic; }
details pre { white-space: pre-wrap; font-size: 11px; background: #fafafa; }
.legend mark { padding: 0 4px; }
.credit { font-size: 12px; margin-top: 4px; } .credit .tok { border: 1px solid #eee; margin-right: 1px; }
"""
# one mark colour per severity, lightest first (SEVERITIES' order): yellow, orange, red
SEVERITY_COLOURS = ("#fff3a3", "#ffc48a", "#ff8a8a")
_STYLE += "".join(f"mark.sev-{sev} {{ background: {colour}; }}\n"
                  for sev, colour in zip(SEVERITIES, SEVERITY_COLOURS, strict=True))

# Click a header to sort its table by that column (numbers numerically); click again to reverse.
SORT_SCRIPT = """
document.querySelectorAll("table.samples th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), tbody = table.tBodies[0], col = th.cellIndex;
    var asc = !th.classList.contains("sorted-asc");
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(asc ? "sorted-asc" : "sorted-desc");
    var key = function (tr) {
      var v = tr.cells[col].getAttribute("data-sort"); if (v === null) v = tr.cells[col].textContent;
      var n = parseFloat(v); return isNaN(n) ? v : n;
    };
    Array.from(tbody.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      var c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return asc ? c : -c;
    }).forEach(function (tr) { tbody.appendChild(tr); });
  });
});
"""

HEADERS = ["#", "direction", "score", "source", "reference", "translation (error spans)", "components"]


def render_samples_page(val_samples: dict[int, list[dict]], title: str, max_per_step: int | None = None,
                        empty_reason: str = "trainer.validation_data_dir was not set") -> str:
    """The whole page; the latest step first and open, earlier steps collapsed. `empty_reason`: why
    there are no samples, when there are none (src/report/run_files.py no_val_samples_reason)."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        '<p class="legend">xCOMET error spans: '
        + " ".join(f'<mark class="sev-{sev}">{sev}</mark>' for sev in SEVERITIES)
        + " (hover a span for its confidence). Click a column header to sort.</p>",
    ]
    if not val_samples:
        parts.append(f"<p>No validation generations in this run ({escape(empty_reason)}).</p>")
    steps = sorted(val_samples, reverse=True)
    if steps:
        links = " ".join(f'<a href="#step-{s}">{s}</a>' for s in steps)
        parts.append(f"<p>Steps: {links}</p>")
    for n, step in enumerate(steps):
        records = val_samples[step][:max_per_step] if max_per_step else val_samples[step]
        views = [_sample_view(r) for r in records]
        scores = [v["score"] for v in views if v["score"] is not None]
        mean = f", mean score {sum(scores) / len(scores):.4f}" if scores else ""
        head = "".join(f"<th>{escape(h)}</th>" for h in HEADERS)
        rows = "\n".join(_row(i, v) for i, v in enumerate(views))
        parts.append(
            f'<details id="step-{step}"{" open" if n == 0 else ""}><summary><b>Step {step}</b> '
            f"({len(views)} samples{mean})</summary>"
            f'<table class="samples"><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table></details>'
        )
    parts.append(f"<script>{SORT_SCRIPT}</script></body></html>")
    return "\n".join(parts)
