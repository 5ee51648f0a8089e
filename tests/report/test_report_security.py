"""Untrusted strings stay inert in the published report.

Every string a result set, a server or a user can put on the page — arm names, labels,
descriptions, model and server names, hardware, sources, notes, metric notes, error texts, the
title, profile names and descriptions — holds a script-injection payload. The page must show
them as text: no payload appears unescaped in the HTML, no script runs in headless Chromium,
and every chart still renders (a ``</script>`` in a label would otherwise break all of them).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from browser import hover_in_chromium
from helpers import base_meta, synthetic_records
from specsweep.analyze.metrics import level_metrics, requests_frame
from specsweep.report import build_report
from specsweep.results.records import RequestRecord
from specsweep.results.store import append_level

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '"><img src=x onerror="window.__pwned=1">'
CLOSE = "</script><script>window.__pwned=1</script>"
COMMENT = "<!--pwn"
SVG = "<svg onload=window.__pwned=1>"
PAYLOADS = (SCRIPT, IMG, CLOSE, COMMENT, SVG)


def mixed(i: int) -> str:
    """A different mix of payloads for the i-th field (labels must differ between arms)."""
    return f"x{i} " + " ".join(PAYLOADS[(i + k) % len(PAYLOADS)] for k in range(len(PAYLOADS)))


def write_payload_set(folder: Path, arm: str, i: int, tokens_per_chunk: int,
                      mixed: Callable[[int], str] = mixed) -> Path:
    """A measured result set (real metrics and store code) whose every string field is a payload
    (``mixed(i)`` for the i-th field), with one failed request per level carrying a payload as its error text."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = base_meta(
        arm, kind="run", level_only=False, run_id=f"run-{mixed(i)}", label=mixed(i + 1),
        description=mixed(i + 2), model=mixed(i + 3), api=mixed(i + 4), endpoint=mixed(i + 5),
        server={"name": mixed(i + 6), "version": mixed(i + 7), "max_running_requests": 8},
        hardware={"gpu_model": mixed(i + 8), "gpus": 2, mixed(i + 9): mixed(i + 10)},
        source={"citation": mixed(i + 11)}, tool={"name": mixed(i + 12), "version": mixed(i + 13)},
        started_utc=mixed(i + 14), notes=[mixed(i + 15)], warnings=[mixed(i + 16)],
        metric_definitions={"output_tok_s": mixed(i + 17)},
    )
    meta["sweep"] = {"concurrency": [1, 4, 16], "repeats": 1}
    for c in (1, 4, 16):
        recs = synthetic_records(max(2 * c, 8), c, tokens=40, step_s=0.02 / tokens_per_chunk, ttft_s=0.05,
                                 tokens_per_chunk=tokens_per_chunk, jitter=0.05)
        recs.append(RequestRecord(t_sent=0.0, t_end=0.01, http_status=500, error=mixed(i + 18)))
        req = requests_frame(recs, t0=0.0, run_id=meta["run_id"], arm=arm, concurrency=c, repeat=0)
        lv = level_metrics(req, c)
        lv.update(run_id=meta["run_id"], arm=arm, concurrency=c, repeat=0)
        append_level(folder, pd.DataFrame([lv]), req)
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture(scope="module")
def payload_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("xss")
    baseline = SCRIPT + " base"
    write_payload_set(tmp / "study" / "a", baseline, 0, 1)
    write_payload_set(tmp / "study" / "b", IMG + " spec", 1, 2)
    profiles = [{"name": mixed(30), "objective": "latency", "description": mixed(31)},
                {"name": mixed(32), "objective": "throughput", "description": mixed(33)}]
    return build_report([tmp / "study"], "xss", baseline=baseline, title=mixed(34), profiles=profiles,
                        out_dir=tmp / "out")


def test_payload_result_sets_carry_the_payloads(payload_html: Path) -> None:
    """The test is only meaningful if the payloads reach the page (as text)."""
    import nbformat

    nb = nbformat.read(str(payload_html.parent / "_build" / "xss.ipynb"), as_version=4)
    outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
    for field in ("x1 ", "x2 ", "x3 ", "x6 ", "x7 ", "x8 ", "x11 ", "x30 ", "x31 ", "x34 "):
        assert field in outputs, f"field {field!r} never reached the page; the test would prove nothing"


def test_no_payload_is_unescaped_in_the_html(payload_html: Path) -> None:
    html = payload_html.read_text()
    for payload in PAYLOADS:
        assert payload not in html, f"{payload!r} appears unescaped"
    assert not re.search(r"<(img|svg)\b[^>]*\bon\w+\s*=", html, re.I), "a raw tag with an event handler"
    # the only <script> elements are the page's own: the chart bundle and one per chart
    charts = len(re.findall(r'class="specsweep-chart"', html))
    assert charts >= 6
    assert len(re.findall(r"<script\b", html, re.I)) == charts + 1  # the Vega bundle, then one per chart
    assert html.count("</script>") == len(re.findall(r"<script\b", html, re.I))


@pytest.mark.browser
def test_no_script_runs_and_every_chart_renders(payload_html: Path) -> None:
    """Open the page in headless Chromium with no network, hover every point (tooltips show labels)."""
    result = hover_in_chromium(payload_html, "--all", timeout_s=180)
    assert result["pwned"] is None, f"a payload ran: window.__pwned = {result['pwned']!r}"
    assert result["charts"] >= 6 and result["views"] == result["charts"], result
    assert result["failed"] == 0, result
    assert result["hovered"] >= 10 and result["tooltips"] >= 1, result
    assert SCRIPT in result["text"] and IMG in result["text"], "the payloads should show as text"


