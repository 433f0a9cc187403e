"""The report's pages in a real browser (issue 25 part 3): Debian's chromium, headless, driven from
the test over the DevTools protocol (`--remote-debugging-pipe`: JSON messages ending in NUL on fds
3 and 4, so the standard library is enough and no port is opened).

val_samples.html shows model outputs, which are untrusted text. A report is built with
`build_report` from a run whose validation generations carry markup meant to run script
(`<script>`, `<img onerror>`, a cell break `</td><b>`, attribute-breaking quotes, an error span over
markup, a hostile severity name). In the browser: no script but the page's own sorting script is
ever compiled (the debugger's scriptParsed events), the title is unchanged, the hostile strings are
the text of their cells and made no element, the error spans are `mark` elements with their
severity's colour, sorting works without an exception, and held_out.png decodes at its size. A
control page with the same payload written in unescaped shows the probe sees script that runs.

chromium is a CI requirement (`.ci/run` installs it): without it these tests fail, they never skip.
"""

from __future__ import annotations

import base64
import io

import pytest
from matplotlib.image import imread

from src.report import build_report
from src.report.samples_page import HEADERS, SEVERITY_COLOURS, SORT_SCRIPT
from src.scorer.vocabulary import SEVERITIES

from . import run_builder as rb
from .browser import png_size

PWNED = "pwned"
SCRIPT_T = "<script>document.title='pwned'</script>"
IMG_T = "<img src=x onerror=\"document.title='pwned'\"> today"
CELL_BREAK = "</td><b>bold</b><td>"
QUOTES = "\" onmouseover=\"document.title='pwned'\" x='"
SVG = "<svg onload=\"document.title='pwned'\">"
HOSTILE_SEVERITY = "minor\" onmouseover=\"document.title='pwned'"

# (direction, source, reference, response, reward extras) as run_builder.VAL_SAMPLES
HOSTILE_SAMPLES = [
    ("zh-en", "猫坐着。", "The cat sat.",
     "<think>ok</think><translate>The cat sat in the mat.</translate>",
     {"xcomet": 0.7, "format": 1.0, "translation": "The cat sat in the mat.",
      "error_spans": [{"text": " in", "confidence": 0.8, "severity": "major", "start": 11, "end": 14}]}),
    ("zh-en", f"来源 {CELL_BREAK}", f"ref {QUOTES}",
     f"<think><iframe src=\"javascript:document.title='pwned'\"></iframe></think><translate>{SCRIPT_T}</translate>",
     # an error span over the whole script tag
     {"xcomet": 0.1, "format": 1.0, "translation": SCRIPT_T,
      "error_spans": [{"text": SCRIPT_T, "confidence": 0.99, "severity": "critical",
                       "start": 0, "end": len(SCRIPT_T)}]}),
    ("en-zh", "Today.", "今天。",
     f"<think>{QUOTES}</think><translate>{IMG_T}</translate>",
     # a span inside the tag's attribute, and spans that cannot be placed (listed under the text)
     {"xcomet": 0.2, "format": 1.0, "translation": IMG_T,
      "error_spans": [{"text": "onerror", "confidence": 0.5, "severity": "minor", "start": 11, "end": 18},
                      {"text": SVG, "confidence": 0.5, "severity": HOSTILE_SEVERITY, "start": 90, "end": 99}]}),
    ("en-zh", "Nice weather.", "天气很好。",
     f"<think>{CELL_BREAK}</think><translate>天气不错 {CELL_BREAK}</translate>",
     {"xcomet": 0.9, "format": 1.0, "translation": f"天气不错 {CELL_BREAK}",
      "error_spans": [{"text": "不错", "confidence": 0.4, "severity": "minor", "start": 2, "end": 4}]}),
]
HOSTILE_TEXTS = [SCRIPT_T, IMG_T, CELL_BREAK, QUOTES]
VALIDATED_STEPS = len(range(0, rb.STEPS + 1, rb.TEST_FREQ))  # run_builder validates at step 0 and every TEST_FREQ


def rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory, tokenizer):
    """The report of a run (with held-out metrics: COMET-DA, and MetricX-24 on its own axis) whose
    validation generations are hostile."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rb, "VAL_SAMPLES", HOSTILE_SAMPLES)
        run = rb.build_run(tmp_path_factory.mktemp("runs") / "hostile-run", tokenizer, held_out=True,
                           metricx=True)
    return build_report(run)


@pytest.fixture(scope="module")
def samples(hostile_report, browser):
    return browser.open(hostile_report.files["val_samples"].resolve().as_uri())


def test_no_injected_script_runs(samples):
    # the one script the page compiled is its own sorting script; no handler attribute, no javascript: URL
    assert [s.strip() for s in samples.page_scripts()] == [SORT_SCRIPT.strip()]
    assert samples.eval("document.title") == "Validation samples: hostile-run"
    assert samples.errors() == []


def test_injected_markup_is_shown_as_text(samples):
    # no element the payloads name exists; the page's own <b> are the step headings only
    made = samples.eval("""[...document.querySelectorAll('img, iframe, svg, script:not(:last-of-type), b')]
        .filter(e => !(e.tagName === 'B' && e.parentElement.tagName === 'SUMMARY')).map(e => e.outerHTML)""")
    assert made == []
    assert samples.eval("document.scripts.length") == 1
    assert samples.eval("[...document.querySelectorAll('[onerror], [onload], [onmouseover]')].length") == 0
    # every row keeps its 7 cells: `</td>` in a translation broke no cell
    rows = samples.eval("[...document.querySelectorAll('table.samples tbody tr')].map(r => r.cells.length)")
    assert rows == [len(HEADERS)] * (len(HOSTILE_SAMPLES) * VALIDATED_STEPS)
    # the hostile strings are the text of their cells, as the model wrote them
    texts = samples.eval("[...document.querySelectorAll('details[open] td.text')].map(td => td.textContent)")
    for hostile in HOSTILE_TEXTS:
        assert any(hostile in t for t in texts), hostile
    src_cell, ref_cell = texts[3], texts[4]  # sample 1: source, reference
    assert src_cell == f"来源 {CELL_BREAK}" and ref_cell == f"ref {QUOTES}"


def test_error_spans_render_by_severity(samples):
    marks = samples.eval("""[...document.querySelectorAll('details[open] td mark')].map(m => ({
        cls: m.className, text: m.textContent, bg: getComputedStyle(m).backgroundColor,
        shown: m.getBoundingClientRect().width > 0}))""")
    assert [(m["cls"], m["text"]) for m in marks] == [
        ("sev-major", " in"), ("sev-critical", SCRIPT_T), ("sev-minor", "onerror"), ("sev-minor", "不错")]
    colours = dict(zip(SEVERITIES, SEVERITY_COLOURS, strict=True))
    for m in marks:
        assert m["shown"] and m["bg"] == rgb(colours[m["cls"][4:]]), m
    # the span that could not be placed is listed as text, its hostile severity kept inside the class
    unplaced = samples.eval("""[...document.querySelectorAll('details[open] .unplaced span')]
        .map(s => [s.className, s.textContent, s.attributes.length])""")
    assert unplaced == [["sev-" + HOSTILE_SEVERITY.lower(), SVG, 1]]


def test_sorting_works(samples):
    click = """(() => { const th = document.querySelector('details[open] table.samples th:nth-child(3)');
        th.click(); return [...th.closest('table').tBodies[0].rows].map(r => r.cells[2].dataset.sort) })()"""
    ascending = [float(v) for v in samples.eval(click)]
    descending = [float(v) for v in samples.eval(click)]
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert len(ascending) == len(HOSTILE_SAMPLES) and ascending != descending
    assert samples.errors() == []


def test_held_out_plot_renders(hostile_report, browser):
    png = hostile_report.files["held_out"].resolve()
    wrapper = png.parent / "_browser_probe.html"  # removed below: the report dir holds report files only
    wrapper.write_text(f'<!doctype html><img id="plot" src="{png.name}">', encoding="utf-8")
    try:
        page = browser.open(wrapper.as_uri())
        width, height = png_size(png)
        assert width > 300 and height > 200
        assert page.eval("(i => [i.complete, i.naturalWidth, i.naturalHeight])(document.getElementById('plot'))") \
            == [True, width, height]
        # drawn, not blank: the pixels in view have many colours (lines, text, axes on white)
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=page.session)["data"]
    finally:
        wrapper.unlink()
    pixels = imread(io.BytesIO(base64.b64decode(shot)), format="png")
    colours = {tuple(p) for p in pixels[:height, :width, :3].reshape(-1, 3).round(2).tolist()}
    assert len(colours) > 50


def test_the_probe_sees_script_that_runs(browser, tmp_path):
    """Control: the same payloads written in unescaped run, and every check above sees it."""
    page_file = tmp_path / "unescaped.html"
    page_file.write_text(f"<!doctype html><title>t</title><table><tr><td>{IMG_T}</td><td>{CELL_BREAK}</td></tr>"
                         f"</table>{SCRIPT_T}", encoding="utf-8")
    page = browser.open(page_file.as_uri())
    assert page.eval("document.title") == PWNED
    scripts = page.page_scripts()
    assert any("document.title='pwned'" in s for s in scripts) and len(scripts) >= 2
    assert page.eval("document.querySelectorAll('img, b').length") == 2
