"""Command line: ``python -m specsweep.refserver [--profile NAME] [options]`` (``specsweep serve``).

Starts the simulated SGLang server (or, with ``--api-surface vllm``, the same simulated engine
behind a vLLM-shaped OpenAI API), prints ``specsweep refserver ready: http://HOST:PORT`` on
stdout once it accepts connections, and exits with status 0 on SIGINT/SIGTERM. A bad flag, an
unknown profile or a bad override exits with status 2 and a message saying what is wrong (and,
for a profile, which profiles exist); without ``--profile`` it serves the one calibrated to the seed
measurement; a port that cannot be bound exits with status 1.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsweep.refserver import READY_PREFIX
from specsweep.refserver.calibration import SEED_PROFILE
from specsweep.refserver.faults import DataFaults, FaultConfig
from specsweep.refserver.model import resolve
from specsweep.refserver.profiles import ProfileError, available_profiles, load_profile
from specsweep.results.outpath import writable_dir

if TYPE_CHECKING:  # the HTTP stack is imported only once the arguments are valid
    from specsweep.refserver.state import ServerState

__all__ = ["build_parser", "main"]

_EPILOG = """\
profile overrides (--set, repeatable; dotted paths into the profile JSON, validated):
  --set decode.fixed_ms=5                  per-forward fixed overhead, ms
  --set speculative.mean_accept_length=2.4 tokens per verify step (bonus included)
  --set speculative.num_steps=3            draft chain length (num_draft_tokens = steps + 1)
  --set memory.max_total_num_tokens=50000  pin the token pool (else derived from memory terms)
  sections: hardware, model, decode, prefill, memory, speculative, engine; see the profile files
  in specsweep/refserver/profiles/ for every key, its unit and its notes.

faults (deterministic per request index under --seed; rates are fractions 0..1):
  --fault-error-rate R      answer a request at once with 500 or 503 and an error body
  --fault-drop-rate R       close a stream mid-way without a final chunk or [DONE]
                            (non-streaming: close the connection without a response)
  --fault-stall-rate R      pause a stream for --fault-stall-s seconds mid-way (tokens produced
                            meanwhile arrive merged afterwards); non-streaming: delay the response
  --fault-malformed-rate R  send one data: line that is not JSON mid-way through a stream
  --fault-omit-usage        never send token counts (no usage, no meta_info token counts)
  --fault-drift-pct-per-min P  every step P% longer per minute (a drifting machine; --fault-drift-epoch-s T
                            counts from Unix time T, so several servers drift as one machine)
  --fault-errors-after I    answer every request from index I on with HTTP 500 (all but the first I fail)
  --fault-echo-auth         injected errors quote the request's API key (as some servers do)
  --fault-count-scale K     multiply every completion_tokens count sent by K (over-counting)
  --fault-count-value N     send N as every completion_tokens count (e.g. 4294967295)
  --fault-count-rate R      ... only for a drawn fraction R of requests (default 1: all)
  --fault-noninteger-counts-after I  requests from index I on send non-integer counts (n + 0.5)
  --fault-tokenize-tokens N POST /tokenize claims N tokens for any text
  --fault-flush {500,hang,reset}  the prefix-cache flush route fails that way
  --fault-echo-env NAME     injected errors quote the server's environment variable NAME
  --fault-echo-token VALUE  injected errors quote VALUE (a secret-named flag, for redaction tests)
  --fault-echo-pad N        injected errors put 0..N filler characters before what they quote
  --fault-echo-base64       injected errors quote each secret again as base64("user:" + secret)

