"""Server introspection: reach the endpoint, detect its API flavour, model and configuration; scrape
``/metrics`` for counter deltas and gauges.

Detection (facts in the design notes' server-API reference): SGLang answers ``/server_info`` (or
the older ``/get_server_info``) and has no ``/version``; vLLM answers ``/version`` and
``/v1/models`` with ``owned_by: "vllm"``; llama.cpp's ``llama-server`` answers ``/props`` with
``default_generation_settings`` and ``total_slots`` (and ``/v1/models`` with ``owned_by:
"llamacpp"``); any other OpenAI-compatible server answers ``/v1/models``. ``api="auto"`` picks
``sglang`` on SGLang and ``openai-completions`` elsewhere.

Vocabulary: where a server says how many token IDs its model has (llama.cpp: ``/v1/models``
``data[].meta.n_vocab``; any server whose ``/v1/models`` entry carries ``meta.n_vocab`` or
``vocab_size``), ``ServerProbe.vocab_size`` holds it, so random token-ID prompts can be checked
against it before anything is sent. SGLang and vLLM do not publish it (None).

Token counting without usage: :class:`TokenCounter` counts the tokens of returned text with the
server's own ``POST /tokenize`` (SGLang and vLLM: ``{"model", "prompt", "add_special_tokens"}`` →
``{"tokens", "count", "max_model_len"}``; llama.cpp: ``{"content", "add_special"}`` →
``{"tokens"}``).
A one-request preflight through the chosen flavour then proves the route, the model name and
the credentials before any level runs, and checks that the server honours ``ignore_eos``.

Prometheus text is parsed with ``prometheus_client``'s parser. The poller hands it only the
sample lines of the metrics it reads (:func:`metric_names`): a server's exposition is mostly
histograms the poller never reads (vLLM's runs to tens of KB), and parsing it whole once a second
in a thread of the measuring process costs CPU and holds the GIL while the load generator's loop
waits to timestamp tokens.
"""
from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specsweep.errors import RunError
from specsweep.measure.client import auth_headers
from specsweep.measure.tls import verify_for
from specsweep.servers.flavours import FLAVOURS, Flavour

#: server_info keys kept in meta.json (the rest is trimmed: it can be large and is not needed)
SERVER_INFO_KEYS = (
    "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "max_running_requests",
    "max_total_num_tokens", "max_req_input_len", "mem_fraction_static", "chunked_prefill_size",
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_draft_model_path", "stream_interval", "schedule_policy", "enable_metrics", "attention_backend",
    "cuda_graph_max_bs", "disable_radix_cache", "simulated", "profile",
)  # never launch_command or api_key: a server's command line can carry its API key
INTERNAL_STATE_KEYS = ("effective_max_running_requests_per_dp", "avg_spec_accept_length", "memory_usage")

#: /props keys kept (llama.cpp); ``default_generation_settings`` is flattened to n_ctx and the
#: draft limits ``speculative.*``
PROPS_KEYS = ("total_slots", "model_alias", "model_path", "build_info", "endpoint_slots", "endpoint_metrics")

