"""What a detector's parameters buy: detection delay on injected steps and false alarms on stationary streams.

`python -m ragmon.drift.calibrate` prints the table for the default parameters (the figures quoted in each
detector's docstring); the tests call the same functions with fewer trials. Streams are seeded Gaussian: windows
independent, a series detector sees one value per window against a day-long (1,440-window) baseline; a sample
detector sees a fresh sample per window. Real per-minute aggregates are autocorrelated and skewed, so treat these as
the best case and keep `min_count` and the std floors in place.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ragmon.drift.detectors import (
    CusumDetector,
    KsDetector,
    PageHinkleyDetector,
    PsiDetector,
    Reading,
    SampleDetector,
    SeriesDetector,
    Transition,
)

BASELINE_WINDOWS = 1440


@dataclass
class DelayRun:
    delays: list[int] = field(default_factory=list)  # windows from the first shifted one to the alert (1 = that one)
    missed: int = 0  # trials that never fired after the shift
    early: int = 0  # alarms before the shift (false alarms)

    @property
    def median(self) -> float:
        return float(np.median(self.delays)) if self.delays else float("nan")

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.delays, q)) if self.delays else float("nan")


def _fired(reading: Reading) -> bool:
    return reading.transition is Transition.FIRED


def series_step_delays(
    make: Callable[[], SeriesDetector], shift_sigma: float, *, trials: int, seed: int, pre: int = 100, post: int = 200
) -> DelayRun:
    """Per trial: a fresh detector and baseline, `pre` stationary windows, then `post` windows shifted by
    `shift_sigma` baseline standard deviations."""
    run = DelayRun()
    for trial in range(trials):
        rng = np.random.default_rng([seed, trial])
        detector = make()
        detector.set_baseline(rng.normal(0.0, 1.0, BASELINE_WINDOWS).tolist())
        values = np.concatenate([rng.normal(0.0, 1.0, pre), rng.normal(shift_sigma, 1.0, post)])
        for i, value in enumerate(values.tolist()):
            if _fired(detector.update(value, 100.0, 60.0 * (i + 1))):
                if i < pre:
                    run.early += 1
                    continue
                run.delays.append(i - pre + 1)
                break
        else:
            run.missed += 1
    return run


def series_false_alarms(make: Callable[[], SeriesDetector], *, windows: int, seed: int) -> int:
    """Alerts fired on `windows` stationary windows."""
    rng = np.random.default_rng(seed)
    detector = make()
    detector.set_baseline(rng.normal(0.0, 1.0, BASELINE_WINDOWS).tolist())
    values = rng.normal(0.0, 1.0, windows).tolist()
    return sum(_fired(detector.update(v, 100.0, 60.0 * (i + 1))) for i, v in enumerate(values))


def sample_step_delays(
    make: Callable[[], SampleDetector],
    shift_sigma: float,
    *,
    current_n: int,
    baseline_n: int,
    trials: int,
    seed: int,
    pre: int = 5,
    post: int = 20,
) -> DelayRun:
    """Per trial: a fresh baseline sample; each window a fresh current sample, mean-shifted from window `pre` on."""
    run = DelayRun()
    for trial in range(trials):
        rng = np.random.default_rng([seed, trial])
        detector = make()
        detector.set_baseline(rng.normal(0.0, 1.0, baseline_n).tolist())
        for i in range(pre + post):
            current = rng.normal(shift_sigma if i >= pre else 0.0, 1.0, current_n)
            if _fired(detector.update(current.tolist(), 60.0 * (i + 1))):
                if i < pre:
                    run.early += 1
                    continue
                run.delays.append(i - pre + 1)
                break
        else:
            run.missed += 1
    return run


def sample_false_alarms(
    make: Callable[[], SampleDetector], *, windows: int, current_n: int, baseline_n: int, seed: int, refresh: int = 60
) -> int:
    """Alerts fired over `windows` stationary windows. The baseline is re-drawn every `refresh` windows, as the
    evaluator re-reads it hourly: one baseline draw for the whole run would make every window share its luck."""
    rng = np.random.default_rng(seed)
    detector = make()
    fires = 0
    for i in range(windows):
        if i % refresh == 0 and not detector.firing:
            detector.set_baseline(rng.normal(0.0, 1.0, baseline_n).tolist())
        fires += _fired(detector.update(rng.normal(0.0, 1.0, current_n).tolist(), 60.0 * (i + 1)))
    return fires


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=2000, help="trials per step size (default 2000)")
    parser.add_argument("--windows", type=int, default=20_000, help="stationary windows per seed (default 20000)")
    parser.add_argument("--seeds", type=int, default=5, help="stationary runs (default 5)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    series: list[tuple[str, Callable[[], SeriesDetector]]] = [
        ("cusum", lambda: CusumDetector(cooldown_s=0)),
        ("page_hinkley", lambda: PageHinkleyDetector(cooldown_s=0)),
    ]
    print("detector      step  median  p95  p99  max  missed  | false alarms / windows")
    for name, make_series in series:
        fires = sum(series_false_alarms(make_series, windows=args.windows, seed=s) for s in range(args.seeds))
        for shift in (1.0, 2.0, 4.0):
            run = series_step_delays(make_series, shift, trials=args.trials, seed=99)
            print(
                f"{name:<12} {shift:>4.1f}σ {run.median:>7.0f} {run.quantile(0.95):>4.0f} {run.quantile(0.99):>4.0f}"
                f" {max(run.delays):>4d} {run.missed:>7d}  | {fires} / {args.windows * args.seeds}"
            )
    samples: list[tuple[str, Callable[[], SampleDetector], int, int]] = [
        ("psi", lambda: PsiDetector(cooldown_s=0), 200, 2000),
        ("ks", lambda: KsDetector(cooldown_s=0), 100, 1000),
    ]
    sample_windows = args.windows // 2
    for name, make_sample, current_n, baseline_n in samples:
        fires = sum(
            sample_false_alarms(make_sample, windows=sample_windows, current_n=current_n, baseline_n=baseline_n, seed=s)
            for s in range(args.seeds)
        )
        for shift in (0.5, 1.0):
            run = sample_step_delays(
                make_sample, shift, current_n=current_n, baseline_n=baseline_n, trials=args.trials // 5, seed=77
            )
            print(
                f"{name:<12} {shift:>4.1f}σ {run.median:>7.0f} {run.quantile(0.95):>4.0f} {run.quantile(0.99):>4.0f}"
                f" {max(run.delays):>4d} {run.missed:>7d}  | {fires} / {sample_windows * args.seeds}"
                f"  (n={current_n} vs {baseline_n})"
            )
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
