"""Server introspection: reach the endpoint, detect its API flavour, model and configuration; scrape
``/metrics`` for counter deltas and gauges.

Detection (facts in the design notes' server-API reference): SGLang answers ``/server_info`` (or
the older ``/get_server_info``) and has no ``/version``; vLLM answers ``/version`` and
``/v1/models`` with ``owned_by: "vllm"``; any other OpenAI-compatible server answers
``/v1/models``. ``api="auto"`` picks ``sglang`` on SGLang and ``openai-completions`` elsewhere.
A one-request preflight through the chosen flavour then proves the route, the model name and
the credentials before any level runs, and checks that the server honours ``ignore_eos``.

Prometheus text is parsed with ``prometheus_client``'s parser.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specsweep.client import FLAVOURS, Flavour, auth_headers

#: server_info keys kept in meta.json (the rest is trimmed: it can be large and is not needed)
SERVER_INFO_KEYS = (
    "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "max_running_requests",
    "max_total_num_tokens", "max_req_input_len", "mem_fraction_static", "chunked_prefill_size",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_draft_model_path", "stream_interval", "schedule_policy", "enable_metrics", "attention_backend",
    "cuda_graph_max_bs", "disable_radix_cache", "simulated", "profile",
)  # never launch_command or api_key: a server's command line can carry its API key
INTERNAL_STATE_KEYS = ("effective_max_running_requests_per_dp", "avg_spec_accept_length", "memory_usage")

#: polled gauges: the metric names of each server family, and how to combine label sets (ranks)
GAUGES: dict[str, dict[str, tuple[str, str]]] = {
    "running_requests": {"sglang": ("sglang:num_running_reqs", "sum"), "vllm": ("vllm:num_requests_running", "sum")},
    "queued_requests": {"sglang": ("sglang:num_queue_reqs", "sum"), "vllm": ("vllm:num_requests_waiting", "sum")},
    "kv_usage": {"sglang": ("sglang:token_usage", "max"), "vllm": ("vllm:kv_cache_usage_perc", "max")},
    "gen_throughput_tok_s": {"sglang": ("sglang:gen_throughput", "sum")},
    "spec_accept_length_gauge": {"sglang": ("sglang:spec_accept_length", "max")},
}
#: counters whose deltas over a level are recorded
COUNTERS: dict[str, dict[str, str]] = {
    "generation_tokens": {"sglang": "sglang:generation_tokens_total", "vllm": "vllm:generation_tokens_total"},
    "prompt_tokens": {"sglang": "sglang:prompt_tokens_total", "vllm": "vllm:prompt_tokens_total"},
    "requests": {"sglang": "sglang:num_requests_total", "vllm": "vllm:request_success_total"},
    "spec_verify_calls": {"sglang": "sglang:spec_verify_calls_total"},
    "spec_drafts": {"vllm": "vllm:spec_decode_num_drafts_total"},
    "spec_accepted_tokens": {"vllm": "vllm:spec_decode_num_accepted_tokens_total"},
}


class ProbeError(RuntimeError):
    """The endpoint cannot be measured as configured; the message says what to do."""


@dataclass
class ServerProbe:
    """What the probe found (meta.json keeps it as the server snapshot)."""

    base_url: str
    server: str  # "sglang" | "vllm" | "openai-compatible"
    flavour: Flavour
    flavours: list[Flavour]
    model: str | None
    models: list[str]
    server_info: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    metrics: bool = False
    simulated: bool = False

    def snapshot(self) -> dict[str, Any]:
        """The ``server`` record of meta.json (trimmed, no credentials)."""
        info = self.server_info
        out: dict[str, Any] = {
            "name": self.server, "version": self.version, "flavours": self.flavours, "models": self.models,
            "metrics_endpoint": self.metrics, "simulated": self.simulated,
        }
        for key in ("max_running_requests", "speculative_algorithm", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens", "mem_fraction_static",
                    "max_total_num_tokens", "tp_size"):
            if key in info:
                out[key] = info[key]
        if info:
            out["server_info"] = info
        return out


def base_url_of(endpoint: str) -> str:
    """``scheme://host:port`` of an endpoint URL, refusing credentials in it."""
    url = httpx.URL(endpoint.strip())
    if url.scheme not in ("http", "https") or not url.host:
        raise ProbeError(f"endpoint {endpoint!r} is not an http(s) URL; give e.g. http://127.0.0.1:30000")
    if url.userinfo:
        raise ProbeError("endpoint must not carry credentials (user:password@); put an API key in the "
                         "SPECSWEEP_API_KEY environment variable instead")
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}"