API surfaces (--api-surface; the simulated engine is the same under all):
  sglang  SGLang 0.5.23: /generate, /server_info, /model_info, /health (a generation, >= 1 s),
          /v1/*, /metrics with sglang:* names; --spec mtp caps running requests at 48; the
          final meta_info carries each request's spec_* figures, and /v1/* sends them in an
          sglext.spec_tokens_details chunk when the body has "return_spec_tokens_details": true
  vllm    vLLM 0.33 OpenAI server: /v1/completions, /v1/chat/completions, /v1/models
          (owned_by "vllm"), /version, /health (instant), /load, /metrics with vllm:* names
          (live gauges; spec counters vllm:spec_decode_num_drafts/_draft_tokens/_accepted_tokens);
          /generate, /server_info, /model_info, /health_generate, /ready answer 404; usage on
          every chunk only with include_usage AND continuous_usage_stats; --spec mtp uses the
          non-speculative cap rule (vLLM does not lower --max-num-seqs for speculation);
          --per-request-spec-decode-metrics summary|detailed puts each request's acceptance in
          metrics.speculative_decoding on the final usage chunk
  llamacpp llama.cpp llama-server: /v1/completions, /v1/chat/completions (and without /v1),
          /v1/models (owned_by "llamacpp", meta.n_vocab), /props (total_slots = the running cap,
          n_ctx, speculative.n_max), /slots, /health ({"status":"ok"}), /tokenize ({"content"}),
          /metrics with llamacpp:* names (spec_decode_num_drafts/_draft_tokens/_accepted_tokens,
          per draft position); no per-chunk usage; the final chunk carries timings with
          draft_n / draft_n_accepted; the cap rule is vLLM's (--max-running-requests plays -np)

every surface rejects token-ID prompts holding an ID >= the profile's model.vocab_size with that
server's 400 (SGLang "The input_ids [...] contains values greater than the vocab size (N).",
vLLM "Token id X is out of vocabulary", llama.cpp "Prompt contains invalid tokens"), and offers
POST /tokenize (one token per whitespace-separated word).

The server is simulated: every response says so (X-Simulated header, "simulated": true,
system_fingerprint "specsweep-refserver-simulated", a version ending in "(simulated)").
"""


def _checked(convert: type, ok: Callable[[float], bool], rule: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert`` the text, then require ``ok(value)`` (``rule`` says what)."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {value}")
        return value
    return parse


_rate = _checked(float, lambda v: 0.0 <= v <= 1.0, "must be a fraction within [0, 1]")
_nonneg = _checked(float, lambda v: v >= 0, "must be >= 0")
_posint = _checked(int, lambda v: v >= 1, "must be >= 1")
_port = _checked(int, lambda v: 0 <= v <= 65535, "must be within 0..65535")


PROG = "python -m specsweep.refserver"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The CLI parser (also documents every flag in ``--help``); ``prog``: the command as typed."""
    p = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [--profile NAME] [--spec off|mtp] "
              "[--max-running-requests N] [--host H] [--port P] [--seed S] [--set KEY=VALUE ...] "
              "[--api-surface sglang|vllm|llamacpp] [options]",
        description="Simulated SGLang (or vLLM) inference server with continuous batching and "
                    "speculative decoding (specsweep's reference server). Prints "
                    f"'{READY_PREFIX}http://HOST:PORT' on stdout once ready.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", metavar="NAME", default=SEED_PROFILE,
                   help="performance profile: one of " + ", ".join(available_profiles())
                        + f", or a path to a profile .json file (default: {SEED_PROFILE}, calibrated to the "
                        "seed measurement)")
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    p.add_argument("--spec", choices=("off", "mtp"), default="off",
                   help="speculative decoding: off (baseline) or mtp (SGLang NEXTN, reported as "
                        "EAGLE; on the sglang surface caps running requests at 48 unless "
                        "--max-running-requests)")
    p.add_argument("--max-running-requests", type=_posint, metavar="N",
                   help="running-request cap (default: 48 with --spec mtp on the sglang surface, "
                        "else the profile's or SGLang's rule)")
    p.add_argument("--api-surface", choices=("sglang", "vllm", "llamacpp"), default="sglang",
                   help="which server's API to present: sglang (default, SGLang 0.5.23), vllm "
                        "(vLLM 0.33 OpenAI server: /version, vllm:* metrics, no /generate or "
                        "/server_info, no cap reset under --spec mtp) or llamacpp (llama-server: "
                        "/props, /slots, llamacpp:* metrics, timings in the final chunk); see below")
    p.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"),
                   default="none",
                   help="vLLM surface only, as vLLM's flag: 'summary' adds metrics.speculative_decoding "
                        "(acceptance length, draft acceptance rate, acceptance histogram, step and token "
                        "counts) to the final usage chunk, 'detailed' also per-step arrays; needs --spec "
                        "mtp (default none)")
    p.add_argument("--replay", metavar="BUNDLE",
                   help="serve a capture bundle (written by `specsweep capture`) instead of the simulated engine: "
                        "the recorded server's own answers and streams; --host, --port and --parent-pid apply")
    p.add_argument("--vllm-dev-mode", action="store_true",
                   help="vLLM surface only, as VLLM_SERVER_DEV_MODE=1: serve POST /reset_prefix_cache (vLLM "
                        "serves it in dev mode only; without it clients must keep levels apart by cache_salt)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=30000,
                   help="port (default 30000; 0 picks a free one, see the ready line)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of acceptance draws, sampling and faults (default 0)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile parameter (repeatable; see below)")
    p.add_argument("--mean-accept-length", type=float, metavar="L",
                   help="shortcut for --set speculative.mean_accept_length=L")
    p.add_argument("--speculative-num-steps", type=_posint, metavar="K",
                   help="shortcut for --set speculative.num_steps=K")
    p.add_argument("--served-model-name", metavar="NAME",
                   help="model name to serve (default specsweep-sim/<profile>)")
    p.add_argument("--health-delay-s", type=_nonneg, default=1.0,
                   help="/health runs a one-token generation and answers no sooner than this "
                        "(default 1.0 s, like SGLang, which polls its health generation every "
                        "second); 503 after 20 s. Unused with --api-surface vllm (instant /health)")
    p.add_argument("--disregard-ignore-eos", action="store_true",
                   help="ignore the request's ignore_eos (stop at the simulated EOS anyway), to "
                        "test clients that check the server honoured it")
    p.add_argument("--stream-interval", type=_posint, default=1,
                   help="send a chunk once this many new tokens are pending (SGLang "
                        "--stream-interval; default 1: every step's tokens as one chunk)")
    p.add_argument("--decode-log-interval", type=_posint, default=40,
                   help="refresh scheduler gauges (/metrics, last_gen_throughput) every N decode "
                        "steps (default 40, as SGLang; the vllm surface's gauges are live)")
    p.add_argument("--emit-log", metavar="PATH",
                   help="record scheduled vs actual write time of every chunk; saved as a .npy "
                        "array (n, 2) at exit (for bench/refserver_emission.py)")
    p.add_argument("--timer-spin-ms", type=_nonneg, default=1.0,
                   help="busy-wait this long before each step deadline for sub-ms timing "
                        "(default 1.0; 0 relies on the event loop's timer alone)")
    p.add_argument("--gate-ms", type=_nonneg, default=2.0,
                   help="defer parsing new requests while a step's emission is less than this "
                        "far away (or half a step; default 2.0 ms; 0 disables)")
    p.add_argument("--fault-error-rate", type=_rate, default=0.0, metavar="R",
                   help="fraction of requests answered 500/503 at once (see below)")
    p.add_argument("--fault-errors-after", type=int, default=None, metavar="I",
                   help="answer every request from index I on with HTTP 500 (a server that fails all but the first)")
    p.add_argument("--fault-drop-rate", type=_rate, default=0.0, metavar="R",
                   help="fraction of streams closed mid-way without [DONE]")
    p.add_argument("--fault-stall-rate", type=_rate, default=0.0, metavar="R",
                   help="fraction of streams paused for --fault-stall-s mid-way")
    p.add_argument("--fault-drift-pct-per-min", type=float, default=0.0, metavar="P",
                   help="every step takes P%% longer per minute since --fault-drift-epoch-s (a machine that "
                        "slows down; negative speeds up; default 0)")
    p.add_argument("--fault-drift-epoch-s", type=float, default=None, metavar="T",
                   help="Unix time the drift counts from (default: when the server starts); give several "
                        "servers one epoch to make them one drifting machine")
    p.add_argument("--fault-stall-s", type=_nonneg, default=2.0, metavar="S",
                   help="stall length, seconds (default 2)")
    p.add_argument("--fault-malformed-rate", type=_rate, default=0.0, metavar="R",
                   help="fraction of streams that carry one non-JSON data: line")
    p.add_argument("--fault-omit-usage", action="store_true",
                   help="never send token counts (usage, meta_info counts)")
    p.add_argument("--fault-echo-auth", action="store_true",
                   help="injected error bodies quote the request's API key (redaction tests)")
    p.add_argument("--fault-count-scale", type=float, default=1.0, metavar="K",
                   help="multiply every completion_tokens count sent by K (count plausibility tests)")
    p.add_argument("--fault-count-value", type=int, default=None, metavar="N",
                   help="send N as every completion_tokens count")
    p.add_argument("--fault-count-rate", type=_rate, default=1.0, metavar="R",
                   help="fraction of requests whose counts --fault-count-scale/--fault-count-value rewrite (default 1)")
    p.add_argument("--fault-noninteger-counts-after", type=int, default=None, metavar="I",
                   help="requests from index I on send non-integer token counts")
    p.add_argument("--fault-tokenize-tokens", type=int, default=None, metavar="N",
                   help="POST /tokenize claims N tokens for any text")
    p.add_argument("--fault-flush", choices=("500", "hang", "reset"), default=None,
                   help="the prefix-cache flush route fails: HTTP 500, no answer, or a reset connection")
    p.add_argument("--fault-echo-env", default=None, metavar="NAME",
                   help="injected error bodies quote the server's environment variable NAME (redaction tests)")
    p.add_argument("--fault-echo-token", default=None, metavar="VALUE",
                   help="injected error bodies quote VALUE (redaction tests of secret argv values)")
    p.add_argument("--fault-echo-pad", type=int, default=0, metavar="N",
                   help="injected errors put 0..N filler characters before what they quote (redaction at a cut)")
    p.add_argument("--fault-echo-base64", action="store_true",
                   help="injected errors quote each secret again as base64('user:' + secret), as basic-auth gateways do")
    p.add_argument("--parent-pid", type=int, metavar="PID",
                   help="exit when process PID is gone (the launcher died, even by SIGKILL)")
    p.add_argument("--describe", action="store_true",
                   help="print the resolved model (pool, cap, step times) as JSON and exit")
    p.add_argument("--no-uvloop", action="store_true", help="use asyncio's default event loop")
    p.add_argument("--log-level", default="warning",
                   choices=("debug", "info", "warning", "error"), help="default warning")
    return p


@contextlib.contextmanager
def _no_client_ca_store() -> Iterator[None]:
    """Import aiohttp without loading the system's CA certificates.

    aiohttp builds its two default *client* TLS contexts when it is imported, and each loads the
    system's CA store, CPU paid again in every server started.
    The reference server only serves: it opens no outgoing connection, so it never uses them.
    While aiohttp loads, OpenSSL's CA file and folder point at nothing (``SSL_CERT_FILE``,
    ``SSL_CERT_DIR``); both are restored right after, so any TLS context made later loads the store
    as usual. Nothing changes where aiohttp is already imported.
    """
    if "aiohttp" in sys.modules:
        yield
        return
    saved = {name: os.environ.get(name) for name in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    os.environ["SSL_CERT_FILE"] = os.environ["SSL_CERT_DIR"] = os.devnull
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def _serve(state: ServerState) -> int:
    from specsweep.refserver.app import build_app

    cfg, opts = state.cfg, state.options
    banner = (f"specsweep refserver (SIMULATED) profile={cfg.profile.name} spec="
              f"{'mtp' if cfg.spec else 'off'} max_running_requests={cfg.max_running_requests} "
              f"max_total_num_tokens={cfg.max_total_num_tokens}"
              + (f" api_surface={opts.api_surface}" if opts.api_surface != "sglang" else ""))

    def bound(port: int) -> None:
        opts.port = port
    return await _serve_app(build_app(state), opts.host, opts.port, banner, opts.parent_pid, bound)


async def _serve_app(app: Any, host: str, port: int, banner: str, parent_pid: int | None,
                     bound: Callable[[int], None] | None = None) -> int:
    """Serve ``app`` on ``host:port`` until SIGINT/SIGTERM (or the parent is gone); prints
    ``banner`` on stderr and the ready line on stdout once bound. Returns the exit status."""
    from aiohttp import web

    # SIGINT/SIGTERM stop the server cleanly (status 0) from here on: before the ready line, so that
    # a launcher that signals the moment it reads that line never meets the default action (killed)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        print(f"specsweep refserver: cannot bind {host}:{port}: {exc}", file=sys.stderr)
        return 1
    port = runner.addresses[0][1]
    if bound is not None:
        bound(port)
    shown = f"[{host}]" if ":" in host else host
    print(banner, file=sys.stderr, flush=True)
    print(f"{READY_PREFIX}http://{shown}:{port}", flush=True)
    if parent_pid:
        loop.create_task(_watch_parent(parent_pid, stop))
    gc.freeze()  # keep startup objects out of the collector's way
    await stop.wait()
    await runner.cleanup()
    return 0


def _replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--replay BUNDLE``: serve a capture bundle's recorded answers (``replay.py``)."""
    from specsweep.servers.capture_bundle import BundleError, read_bundle
    try:
        bundle = read_bundle(args.replay)
    except BundleError as exc:
        parser.error(str(exc))
    with _no_client_ca_store():
        from specsweep.refserver.replay import build_replay_app  # the HTTP stack (aiohttp) loads here
    banner = (f"specsweep refserver: REPLAYING {args.replay} (a {bundle.dialect} server's recorded answers, "
              f"{len(bundle.routes)} routes, {len(bundle.streams)} streams)")
    app = build_replay_app(bundle)
    with asyncio.Runner() as runner:
        return runner.run(_serve_app(app, args.host, args.port, banner, args.parent_pid))


async def _watch_parent(pid: int, stop: asyncio.Event, interval_s: float = 0.5) -> None:
    """Set ``stop`` once process ``pid`` (the launcher) is gone or this process was re-parented."""
    while not stop.is_set():
        if os.getppid() != pid:
            stop.set()
            return
        await asyncio.sleep(interval_s)


def _with_drift(cfg: Any, args: argparse.Namespace) -> Any:
    """``cfg`` with the drift fault of ``--fault-drift-pct-per-min`` (a ValueError for a shrink of 100 % or more)."""
    if not args.fault_drift_pct_per_min:
        return cfg
    if args.fault_drift_pct_per_min <= -100:
        raise ValueError(f"--fault-drift-pct-per-min {args.fault_drift_pct_per_min:g}: a step cannot shrink "
                         "by 100% or more per minute; give a value above -100")
    return dataclasses.replace(cfg, drift_pct_per_min=args.fault_drift_pct_per_min,
                               drift_epoch_s=args.fault_drift_epoch_s)


def _check_surface_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse the vLLM-only flags on another API surface, as the servers they imitate do."""
    if args.per_request_spec_decode_metrics != "none":
        if args.api_surface != "vllm":
            parser.error("--per-request-spec-decode-metrics is a vLLM flag: use it with --api-surface vllm "
                         "(the sglang surface answers return_spec_tokens_details instead)")
        if args.spec != "mtp":  # vLLM refuses the flag without --speculative-config
            parser.error("--per-request-spec-decode-metrics requires speculative decoding to be enabled "
                         "(--spec mtp), as vLLM requires --speculative-config")
    if args.vllm_dev_mode and args.api_surface != "vllm":
        parser.error("--vllm-dev-mode is vLLM's VLLM_SERVER_DEV_MODE: use it with --api-surface vllm")


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the server; returns the exit status. ``prog``: the command as typed (its help and errors name it)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.list_profiles:
        print("\n".join(available_profiles()))
        return 0
    if args.replay:
        return _replay(args, parser)
    if not args.profile:
        parser.error("--profile: give a profile name or file; valid profiles: " + ", ".join(available_profiles()))
    overrides = list(args.overrides)
    if args.mean_accept_length is not None:
        overrides.append(f"speculative.mean_accept_length={args.mean_accept_length}")
    if args.speculative_num_steps is not None:
        overrides.append(f"speculative.num_steps={args.speculative_num_steps}")
    try:
        if args.emit_log:  # written at shutdown: a folder that cannot take it is said now
            writable_dir(Path(args.emit_log).absolute().parent, "--emit-log")
        profile = load_profile(args.profile, overrides)
        cfg = resolve(profile, args.spec, args.max_running_requests,
                      spec_resets_cap=args.api_surface == "sglang")
        cfg = _with_drift(cfg, args)
        faults = FaultConfig(seed=args.seed, error_rate=args.fault_error_rate,
                             drop_rate=args.fault_drop_rate, stall_rate=args.fault_stall_rate,
                             stall_s=args.fault_stall_s, malformed_rate=args.fault_malformed_rate,
                             omit_usage=args.fault_omit_usage, errors_after=args.fault_errors_after)
        data_faults = DataFaults(count_scale=args.fault_count_scale, count_value=args.fault_count_value,
                                 count_rate=args.fault_count_rate, seed=args.seed,
                                 noninteger_after=args.fault_noninteger_counts_after,
                                 tokenize_tokens=args.fault_tokenize_tokens, flush=args.fault_flush,
                                 echo_env=args.fault_echo_env, echo_token=args.fault_echo_token,
                                 echo_pad=args.fault_echo_pad, echo_base64=args.fault_echo_base64)
    except (ProfileError, ValueError) as exc:
        parser.error(str(exc))
    _check_surface_flags(args, parser)
    if args.describe:
        print(json.dumps({"profile": profile.name, **cfg.describe()}, indent=2))
        return 0
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s refserver %(levelname)s %(message)s")
    with _no_client_ca_store():
        from specsweep.refserver.state import ServerOptions, ServerState  # the HTTP stack (aiohttp) loads here

    argv_list = list(sys.argv[1:] if argv is None else argv)
    options = ServerOptions(
        host=args.host, port=args.port, seed=args.seed, served_model_name=args.served_model_name,
        health_delay_s=args.health_delay_s, disregard_ignore_eos=args.disregard_ignore_eos,
        stream_interval=args.stream_interval, decode_log_interval=args.decode_log_interval,
        emit_log_path=args.emit_log, timer_spin_ms=args.timer_spin_ms, gate_ms=args.gate_ms,
        launch_command="python -m specsweep.refserver " + shlex.join(argv_list),
        profile_name=profile.name, faults=faults, api_surface=args.api_surface,
        fault_echo_auth=args.fault_echo_auth, parent_pid=args.parent_pid,
        per_request_spec_decode_metrics=args.per_request_spec_decode_metrics, data_faults=data_faults,
        vllm_dev_mode=args.vllm_dev_mode)
    state = ServerState(cfg, options)
    loop_factory = None
    if not args.no_uvloop:
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(state))
