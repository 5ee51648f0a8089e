"""Untrusted strings stay inert: Markdown with raw HTML escaped, JSON safe inside <script>."""
from __future__ import annotations

import json

import pytest

from specsweep.markup import markdown_html, md_text, script_json

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