def _trim_server_info(info: dict[str, Any]) -> dict[str, Any]:
    out = {k: info[k] for k in SERVER_INFO_KEYS if k in info}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        out["internal_states"] = [{k: states[0][k] for k in INTERNAL_STATE_KEYS if k in states[0]}]
    return out


def _get_json(client: httpx.Client, path: str) -> tuple[int | None, Any, str | None]:
    try:
        resp = client.get(path)
    except httpx.HTTPError as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    try:
        return resp.status_code, resp.json(), None
    except ValueError:
        return resp.status_code, None, None


def probe(endpoint: str, api: str = "auto", model: str = "auto", *, timeout_s: float = 10.0) -> ServerProbe:
    """Reach ``endpoint``; detect server kind, API flavours, model and configuration.

    Raises :class:`ProbeError` naming the URL and what was tried when nothing answers, when
    ``api`` names a flavour the server does not offer, or ``model`` a model it does not serve.
    """
    base = base_url_of(endpoint)
    if api != "auto" and api not in FLAVOURS:
        raise ProbeError(f"api must be 'auto' or one of {', '.join(FLAVOURS)}; got {api!r}")
    tried: list[str] = []
    with httpx.Client(base_url=base, timeout=timeout_s, headers=auth_headers(), trust_env=False) as client:
        info: dict[str, Any] = {}
        server = "openai-compatible"
        for path in ("/server_info", "/get_server_info"):
            status, body, err = _get_json(client, path)
            tried.append(f"GET {path} → {err or status}")
            if status == 200 and isinstance(body, dict):
                info, server = body, "sglang"
                break
        status, body, err = _get_json(client, "/version")
        tried.append(f"GET /version → {err or status}")
        version = None
        if status == 200 and isinstance(body, dict) and "version" in body:
            # SGLang has no /version; vLLM has it (and /server_info too in its dev mode)
            version = str(body["version"])
            server = "vllm"
        status, body, err = _get_json(client, "/v1/models")
        tried.append(f"GET /v1/models → {err or status}")
        models: list[str] = []
        owned = None
        if status == 200 and isinstance(body, dict):
            data = body.get("data") or []
            models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
            owned = next((m.get("owned_by") for m in data if isinstance(m, dict)), None)
            if owned == "vllm":
                server = "vllm"
        if status in (401, 403):
            raise ProbeError(f"{base}/v1/models answered {status}: the server wants credentials; set the API key "
                             "in the SPECSWEEP_API_KEY environment variable")
        if not info and not models and version is None:
            raise ProbeError(f"cannot reach an inference server at {base}: tried " + "; ".join(tried)
                             + ". Is the server running, listening on that host and port, and reachable from here?")
        try:
            metrics = client.get("/metrics").status_code == 200
        except httpx.HTTPError:
            metrics = False
    if server != "sglang":
        info = {}  # a vLLM dev-mode /server_info is not SGLang's; keep only what vLLM reports
    flavours: list[Flavour] = (["sglang", "openai-completions", "openai-chat"] if server == "sglang"
                               else ["openai-completions", "openai-chat"])
    if api == "auto":
        flavour: Flavour = "sglang" if server == "sglang" else "openai-completions"
    elif api not in flavours:
        raise ProbeError(f"{base} is a {server} server and does not offer the '{api}' API; "
                         f"it offers: {', '.join(flavours)} (set api to one of them, or 'auto')")
    else:
        flavour = api  # type: ignore[assignment]
    if model == "auto":
        chosen = models[0] if models else (info.get("served_model_name") or info.get("model_path"))
    else:
        if models and model not in models:
            raise ProbeError(f"model {model!r} is not served at {base}; it serves: {', '.join(models)} "
                             "(set model to one of them, or 'auto')")
        chosen = model
    version = version or (str(info["version"]) if "version" in info else None)
    simulated = bool(info.get("simulated")) or "simulated" in str(version or "")
    return ServerProbe(base_url=base, server=server, flavour=flavour, flavours=flavours,
                       model=str(chosen) if chosen else None, models=models, server_info=_trim_server_info(info),
                       version=version, metrics=metrics, simulated=simulated)