#: polled gauges: the metric names of each server family, and how to combine label sets (ranks)
GAUGES: dict[str, dict[str, tuple[str, str]]] = {
    "running_requests": {"sglang": ("sglang:num_running_reqs", "sum"), "vllm": ("vllm:num_requests_running", "sum"),
                         "llamacpp": ("llamacpp:requests_processing", "sum")},
    "queued_requests": {"sglang": ("sglang:num_queue_reqs", "sum"), "vllm": ("vllm:num_requests_waiting", "sum"),
                        "llamacpp": ("llamacpp:requests_deferred", "sum")},
    "kv_usage": {"sglang": ("sglang:token_usage", "max"), "vllm": ("vllm:kv_cache_usage_perc", "max")},
    "gen_throughput_tok_s": {"sglang": ("sglang:gen_throughput", "sum")},
    "spec_accept_length_gauge": {"sglang": ("sglang:spec_accept_length", "max")},
}
#: counters whose deltas over a level are recorded
COUNTERS: dict[str, dict[str, str]] = {
    "generation_tokens": {"sglang": "sglang:generation_tokens_total", "vllm": "vllm:generation_tokens_total",
                          "llamacpp": "llamacpp:tokens_predicted_total"},
    "prompt_tokens": {"sglang": "sglang:prompt_tokens_total", "vllm": "vllm:prompt_tokens_total",
                      "llamacpp": "llamacpp:prompt_tokens_total"},
    "requests": {"sglang": "sglang:num_requests_total", "vllm": "vllm:request_success_total"},
    "decode_calls": {"llamacpp": "llamacpp:n_decode_total"},
    "spec_verify_calls": {"sglang": "sglang:spec_verify_calls_total"},
    "spec_drafts": {"vllm": "vllm:spec_decode_num_drafts_total", "llamacpp": "llamacpp:spec_decode_num_drafts_total"},
    "spec_draft_tokens": {"vllm": "vllm:spec_decode_num_draft_tokens_total",
                          "llamacpp": "llamacpp:spec_decode_num_draft_tokens_total"},
    "spec_accepted_tokens": {"vllm": "vllm:spec_decode_num_accepted_tokens_total",
                             "llamacpp": "llamacpp:spec_decode_num_accepted_tokens_total"},
}
#: the reference server's schedule (``refserver/schedule_metrics.py``), the same names under every
#: surface; no real server has them, so they are read only from a simulator
SIM_COUNTERS: dict[str, str] = {
    "sim_steps": "specsweep_refserver_steps_total",
    "sim_step_s": "specsweep_refserver_step_seconds_total",
    "sim_step_lag_s": "specsweep_refserver_step_lag_seconds_total",
    "sim_late_steps": "specsweep_refserver_late_steps_total",
    "sim_clock_resyncs": "specsweep_refserver_clock_resyncs_total",
    "sim_resync_lost_s": "specsweep_refserver_resync_lost_seconds_total",
}
COUNTERS.update({key: {server: name for server in ("sglang", "vllm", "llamacpp")} for key, name in SIM_COUNTERS.items()})
#: counters of accepted tokens per draft position (label ``position``); recorded as
#: ``spec_accepted_pos_<i>`` in :func:`counters`
PER_POSITION: dict[str, str] = {
    "vllm": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "llamacpp": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
}


class ProbeError(RunError, RuntimeError):
    """The endpoint cannot be measured as configured; the message says what to do."""


@dataclass
class ServerProbe:
    """What the probe found (meta.json keeps it as the server snapshot)."""

    base_url: str
    server: str  # "sglang" | "vllm" | "llamacpp" | "openai-compatible"
    flavour: Flavour
    flavours: list[Flavour]
    model: str | None
    models: list[str]
    server_info: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    metrics: bool = False
    simulated: bool = False
    #: token IDs the model has (0 .. vocab_size-1) where the server says so, else None
    vocab_size: int | None = None
    #: where vocab_size came from, e.g. "/v1/models meta.n_vocab"
    vocab_source: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """The ``server`` record of meta.json (trimmed, no credentials)."""
        info = self.server_info
        out: dict[str, Any] = {
            "name": self.server, "version": self.version, "flavours": self.flavours, "models": self.models,
            "metrics_endpoint": self.metrics, "simulated": self.simulated,
        }
        for key in ("max_running_requests", "speculative_algorithm", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens", "mem_fraction_static",
                    "max_total_num_tokens", "tp_size", "context_length", "draft_max", "draft_min",
                    "draft_p_min", "speculative_types", "parallel_slots", "has_chat_template", "launch",
                    "speculative_draft_model_path"):
            if key in info:
                out[key] = info[key]
        if self.vocab_size is not None:
            out["vocab_size"] = self.vocab_size
            out["vocab_source"] = self.vocab_source
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


