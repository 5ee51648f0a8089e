"""llama.cpp's ``/metrics`` (``llamacpp:`` names), fed by the engine's steps (``--api-surface llamacpp``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from specsweep.refserver.model import FINISHED, Step

if TYPE_CHECKING:
    from specsweep.refserver.model import EngineCore, SimRequest


class LlamacppMetrics:
    """``llamacpp:`` Prometheus text; ``observe_step`` is the engine's ``StepObserver``.

    ``num_steps``: draft tokens per verify step when speculation is on (None: off). Counters move
    once per engine step: ``n_decode_total`` counts every step (llama_decode call), the
    speculative counters count one draft per request per verify step.
    """

    def __init__(self, num_steps: int | None) -> None:
        self.num_steps = num_steps
        self.prompt_tokens = 0
        self.tokens_predicted = 0
        self.n_decode = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.accepted_per_pos = [0] * (num_steps or 0)
        self._core: EngineCore | None = None

    def attach(self, core: EngineCore) -> None:
        """Read the live gauges from ``core`` at every scrape."""
        self._core = core

    def observe_step(self, step: Step, emitted: list[SimRequest], t_sched: float) -> None:
        """Count one committed step."""
        counted = False
        spec = self.num_steps is not None and step.kind == Step.DECODE
        for req in emitted:
            if req.index < 0:
                continue
            counted = True
            n = req.new_tokens
            if req.generated == n:
                self.prompt_tokens += req.prompt_tokens
            if spec:
                assert self.num_steps is not None
                self.drafts += 1
                self.draft_tokens += self.num_steps
                self.accepted += n - 1
                for pos in range(n - 1):
                    self.accepted_per_pos[pos] += 1
            if req.state == FINISHED:
                self.tokens_predicted += req.generated  # llama.cpp adds a request's tokens at its end
        if counted:
            self.n_decode += 1

    def render(self) -> bytes:
        """The Prometheus text exposition, written as llama.cpp writes it."""
        core = self._core
        counters = [
            ("prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_tokens),
            ("tokens_predicted_total", "Number of generation tokens processed.", self.tokens_predicted),
            ("n_decode_total", "Total number of llama_decode() calls", self.n_decode),
            ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
             self.draft_tokens),
            ("spec_decode_num_accepted_tokens_total",
             "Speculative: Total draft tokens accepted by the target model", self.accepted),
            ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
             self.drafts),
        ]
        gauges = [
            ("requests_processing", "Number of requests processing.", core.num_admitted if core else 0),
            ("requests_deferred", "Number of requests deferred.", len(core.waiting) if core else 0),
        ]
        lines: list[str] = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_, value in items:
                lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}",
                          f"llamacpp:{name} {value}"]
        if self.num_steps:
            name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
            lines += [f'{name}{{position="{i}"}} {v}' for i, v in enumerate(self.accepted_per_pos)]
        lines += ["# HELP specsweep_refserver_info This server is the specsweep reference server: "
                  "a SIMULATED engine behind a llama.cpp-shaped API, not a GPU.",
                  "# TYPE specsweep_refserver_info gauge",
                  'specsweep_refserver_info{simulated="true",api_surface="llamacpp"} 1']
        return ("\n".join(lines) + "\n").encode()
