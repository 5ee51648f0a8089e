"""The server versions whose APIs the reference server simulates (one place, read by every surface)."""
from __future__ import annotations

from specsweep.refserver import __version__ as REFSERVER_VERSION

#: the SGLang version whose API is simulated
#: the SGLang version whose API is simulated
SGLANG_VERSION = "0.5.23"

#: the vLLM version whose API is simulated
VLLM_VERSION = "0.33.0"


def vllm_version_string() -> str:
    """What ``/version`` answers: vLLM's version, marked as the simulator's."""
    return f"{VLLM_VERSION} (specsweep refserver {REFSERVER_VERSION}, simulated)"


#: the llama.cpp build whose API is simulated (``build_info``, ``system_fingerprint``)
LLAMACPP_BUILD = "b6500"