def llamacpp_settings(props: dict[str, Any], slots: Any = None) -> dict[str, Any]:
    """The server snapshot of a llama.cpp ``/props`` body (and ``/slots``, when it answered).

    Keeps ``PROPS_KEYS`` and adds: ``parallel_slots`` and ``max_running_requests`` (``total_slots``,
    llama-server's ``--parallel``), ``context_length`` (``default_generation_settings.n_ctx``, per
    slot), the draft limits ``draft_max`` / ``draft_min`` / ``draft_p_min`` where ``params`` has
    ``speculative.n_max`` / ``n_min`` / ``p_min`` (older builds), ``speculative_types`` where it
    has ``speculative.types`` (newer builds: ``"none"``, ``"draft-simple"``, ``"ngram-mod"``, …),
    and ``speculative_algorithm`` from ``/slots`` (whose per-slot ``speculative`` is what the server
    does): the types when a slot speculates and they name one (else ``"draft"``), None when no slot
    speculates; without ``/slots`` (``--no-slots``) only types other than ``"none"`` count — a real
    llama-server started with ``--spec-type draft-simple`` still reports ``"none"`` there (the
    per-request default), so ``"none"`` alone proves nothing and the key stays absent (unknown).
    llama.cpp's ``/props`` names no draft model file.
    """
    out: dict[str, Any] = {k: props[k] for k in PROPS_KEYS if k in props}
    if isinstance(props.get("total_slots"), int):
        out["parallel_slots"] = out["max_running_requests"] = props["total_slots"]
    dgs = props.get("default_generation_settings")
    if isinstance(dgs, dict):
        if isinstance(dgs.get("n_ctx"), int):
            out["context_length"] = dgs["n_ctx"]
        params = dgs.get("params") if isinstance(dgs.get("params"), dict) else dgs
        for src, dst in (("speculative.n_max", "draft_max"), ("speculative.n_min", "draft_min"),
                         ("speculative.p_min", "draft_p_min")):
            if isinstance(params.get(src), (int, float)) and not isinstance(params.get(src), bool):
                out[dst] = params[src]
        if isinstance(params.get("speculative.types"), str):
            out["speculative_types"] = params["speculative.types"]
    if isinstance(props.get("chat_template"), str):
        out["has_chat_template"] = bool(props["chat_template"].strip())
    types = out.get("speculative_types")
    named = types if isinstance(types, str) and types not in ("", "none") else None
    # older builds (draft limits in /props, no types) drafted only with a draft model; newer ones
    # say "none" per request whatever the server does, and an n-gram drafter is no draft model
    unnamed = "draft" if "speculative_types" not in out and "draft_max" in out else SPEC_TYPE_UNREPORTED
    if isinstance(slots, list) and slots and all(isinstance(x, dict) for x in slots):
        spec = any(bool(x.get("speculative")) for x in slots)
        out["speculative_algorithm"] = (named or unnamed) if spec else None
    elif named:
        out["speculative_algorithm"] = named
    _apply_launch_settings(props, out)
    return out


#: the label of a llama.cpp server whose slots speculate but whose /props names no type
SPEC_TYPE_UNREPORTED = "speculative (type not reported)"
#: ``GET /props`` → ``ui_settings`` key where ``specsweep.engines.llamacpp`` records its settings
LAUNCH_PROPS_KEY = "specsweep_launch"


def _apply_launch_settings(props: dict[str, Any], out: dict[str, Any]) -> None:
    """Settings recorded by ``specsweep.engines.llamacpp`` (``/props`` ``ui_settings.specsweep_launch``):
    kept as ``launch`` and, being what the engine was given, they name the speculative type
    (``--spec``: ``none`` → None; ``draft`` → ``"draft"`` (a draft model), n-gram arms by their
    own name, never "draft") and the draft limits."""
    ui = props.get("ui_settings")
    launch = ui.get(LAUNCH_PROPS_KEY) if isinstance(ui, dict) else None
    if not isinstance(launch, dict):
        return
    out["launch"] = launch
    spec = launch.get("spec")
    if isinstance(spec, str) and spec:
        out["speculative_algorithm"] = None if spec == "none" else spec
    for key in ("draft_max", "draft_min", "draft_p_min"):
        value = launch.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    if isinstance(launch.get("draft_model_path"), str):
        out["speculative_draft_model_path"] = launch["draft_model_path"]