# ------------------------------------------------------------------------------------- /metrics


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.append((sample.name, dict(sample.labels), float(sample.value)))
    return out


def _combine(values: Iterable[float], how: str) -> float | None:
    vals = list(values)
    if not vals:
        return None
    return max(vals) if how == "max" else sum(vals)


def select(samples: list[tuple[str, dict[str, str], float]], name: str, how: str = "sum") -> float | None:
    """The value of metric ``name`` over all its label sets (ranks), summed or maxed."""
    return _combine((v for n, _, v in samples if n == name), how)


def gauges(samples: list[tuple[str, dict[str, str], float]], server: str) -> dict[str, float]:
    """The polled gauges (running, queued, KV usage, …) this server family exposes."""
    out = {}
    for key, per_server in GAUGES.items():
        if server in per_server:
            name, how = per_server[server]
            value = select(samples, name, how)
            if value is not None:
                out[key] = value
    return out


def counters(samples: list[tuple[str, dict[str, str], float]], server: str) -> dict[str, float]:
    """The counters whose deltas over a level matter (tokens, requests, speculation)."""
    out = {}
    for key, per_server in COUNTERS.items():
        if server in per_server:
            value = select(samples, per_server[server])
            if value is not None:
                out[key] = value
    return out


def scrape(client: httpx.Client) -> list[tuple[str, dict[str, str], float]] | None:
    """GET /metrics and parse it; None when unavailable or unparsable."""
    try:
        resp = client.get("/metrics")
        if resp.status_code != 200:
            return None
        return parse_metrics(resp.text)
    except (httpx.HTTPError, ValueError):
        return None


def acceptance_from_counters(before: dict[str, float], after: dict[str, float], server: str) -> float | None:
    """Acceptance length over a level from counter deltas (tokens per verify step incl. bonus).

    vLLM: 1 + Δaccepted / Δdrafts. SGLang: Δgeneration tokens / Δverify calls.
    """
    def delta(key: str) -> float | None:
        if key in before and key in after:
            return after[key] - before[key]
        return None

    if server == "vllm":
        drafts, acc = delta("spec_drafts"), delta("spec_accepted_tokens")
        return 1.0 + acc / drafts if drafts and acc is not None else None
    verify, gen = delta("spec_verify_calls"), delta("generation_tokens")
    return gen / verify if verify and gen is not None else None


class MetricsPoller:
    """Polls ``/metrics`` in a background thread while a level runs (gauges every ``interval_s``).

    Samples are ``(t, name, value)`` with ``t`` in perf_counter seconds.
    """

    def __init__(self, base_url: str, server: str, interval_s: float = 1.0, timeout_s: float = 5.0) -> None:
        self.server = server
        self.interval_s = interval_s
        self.samples: list[tuple[float, str, float]] = []
        self._client = httpx.Client(base_url=base_url, timeout=timeout_s, headers=auth_headers(), trust_env=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> dict[str, float]:
        """Counters right now (for deltas)."""
        samples = scrape(self._client)
        return counters(samples, self.server) if samples else {}

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            samples = scrape(self._client)
            if samples:
                for key, value in gauges(samples, self.server).items():
                    self.samples.append((t, key, value))
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specsweep-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, str, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return list(self.samples)

    def close(self) -> None:
        self._stop.set()
        self._client.close()
