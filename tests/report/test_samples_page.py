from __future__ import annotations

from html.parser import HTMLParser

import pytest

from src.report.run_files import load_run
from src.report.samples_page import highlight, place_spans, render_samples_page

from . import run_builder as rb


class _Page(HTMLParser):
    """Collects marks (class, text), script tags, table rows per step section and td texts."""

    def __init__(self):
        super().__init__()
        self.marks, self.scripts, self.sections, self.cells = [], 0, {}, []
        self._mark, self._section, self._td = None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "mark":
            self._mark = [a.get("class"), ""]
        elif tag == "script":
            self.scripts += 1
        elif tag == "details" and (a.get("id") or "").startswith("step-"):
            self._section = int(a["id"][5:])
            self.sections[self._section] = {"open": "open" in a, "rows": 0}
        elif tag == "tr" and self._section is not None:
            self.sections[self._section]["rows"] += 1
        elif tag == "td":
            self._td = ""

    def handle_endtag(self, tag):
        if tag == "mark" and self._mark:
            self.marks.append(tuple(self._mark))
            self._mark = None
        elif tag == "td" and self._td is not None:
            self.cells.append(self._td)
            self._td = None

    def handle_data(self, data):
        if self._mark is not None:
            self._mark[1] += data
        if self._td is not None:
            self._td += data


def _parse(html):
    p = _Page()
    p.feed(html)
    return p


@pytest.mark.parametrize("with_src", [False, True])
def test_page_from_a_run_escapes_text_and_highlights_spans(run_dir, tokenizer, with_src, tmp_path):
    if with_src:  # the reward function returned `src`; otherwise it is recovered from the prompt
        rb.build_run(tmp_path / "with-src", tokenizer, with_src=True)
        run_dir = tmp_path / "with-src"
    html = render_samples_page(load_run(run_dir).val_samples, "Validation samples: <run>")
    page = _parse(html)
    # Steps newest first, the newest open, one header row + one row per sample.
    assert list(page.sections) == [6, 4, 2, 0]
    assert page.sections[6]["open"] and not page.sections[0]["open"]
    assert all(s["rows"] == 1 + len(rb.VAL_SAMPLES) for s in page.sections.values())
    # Only our own sorting script: the model's and the data's markup stays text.
    assert page.scripts == 1
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>Today" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "<title>Validation samples: &lt;run&gt;</title>" in html
    # Span highlights by severity, on the right characters, per step.
    assert page.marks.count(("sev-major", " in")) == 4
    assert page.marks.count(("sev-critical", "<img src=x onerror=alert(1)>")) == 4
    assert page.marks.count(("sev-minor", "不错")) == 4
    # Sources (recovered or given), references and translations are in the cells.
    for cell in ("这只猫坐在垫子上。", "The weather is nice today.", "今天天气很好。", "The cat sat on the mat."):
        assert cell in page.cells
    assert any(c.startswith("no <translate> tag") for c in page.cells)


def test_rows_carry_sortable_scores(run_dir):
    html = render_samples_page(load_run(run_dir).val_samples, "t")
    for i in range(len(rb.VAL_SAMPLES)):
        assert f'data-sort="{rb.val_score(6, i)}" class="num"' in html
    assert "table.samples th" in html and "sorted-asc" in html  # the click-to-sort handler


def test_place_spans_trusts_matching_offsets_and_searches_text_otherwise():
    mt = "The cat sat in the mat."
    placed, unplaced = place_spans(mt, [
        {"start": 11, "end": 14, "text": " in", "severity": "MAJOR", "confidence": 0.8},
        {"start": 0, "end": 3, "text": "mat", "severity": "minor"},  # wrong offsets, text found later
        {"start": 40, "end": 50, "text": "absent", "severity": "critical"},
        {"start": 15, "end": 18, "severity": "weird"},  # no text: offsets trusted, unknown severity -> minor
    ])
    assert [(mt[s.start:s.end], s.severity) for s in placed] == [(" in", "major"), ("the", "minor"), ("mat", "minor")]
    assert [u["text"] for u in unplaced] == ["absent"]


def test_overlapping_spans_do_not_nest_marks():
    spans = [{"start": 0, "end": 4, "severity": "major"}, {"start": 2, "end": 6, "severity": "minor"}]
    html = highlight("abcdef", spans)
    assert html == '<mark class="sev-major" title="major">abcd</mark><mark class="sev-minor" title="minor">ef</mark>'


def test_unplaced_spans_are_listed_escaped():
    html = highlight("x < y", [{"start": 9, "end": 12, "text": "<z>", "severity": "critical"}])
    assert html.startswith("x &lt; y") and "spans not found" in html and "&lt;z&gt;" in html


def test_no_val_dir_gives_a_note():
    assert "validation_data_dir was not set" in render_samples_page({}, "t")