def vocab_of_models(body: Any) -> int | None:
    """Vocabulary size from a ``/v1/models`` body (``data[0].meta.n_vocab`` or ``vocab_size``)."""
    if not isinstance(body, dict):
        return None
    for entry in body.get("data") or []:
        if not isinstance(entry, dict):
            continue
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        for value in (meta.get("n_vocab"), meta.get("vocab_size"), entry.get("vocab_size")):
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _client(base_url: str, timeout_s: float) -> httpx.Client:
    """A client of the server at ``base_url`` for short requests (``timeout_s`` seconds): its API
    key, nothing from the environment (no proxy), and certificate verification as httpx's default,
    one context shared by clients of ``http://`` servers (:mod:`specsweep.measure.tls`)."""
    return httpx.Client(base_url=base_url, timeout=timeout_s, headers=auth_headers(), trust_env=False,
                        verify=verify_for(base_url))


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
    with _client(base, timeout_s) as client:
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
        props: dict[str, Any] = {}
        if server == "openai-compatible":
            status, body, err = _get_json(client, "/props")
            tried.append(f"GET /props → {err or status}")
            if status == 200 and isinstance(body, dict) and (
                    "default_generation_settings" in body or "total_slots" in body):
                server, props = "llamacpp", body
        status, body, err = _get_json(client, "/v1/models")
        tried.append(f"GET /v1/models → {err or status}")
        models: list[str] = []
        owned = None
        vocab_size = None
        if status == 200 and isinstance(body, dict):
            data = body.get("data") or []
            models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
            owned = next((m.get("owned_by") for m in data if isinstance(m, dict)), None)
            if owned == "vllm":
                server = "vllm"
            elif owned == "llamacpp" and server == "openai-compatible":
                server = "llamacpp"
            vocab_size = vocab_of_models(body)
        if status in (401, 403):
            raise ProbeError(f"{base}/v1/models answered {status}: the server wants credentials; set the API key "
                             "in the SPECSWEEP_API_KEY environment variable")
        if server == "llamacpp":
            slots = None
            if props:
                status, slots, _ = _get_json(client, "/slots")
                if status != 200:
                    slots = None
            info = llamacpp_settings(props, slots)
        if not info and not models and version is None:
            raise ProbeError(f"cannot reach an inference server at {base}: tried " + "; ".join(tried)
                             + ". Is the server running, listening on that host and port, and reachable from here?")
        try:
            metrics = client.get("/metrics").status_code == 200
        except httpx.HTTPError:
            metrics = False
    if server not in ("sglang", "llamacpp"):
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
    if server == "llamacpp":
        version = version or (str(info["build_info"]) if "build_info" in info else None)
    simulated = bool(info.get("simulated")) or "simulated" in str(version or "")
    trimmed = info if server == "llamacpp" else _trim_server_info(info)
    return ServerProbe(base_url=base, server=server, flavour=flavour, flavours=flavours,
                       model=str(chosen) if chosen else None, models=models, server_info=trimmed,
                       version=version, metrics=metrics, simulated=simulated, vocab_size=vocab_size,
                       vocab_source="/v1/models meta.n_vocab" if vocab_size is not None else None)


# ------------------------------------------------------------------------------------- /metrics


#: prefix-cache flush routes, tried in order: SGLang (``POST /flush_cache``), vLLM (``POST /reset_prefix_cache``)
FLUSH_ROUTES = ("/flush_cache", "/reset_prefix_cache")


@dataclass(frozen=True)
class FlushOutcome:
    """What a prefix-cache flush did: ``route`` that emptied the cache, or None; ``failure``: why a
    route the server has did not (HTTP 500, a refusal, a timeout, a reset connection), or None when
    every route was simply absent (404/405: the server offers none)."""

    route: str | None
    failure: str | None = None

    @property
    def describe(self) -> str:
        """One line for meta.json / a level row: the route, ``failed: …`` or ``none: …``."""
        if self.route:
            return self.route
        if self.failure:
            return f"failed: {self.failure}"
        return "none: the server offers no route"


#: statuses that mean "no such route" (anything else unsuccessful means the route failed)
_NO_ROUTE = (404, 405)


def try_flush_prefix_cache(endpoint: str, timeout_s: float = 10.0, busy_retries: int = 2) -> FlushOutcome:
    """Empty the server's prefix cache, telling "no route" from "the route failed".

    Tries SGLang's ``POST /flush_cache`` then vLLM's ``POST /reset_prefix_cache`` (with the
    ``SPECSWEEP_API_KEY`` header when set), each within ``timeout_s`` seconds; a 400 (SGLang
    refuses while requests run) is retried ``busy_retries`` times, a second apart. The first route
    that succeeds wins; 404/405 mean the route is absent; any other answer, a timeout or a reset
    connection is a failure, kept (with its route) in ``failure``.
    """
    failures: list[str] = []
    with _client(endpoint, timeout_s) as client:
        for route in FLUSH_ROUTES:
            for attempt in range(busy_retries + 1):
                try:
                    resp = client.post(route)
                except httpx.TimeoutException:
                    failures.append(f"POST {route} gave no answer within {timeout_s:g} s")
                    break
                except httpx.HTTPError as exc:
                    failures.append(f"POST {route} failed: {type(exc).__name__}: {exc}")
                    break
                if resp.is_success:
                    return FlushOutcome(route)
                if resp.status_code in _NO_ROUTE:
                    break
                if resp.status_code == 400 and attempt < busy_retries:
                    time.sleep(1.0)
                    continue
                failures.append(f"POST {route} answered HTTP {resp.status_code}")
                break
    return FlushOutcome(None, "; ".join(failures) or None)


