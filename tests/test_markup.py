"""Untrusted strings stay inert: Markdown with raw HTML escaped, JSON safe inside <script>."""
from __future__ import annotations

import json

import pytest

from specsweep.markup import html_text, inert, markdown_html, md_text, script_json

pytestmark = pytest.mark.fast  # the quick tier: no server, kernel or subprocess

PAYLOADS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</script><script>alert(2)</script>",
    "<!-- open comment",
    "[click](javascript:alert(3))",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_markdown_escapes_raw_html_and_unsafe_links(payload: str) -> None:
    html = markdown_html(f"# Title {payload}\n\n- **arm** {payload}")
    assert "<script" not in html and "<img" not in html and "<!--" not in html
    assert "javascript:" not in html.replace("javascript:alert(3))", "") or "href=\"javascript" not in html


@pytest.mark.parametrize("payload", PAYLOADS)
def test_md_text_shows_the_string_literally(payload: str) -> None:
    html = markdown_html(f"label: {md_text(payload)}")
    assert "<a " not in html and "<script" not in html and "<img" not in html


def test_script_json_cannot_close_the_element() -> None:
    value = {"label": "</script><!-- x & y \u2028"}
    text = script_json(value)
    assert "</" not in text and "<!--" not in text and "\u2028" not in text
    assert json.loads(text) == value


#: strings with Markdown syntax in every position it has one: each must render as itself
LITERAL = ["# heading", "## two", "- item", "+ item", "1. one", "3) three", "> quote", "---", "===", "**bold**",
           "_em_", "__strong__", "a_b_c", "`code`", "[a](b)", "![i](x.png)", "[ref][x]", "[x]: http://evil.example",
           "~~gone~~", "~one~", "a | b", "<b>x</b>", "x\\", "\\(x\\)", "*", "2*3*4", "a * b", "mtp_cap128_", "tab\there"]


def _text(html: str) -> str:
    import html as html_mod
    import re

    return html_mod.unescape(re.sub(r"<[^>]+>", "", html)).strip()


@pytest.mark.parametrize("value", LITERAL + PAYLOADS)
def test_md_text_renders_as_itself_at_a_line_start_mid_line_and_in_a_table_cell(value: str) -> None:
    value_shown = value.replace("\t", " ")  # md_text shows a tab as a space (inert)
    assert _text(markdown_html(md_text(value))) == value_shown
    assert _text(markdown_html(f"profile {md_text(value)} here")) == f"profile {value_shown} here"
    cell = markdown_html(f"| a | b |\n|---|---|\n| {md_text(value)} | x |")
    assert "<td>" in cell and _text(cell.split("<td>")[1].split("</td>")[0]) == value_shown


@pytest.mark.parametrize("value", ["Latency-sensitive (interactive, agentic)", "+8.6% [+3.1%, +14%]",
                                   "-10% [-11%, -10%] at 4 → +10% [+10%, +11%] at 16", "mtp (tied with mtp-cap128)",
                                   "mtp_cap128", "Interactive SLO: at least 60 tok/s per user", "1–128", "#3 run",
                                   "C=16! really?", "{a}", "ends with a dot."])
def test_md_text_leaves_what_is_not_markdown_there_as_it_is(value: str) -> None:
    """A summary is pasted into chats that show Markdown as plain text: no backslash where none is needed."""
    assert md_text(value) == value


#: ANSI colour and OSC title, bidirectional override, isolate and mark, bell, backspace, DEL, a C1 CSI
CONTROLS = "\x1b[1;31mred\x1b[0m\x1b]0;t\x07 \u202eabc\u202c \u2066i\u2069\u200f \x07\x08\x7f\x9b2J"


def test_every_escaping_helper_removes_controls_and_keeps_the_printable_text() -> None:
    """md_text, html_text, markdown_html and script_json (strings nested in keys and values) all apply inert."""
    assert inert(CONTROLS) == "red abc i 2J"
    json_text = script_json({"label": [CONTROLS], CONTROLS: {"k": (CONTROLS, 1.5)}})
    assert json.loads(json_text) == {"label": ["red abc i 2J"], "red abc i 2J": {"k": ["red abc i 2J", 1.5]}}
    for shown in (md_text(CONTROLS), html_text(CONTROLS), markdown_html(CONTROLS), json_text):
        assert "red abc i 2J" in shown
        assert not any(ch in shown for ch in "\x1b\x07\x08\x7f\x9b\u202e\u202c\u2066\u2069\u200f"), shown
        assert "\\u001b" not in shown.lower() and "\\u202e" not in shown.lower(), shown
    assert html_text('<a title="x">') == "&lt;a title=&quot;x&quot;&gt;"
