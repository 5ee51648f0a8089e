"""specsweep's reference server: a simulated SGLang/OpenAI inference server.

A real HTTP server process (``python -m specsweep.refserver --profile NAME``) that simulates an
SGLang engine with continuous batching and speculative decoding, so the whole pipeline runs on
a laptop and tests talk to a real socket. Its timing comes from a documented performance model
(``model.py``); profiles live in ``profiles/*.json``. Everything it answers says it is simulated.

Modules: ``profiles`` (load/validate/override), ``model`` (step times, pool, acceptance, engine
core, virtual-time simulator), ``engine`` (real-time loop), ``streaming`` (response formats and
sinks), ``app`` (HTTP routes), ``faults``, ``metrics``, ``tokens`` (simulated tokenisation),
``launch`` (``RefServer`` context manager), ``__main__`` (CLI). With ``--api-surface vllm`` the
same engine presents vLLM's OpenAI server instead: ``vllm_api`` (vLLM-only routes) and
``vllm_metrics`` (``vllm:*`` metrics).
"""
from __future__ import annotations

from specsweep import __version__

__all__ = ["__version__", "READY_PREFIX"]

#: the line the server prints on stdout once it accepts connections, followed by its URL
READY_PREFIX = "specsweep refserver ready: "