def flush_prefix_cache(endpoint: str, timeout_s: float = 10.0) -> str | None:
    """Empty the server's prefix cache; returns the route that did it, or None if none did
    (:func:`try_flush_prefix_cache` says which of "no route" and "failed")."""
    return try_flush_prefix_cache(endpoint, timeout_s).route


#: what a llama.cpp request body carries when its server refuses slot erase: no prompt-cache reuse
LLAMACPP_NO_PROMPT_CACHE = {"cache_prompt": False}


def erase_llamacpp_slots(endpoint: str, timeout_s: float = 10.0) -> tuple[str | None, str]:
    """Empty every slot of a llama.cpp server (``POST /slots/{id}?action=erase`` for each id that
    ``GET /slots`` lists); returns (how, "") when every slot was erased, else (None, why not).

    llama-server allows the action only when started with ``--slot-save-path`` (it answers 501
    otherwise; ``specsweep.engines.llamacpp`` sets one) and ``/slots`` needs its slots endpoint.
    """
    with _client(endpoint, timeout_s) as client:
        status, slots, err = _get_json(client, "/slots")
        if status != 200 or not isinstance(slots, list):
            return None, f"GET /slots answered {err or status}"
        ids = [x["id"] for x in slots if isinstance(x, dict) and isinstance(x.get("id"), int)]
        if not ids:
            return None, "GET /slots listed no slot ids"
        for i in ids:
            try:
                resp = client.post(f"/slots/{i}", params={"action": "erase"})
            except httpx.HTTPError as exc:
                return None, f"POST /slots/{i}?action=erase failed: {type(exc).__name__}"
            if not resp.is_success:
                return None, (f"POST /slots/{i}?action=erase answered {resp.status_code}: "
                              f"{resp.text[:160]}")
    return f"POST /slots/{{id}}?action=erase ({len(ids)} slots)", ""


def metric_names(server: str, what: str) -> frozenset[str]:
    """The sample names the poller reads from a ``server`` family's /metrics: ``what="gauges"``
    (:data:`GAUGES`, polled during a level) or ``"counters"`` (:data:`COUNTERS` and
    :data:`PER_POSITION`, read before and after it)."""
    if what == "gauges":
        return frozenset(per[server][0] for per in GAUGES.values() if server in per)
    if what == "counters":
        names = {per[server] for per in COUNTERS.values() if server in per}
        return frozenset(names | ({PER_POSITION[server]} if server in PER_POSITION else set()))
    raise ValueError(f"what must be 'gauges' or 'counters', not {what!r}")


@functools.lru_cache(maxsize=16)
def _sample_lines(names: frozenset[str]) -> re.Pattern[str]:
    """A line that is a sample of one of ``names``: the name, then labels (``{``) or a blank."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"^[ \t]*(?:{alternatives})(?=[{{ \t]).*$", re.M)


def parse_metrics(text: str, names: Collection[str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value).

    ``names``: only the samples of these names; every other line (other metrics, ``# HELP`` and
    ``# TYPE`` comments) is dropped before the parser sees it, so the same samples come back
    (name, labels and value as parsed whole) for a fraction of the work.
    """
    if names is not None:
        wanted = frozenset(names)
        if not wanted:
            return []
        text = "\n".join(_sample_lines(wanted).findall(text)) + "\n"
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
    if server in PER_POSITION:
        name = PER_POSITION[server]
        for n, labels, value in samples:
            pos = labels.get("position")
            if n == name and pos is not None and pos.isdigit():
                key = f"spec_accepted_pos_{int(pos)}"
                out[key] = out.get(key, 0.0) + value
    return out


def scrape(client: httpx.Client, names: Collection[str] | None = None) -> list[tuple[str, dict[str, str], float]] | None:
    """GET /metrics and parse it (only the samples of ``names``, when given: :func:`parse_metrics`);
    None when unavailable or unparsable."""
    try:
        resp = client.get("/metrics")
        if resp.status_code != 200:
            return None
        return parse_metrics(resp.text, names)
    except (httpx.HTTPError, ValueError):
        return None


#: how :func:`acceptance_from_counters` computes a level's acceptance length, per server family
COUNTER_ACCEPTANCE_FORMULA: dict[str, str] = {
    "vllm": "1 + Δvllm:spec_decode_num_accepted_tokens / Δvllm:spec_decode_num_drafts",
    "llamacpp": "1 + Δllamacpp:spec_decode_num_accepted_tokens / Δllamacpp:spec_decode_num_drafts",
    "sglang": "Δsglang:generation_tokens / Δsglang:spec_verify_calls",
}