#: a terminal colour and an OSC title, a bidirectional override and isolate, a bell, a C1 control
#: (CSI alone) and a backspace: none of them may reach a page, where they recolour a terminal that
#: cats the .md or .txt, ring its bell, or reorder what a reader sees (U+202E then "gpj.exe" reads "exe.jpg")
HOSTILE = "\x1b[31mred\x1b[0m \x1b]0;title\x07\u202erev\u202c \u2066iso\u2069 bell\x07 c1\x9b2J bs\x08"
#: the characters that must not appear raw in any page, nor in the HTML as a character reference
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
FORBIDDEN_ENTITY = re.compile(r"&#(x0*(1b|7|8|9b|202e|202c|2066|2069)|0*(27|7|8|155|8238|8236|8294|8297));", re.I)
#: the same as JSON escapes, which a chart's data and expressions (in a <script>) turn back into the characters
FORBIDDEN_JSON = re.compile(r"\\u(00[01][0-9a-f]|007f|00[89][0-9a-f]|061c|200[ef]|202[a-e]|206[6-9])", re.I)


def hostile(i: int) -> str:
    return f"y{i} {HOSTILE}"


def test_no_control_character_or_bidi_override_reaches_a_page(tmp_path: Path) -> None:
    """Arm names, labels, model and server names, error texts, the title and profile names each
    carry ANSI escapes, bidirectional controls and C0/C1 controls: the .md, .txt and .html show their
    printable text and none of those characters (raw, or escaped in the HTML's JSON and entities)."""
    baseline = hostile(90) + " base"
    write_payload_set(tmp_path / "study" / "a", baseline, 0, 1, hostile)
    write_payload_set(tmp_path / "study" / "b", hostile(91) + " spec", 1, 2, hostile)
    profiles = [{"name": hostile(30), "objective": "latency", "description": hostile(31)},
                {"name": hostile(32), "objective": "throughput", "description": hostile(33)}]
    html = build_report([tmp_path / "study"], "ctl", baseline=baseline, title=hostile(34), profiles=profiles,
                        out_dir=tmp_path / "out")
    pages = {p: (tmp_path / "out" / f"ctl{p}").read_text(encoding="utf-8") for p in (".md", ".txt", ".html")}
    assert html.read_text(encoding="utf-8") == pages[".html"]
    for field in ("y1 ", "y2 ", "y3 ", "y6 ", "y30 ", "y34 ", "y90 ", "y91 "):
        assert field in pages[".html"], f"field {field!r} never reached the page; the test would prove nothing"
    for suffix, page in pages.items():
        assert "red rev iso bell c1" in page, f"{suffix}: a hostile string's printable text should show"
        bad = FORBIDDEN.search(page)
        assert bad is None, (suffix, page[max(0, bad.start() - 80):bad.end() + 40])
    # the rebuild command names the baseline exactly, each control spelled as an escape
    assert "--baseline $'y90 \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07\\u202erev" in pages[".html"]
    bad = FORBIDDEN_ENTITY.search(pages[".html"])
    assert bad is None, pages[".html"][max(0, bad.start() - 120):bad.end() + 60]
    # the charts' specs (the bundle first, whose own code escapes controls); the reproduce commands
    # may spell a control as "\u001b" or "$'\x1b'", visibly, so that they stay exact
    for spec in re.findall(r"<script\b[^>]*>(.*?)</script>", pages[".html"], re.S)[1:]:
        bad = FORBIDDEN_JSON.search(spec)
        assert bad is None, spec[max(0, bad.start() - 120):bad.end() + 60]


def test_sweep_notebook_output_shows_server_and_user_strings_as_text(tmp_path: Path) -> None:
    """The sweep notebook run against a real (embedded) server whose model name is a payload, with
    a payload label: its outputs, and their HTML export, carry no payload unescaped."""
    import nbformat

    from specsweep.notebooks.execute import execute_notebook
    from specsweep.paths import REPO_ROOT
    from specsweep.report.build import export_html

    out = tmp_path / "sweep.ipynb"
    execute_notebook(REPO_ROOT / "notebooks" / "sweep.ipynb", out, {
        "arm": "baseline", "label": mixed(40), "out_dir": str(tmp_path / "runs"), "embedded_profile": "tiny",
        "concurrency": [1, 2], "input_tokens": 32, "output_tokens": 16,
        "embedded_args": ["--served-model-name", mixed(41)],
    })
    nb = nbformat.read(str(out), as_version=4)
    rich = [o["data"][kind] for c in nb.cells for o in c.get("outputs", []) for kind in ("text/html", "text/markdown")
            if kind in o.get("data", {})]
    shown = "".join(rich[1:])  # [0] is the chart bundle
    assert "x41" in shown, "the server's model name never reached the output; the test would prove nothing"
    page = export_html(out, tmp_path / "sweep.html").read_text()
    for payload in PAYLOADS:
        assert payload not in shown, f"{payload!r} unescaped in the notebook's outputs"
        assert payload not in page, f"{payload!r} unescaped in the exported page"
