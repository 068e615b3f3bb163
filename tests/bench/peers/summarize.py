#!/usr/bin/env python3
"""Summarizes results.jsonl of the peers benchmark into summary.md (medians, ratios to raw).

    python3 tests/bench/peers/summarize.py RESULTS_DIR [--run RUN_ID]

Without --run, the newest run in the file is summarized.
"""

import argparse
import json
import os
import statistics
import sys

ORDER = ["raw", "countersink", "netdata", "netdata-plain", "collectd", "etsy"]
SCENARIO_TEXT = {
    "udp1": "UDP, 1 line per datagram",
    "udp20": "UDP, 20 lines per datagram",
    "uds1": "Unix datagram, 1 line per datagram",
    "uds20": "Unix datagram, 20 lines per datagram",
}


def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.0f}k"


def med(xs):
    return statistics.median(xs) if xs else None


def ratio(x, base):
    if x is None or not base:
        return "-"
    return f"{x / base:.2f}"


def load(records):
    runs = []
    for line in records:
        runs.append(json.loads(line))
    return runs


def summarize(recs):
    out = []
    scenarios = [s for s in SCENARIO_TEXT if any(r["scenario"] == s for r in recs)]
    run_ids = sorted({r["run"] for r in recs})
    reps = sorted({r["rep"] for r in recs})
    nices = sorted({r.get("nice", 0) for r in recs if "nice" in r} or {0})
    out.append(f"Run {', '.join(run_ids)}: {len(reps)} repetitions, nice {nices}. Rates are lines/s "
               "(= increments/s, every line carries 1). Ratios are to the raw receive loop "
               "(medians over medians; 'paired' = median of the per-repetition ratios).\n")
    for sc in scenarios:
        rs = [r for r in recs if r["scenario"] == sc]
        out.append(f"### {SCENARIO_TEXT[sc]}\n")
        out.append("| target | zero-loss rate, median (runs) | ratio | paired | "
                   "full blast: absorbed (runs) | ratio | loss, median (runs) | "
                   "receiver CPU at blast | lines per receiver CPU-second at blast | "
                   "load avg (1 min) during its steps |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        targets = [t for t in ORDER if any(r["target"] == t for r in rs)]

        def zl(t):
            return {r["rep"]: r for r in rs if r["target"] == t and r["kind"] == "zero_loss_rate"}

        def blasts(t, kind="blast"):
            by_rep = {}
            for r in rs:
                if r["target"] == t and r["kind"] == kind:
                    by_rep.setdefault(r["rep"], []).append(r)
            return by_rep

        base_zl = zl("raw")
        base_bl = blasts("raw")
        base_zl_med = med([r["rate"] for r in base_zl.values()])
        base_bl_med = med([r["absorbed_rate"] for v in base_bl.values() for r in v])
        for t in targets:
            z = zl(t)
            zr = [z[k]["rate"] for k in sorted(z)]
            notes = {z[k]["note"] for k in z if z[k]["note"]}
            paired = [z[k]["rate"] / base_zl[k]["rate"] for k in z
                      if k in base_zl and base_zl[k]["rate"]]
            b = blasts(t)
            br = [r for k in sorted(b) for r in b[k]]
            babs = [r["absorbed_rate"] for r in br]
            bloss = [r["loss"] for r in br]
            bpaired = [statistics.median([r["absorbed_rate"] for r in b[k]]) /
                       statistics.median([r["absorbed_rate"] for r in base_bl[k]])
                       for k in b if k in base_bl]
            cpu = med([r["receiver_cpu"] for r in br])
            per_cpu = med([r["absorbed_rate"] / r["receiver_cpu"] for r in br
                           if r["receiver_cpu"] > 0])
            loads = [r["loadavg"][0] for r in rs if r["target"] == t and "loadavg" in r]
            cells = [t]
            text = f"**{fmt_rate(med(zr))}** ({' '.join(fmt_rate(x) for x in zr)})"
            if notes:
                text += " " + "; ".join(sorted(notes))
            cells += [text, ratio(med(zr), base_zl_med),
                      f"{med(paired):.2f}" if paired else "-"]
            if babs:
                cells += [f"**{fmt_rate(med(babs))}** ({' '.join(fmt_rate(x) for x in babs)})",
                          ratio(med(babs), base_bl_med)
                          + (f" (paired {med(bpaired):.2f})" if bpaired else ""),
                          f"{med(bloss) * 100:.2f} % "
                          f"({' '.join(f'{x * 100:.1f}' for x in bloss)})"]
            else:
                cells += ["-", "-", "-"]
            cells.append(f"{cpu:.2f}" if cpu is not None else "-")
            cells.append(fmt_rate(per_cpu))
            cells.append(f"{min(loads):.2f}-{max(loads):.2f} (median {med(loads):.2f})"
                         if loads else "-")
            out.append("| " + " | ".join(cells) + " |")
        drains = [r for r in rs if r["kind"] == "drain"]
        if drains:
            out.append("")
            out.append("Drain (receiver stopped while the queue is filled, then timed emptying it; "
                       "no live sender, so the generator's limit does not apply)")
            out.append("")
            out.append("| target | drained lines/s, median (runs) | ratio | "
                       "lines per receiver CPU-second, median | ratio | incomplete runs |")
            out.append("| --- | --- | --- | --- | --- | --- |")

            def drain_stats(t):
                ds = [r for r in drains if r["target"] == t]
                rates = [r["absorbed_rate"] for r in ds]
                eff = [r["absorbed"] / r["receiver_cpu_seconds"] for r in ds
                       if r["receiver_cpu_seconds"] > 0]
                return ds, rates, eff

            _, base_rates, base_eff = drain_stats("raw")
            for t in targets:
                ds, rates, eff = drain_stats(t)
                if not ds:
                    continue
                out.append(
                    f"| {t} | **{fmt_rate(med(rates))}** ({' '.join(fmt_rate(x) for x in rates)})"
                    f" | {ratio(med(rates), med(base_rates))} | {fmt_rate(med(eff))} | "
                    f"{ratio(med(eff), med(base_eff))} | "
                    f"{sum(1 for r in ds if not r['complete'])} |")
        blocking = [r for r in rs if r["kind"] == "blast_blocking"]
        if blocking:
            out.append("")
            out.append("Blocking sender (the queue pushes back, nothing is lost): throughput")
            out.append("")
            out.append("| target | absorbed lines/s, median (runs) | ratio | sender refused/lost |")
            out.append("| --- | --- | --- | --- |")
            base = med([r["absorbed_rate"] for r in blocking if r["target"] == "raw"])
            for t in targets:
                xs = [r["absorbed_rate"] for r in blocking if r["target"] == t]
                lost = sum(r["offered_lines"] - r["absorbed"] for r in blocking if r["target"] == t)
                if xs:
                    out.append(f"| {t} | **{fmt_rate(med(xs))}** "
                               f"({' '.join(fmt_rate(x) for x in xs)}) | {ratio(med(xs), base)} "
                               f"| {lost} |")
        errors = [r for r in rs if r["kind"] == "error"]
        for e in errors:
            out.append(f"\nerror: rep {e['rep']} {e['target']}: {e['error']}")
        out.append("")
    return "\n".join(out)


def write(results_dir, run=None):
    with open(os.path.join(results_dir, "results.jsonl")) as f:
        recs = load(f)
    if run is None:
        run = recs[-1]["run"]
    recs = [r for r in recs if r["run"] == run]
    text = summarize(recs)
    with open(os.path.join(results_dir, f"summary-{run}.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--run")
    a = p.parse_args()
    write(a.dir, a.run)


if __name__ == "__main__":
    sys.exit(main())