def acceptance_from_counters(before: dict[str, float], after: dict[str, float], server: str) -> float | None:
    """Acceptance length over a level from counter deltas (tokens per verify step incl. bonus).

    vLLM and llama.cpp: 1 + Δaccepted / Δdrafts (llama.cpp's ``spec_decode_num_drafts_total``
    counts verification steps). SGLang: Δgeneration tokens / Δverify calls.
    """
    def delta(key: str) -> float | None:
        if key in before and key in after:
            return after[key] - before[key]
        return None

    if server in ("vllm", "llamacpp"):
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
        self._client = _client(base_url, timeout_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gauges, self._counters = metric_names(server, "gauges"), metric_names(server, "counters")

    def snapshot(self) -> dict[str, float]:
        """Counters right now (for deltas)."""
        samples = scrape(self._client, self._counters)
        return counters(samples, self.server) if samples else {}

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            samples = scrape(self._client, self._gauges)
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


def spec_level_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Acceptance detail over a level from counter deltas, where the server has the counters.

    ``spec_draft_acceptance_rate`` = Δaccepted tokens / Δdraft tokens (fraction of drafted tokens
    kept); ``spec_accept_rate_pos_<i>`` = Δaccepted at draft position i / Δdrafts (verify steps):
    the fraction of verify steps whose i-th draft token was accepted (vLLM and llama.cpp export
    accepted tokens per position; position 0 is the first draft token). Empty when the counters
    did not move.
    """
    out: dict[str, float] = {}

    def delta(key: str) -> float | None:
        return after[key] - before[key] if key in before and key in after else None

    drafted, accepted, drafts = delta("spec_draft_tokens"), delta("spec_accepted_tokens"), delta("spec_drafts")
    if drafted and accepted is not None:
        out["spec_draft_acceptance_rate"] = accepted / drafted
    if drafts:
        for key in sorted(k for k in after if k.startswith("spec_accepted_pos_")):
            d = delta(key)
            if d is not None:
                out["spec_accept_rate_pos_" + key.rsplit("_", 1)[1]] = d / drafts
    return out


class TokenCounter:
    """Counts tokens of returned text with the server's ``POST /tokenize`` (see the module notes).

    ``count(text)`` returns the number of tokens (special tokens not added), or None when the
    server has no usable ``/tokenize``; after the first failure it is not asked again
    (``available`` turns False and ``why`` says what happened).
    """

    def __init__(self, base_url: str, server: str, model: str | None, timeout_s: float = 30.0) -> None:
        self.server = server
        self.model = model
        self.available = True
        self.why: str | None = None
        self._client = _client(base_url, timeout_s)

    def _body(self, text: str) -> dict[str, Any]:
        if self.server == "llamacpp":
            return {"content": text, "add_special": False}
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        return body

    def count(self, text: str) -> int | None:
        """Tokens in ``text`` by the server's tokenizer, or None (see ``why``)."""
        if not self.available:
            return None
        try:
            resp = self._client.post("/tokenize", json=self._body(text))
            body = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            self.available, self.why = False, f"POST /tokenize failed: {type(exc).__name__}: {exc}"
            return None
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            self.available = False
            self.why = f"POST /tokenize answered {resp.status_code} without a token list"
            return None
        limit = len(text.encode("utf-8", "surrogatepass")) + 2  # at most a token a byte (+ a prefix token)
        if len(tokens) > limit:  # a claim to check: the server's count would multiply the throughput
            self.available = False
            self.why = (f"POST /tokenize claimed {len(tokens):,} tokens for a text of {limit - 2:,} bytes (a tokenizer "
                        "gives at most about one token a byte), so its counts are not used")
            return None
        return len(tokens)

    def recount(self, records: Iterable[Any]) -> int:
        """Set ``output_tokens`` of every record counted from chunks (``token_source="chunks"``)
        that kept its text to the tokenizer's count, with ``token_source="tokenize"``.

        Returns how many records were recounted; stops at the first failure (the rest keep their
        chunk counts).
        """
        done = 0
        for rec in records:
            if rec.token_source != "chunks" or rec.output_text is None:
                continue
            n = self.count(rec.output_text)
            if n is None:
                break
            rec.output_tokens = n
            rec.token_source = "tokenize"
            done += 1
        return done

    def close(self) -> None:
        self._client.close()
