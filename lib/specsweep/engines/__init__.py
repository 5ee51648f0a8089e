"""Launchers for real inference engines that specsweep can start itself (one module per engine).

``python -m specsweep.engines.llamacpp --help``: llama.cpp's own HTTP server, in-process through
the ``xllamacpp`` wheel (the optional extra ``specsweep[llamacpp]``).
"""
from __future__ import annotations

__all__: list[str] = []
