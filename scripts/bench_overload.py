"""Benchmark: deadlines and load shedding replayed on the real traces, without an engine.

For each trace, rounds of ``--round`` seconds, an aggregate over each round's
tuples (DEC-PKT-1-UDP: COUNT of packets, 1 s rounds; EPA-HTTP: SUM of bytes,
60 s rounds), and a per-tuple cost set so that the trace's mean load is
``--load`` times capacity (the deadline is the round length). Before each
round the run-time only knows the earlier rounds: the round's count, mean and
standard deviation are estimated by OM's decay mean (``d = 5``, ``a = 0.5``),
the share kept is chosen on that estimate
(:func:`cqopt.runtime.overload.simulate.simulate_rounds`), the actual tuples
are then sampled at that share (seeded), and the answer scaled by ``1/p``.
Each setting runs twice: shedding to the deadline itself, and holding back a
reserve for bursts (PIPES §4.1.2) sized from the estimate's recent
under-predictions (the ``--quantile`` of actual / estimated count over the
last 60 rounds).

Printed per trace and load: the share of rounds that miss their deadline
without and with shedding (on the actual tuples), the share of tuples shed,
and how often the measured relative error is within the promised ε at
δ = ``--delta`` (the issue's target: at least 1 − δ), with the median error and ε.
A round that fits sheds nothing and its answer equals the exact one (``identical``:
checked over every such round); at half capacity the bursty EPA trace still has rounds that
do not fit.

    python scripts/bench_overload.py [--load 2.0] [--delta 0.01] [--seed 22]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.charts.overload_settings import DELTA
from cqopt.runtime.estimators import decay_weighted_means
from cqopt.runtime.overload.simulate import bound_coverage, relative_errors, simulate_rounds

DATA = Path("/work/shared/data")


def dec_pkt() -> tuple[np.ndarray, np.ndarray, float, str]:
    frame = pd.read_csv(DATA / "dec-pkt-1-udp" / "dec-pkt-1-udp.arrivals.csv.gz")
    ts = frame["ts_seconds"].to_numpy()
    return ts, np.ones_like(ts), 1.0, "DEC-PKT-1-UDP COUNT(*), 1 s rounds"


def epa_http() -> tuple[np.ndarray, np.ndarray, float, str]:
    frame = pd.read_csv(DATA / "epa-http" / "epa-http.parsed.csv")
    size = pd.to_numeric(frame["bytes"], errors="coerce").fillna(0.0).to_numpy()
    ts = frame["sec_since_0829_0000"].to_numpy(dtype=np.float64)
    return ts - ts.min(), size, 60.0, "EPA-HTTP SUM(bytes), 60 s rounds"


def burst_reserve(actual: np.ndarray, estimate: np.ndarray, quantile: float,
                  window: int = 60) -> np.ndarray:
    """Before round r, the share of the deadline to hold back so that the estimate's
    under-prediction of the last ``window`` rounds, at its ``quantile``, still fits:
    ``1 − 1/q`` with q that quantile of actual / estimate (at least 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = pd.Series(np.where(estimate > 0, actual / estimate, np.nan)).shift(1)
    q = ratio.rolling(window, min_periods=5).quantile(quantile).fillna(1.0).to_numpy()
    return np.clip(1.0 - 1.0 / np.maximum(q, 1.0), 0.0, 0.9)


def replay(ts: np.ndarray, values: np.ndarray, round_s: float, load: float, delta: float,
           rng: np.random.Generator, quantile: float | None) -> dict[str, float]:
    rounds = np.floor(ts / round_s).astype(np.int64)
    n_rounds = int(rounds.max()) + 1
    order = np.argsort(rounds, kind="stable")
    groups = np.split(values[order], np.cumsum(np.bincount(rounds, minlength=n_rounds))[:-1])
    count = np.array([g.size for g in groups], dtype=np.float64)
    mean = np.array([g.mean() if g.size else np.nan for g in groups])
    std = np.array([g.std() if g.size else np.nan for g in groups])
    per_tuple = load * round_s / count.mean()  # seconds a tuple costs: mean load = `load`

    # What the run-time knows before round r: the decay means of rounds < r.
    est = {k: decay_weighted_means(v, d=5, decay=0.5)[:-1] for k, v in
           (("count", count), ("mean", mean), ("std", std))}
    known = ~np.isnan(est["count"]) & ~np.isnan(est["mean"])
    reserve = (0.0 if quantile is None else
               burst_reserve(count[known], est["count"][known], quantile))
    run = simulate_rounds({"rate.S": est["count"][known] / round_s},
                          lambda s: per_tuple * s["rate.S"] * round_s, deadline=round_s,
                          round_seconds=round_s, actual_seconds=per_tuple * count[known],
                          aggregate={k: v[known] for k, v in est.items()}, delta=delta,
                          reserve=reserve)
    kept_groups = [g for g, k in zip(groups, known) if k]
    kept_sums = np.array([g[rng.random(g.size) < p].sum() for g, p in zip(kept_groups, run.kept)])
    exact = np.array([g.sum() for g in kept_groups])
    errors = relative_errors(exact, kept_sums, run.kept)
    shed = run.kept < 1.0
    return {"rounds": len(run.kept), "load": load,
            "miss_without": float(run.missed_without.mean()),
            "miss_with": float(run.missed_with.mean()),
            "shed_share": float(1.0 - (run.kept * count[known]).sum() / count[known].sum()),
            "coverage": bound_coverage(errors[shed], run.epsilon[shed]) if shed.any() else 1.0,
            "median_error": float(np.nanmedian(errors[shed])) if shed.any() else 0.0,
            "median_epsilon": float(np.median(run.epsilon[shed])) if shed.any() else 0.0,
            "identical": bool(np.array_equal(kept_sums[~shed], exact[~shed]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load", type=float, nargs="+", default=[2.0, 0.5])
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--quantile", type=float, default=0.95,
                        help="the reserve covers this quantile of recent under-estimates")
    args = parser.parse_args()
    header = (f"{'trace':36} {'reserve':>7} {'load':>4} {'rounds':>6} {'miss w/o':>8} "
              f"{'miss with':>9} "
              f"{'shed':>6} {'in (ε,δ)':>8} {'med err':>8} {'med ε':>7} {'identical':>9}")
    print(header)
    for source in (dec_pkt, epa_http):
        ts, values, round_s, name = source()
        for quantile, load in [(q, x) for q in (None, args.quantile) for x in args.load]:
            r = replay(ts, values, round_s, load, args.delta, np.random.default_rng(args.seed),
                       quantile)
            label = "none" if quantile is None else f"q{quantile:.2f}"
            print(f"{name:36} {label:>7} {load:4.1f} {r['rounds']:6d} {r['miss_without']:8.1%} "
                  f"{r['miss_with']:9.1%} {r['shed_share']:6.1%} {r['coverage']:8.1%} "
                  f"{r['median_error']:8.4f} {r['median_epsilon']:7.4f} {str(r['identical']):>9}")
    print(f"target: miss with <= 5% of rounds; in (ε,δ) >= {1 - args.delta:.0%} of shed rounds; "
          "rounds that fit: nothing shed, answers identical")


if __name__ == "__main__":
    main()
