"""Build every report the README publishes (``make reports``).

``python -m specsweep.publish`` regenerates each published report under ``reports/`` from the
result sets it names. Published reports are generated, never edited by hand.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from specsweep.report import REPO_ROOT, build_report


@dataclass(frozen=True)
class Published:
    """One published report: its name, the result sets behind it, and its parameters."""

    name: str
    result_sets: tuple[str, ...]
    title: str
    baseline: str = "baseline"
    profiles: list[dict[str, Any]] | None = field(default=None, hash=False)


PUBLISHED: tuple[Published, ...] = (
    Published(
        name="seed-qwen3.5-122b-a10b",
        result_sets=("data/reference/seed-qwen3.5-122b-a10b",),
        title="MTP on Qwen3.5-122B-A10B (SGLang, 4× RTX PRO 6000 Blackwell): the seed benchmark",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsweep.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="build only the named report(s)")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "reports"))
    args = parser.parse_args(argv)
    names = {p.name for p in PUBLISHED}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown report(s) {', '.join(sorted(unknown))}; published: {', '.join(sorted(names))}")
    for pub in PUBLISHED:
        if args.only and pub.name not in args.only:
            continue
        t0 = time.perf_counter()
        path = build_report([REPO_ROOT / p for p in pub.result_sets], pub.name, baseline=pub.baseline,
                            title=pub.title, profiles=pub.profiles, out_dir=Path(args.out_dir))
        print(f"wrote {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path} "
              f"({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
