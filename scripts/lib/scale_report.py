"""The summary of a scripts/scale run, from DIR/runs/ alone (plan.json and
the harness's JSON per run): every figure checked, then DIR/summary.csv,
summary.json, plots/ (gnuplot) and README.md.

    /usr/bin/python3 scripts/lib/scale.py --render=DIR   (scripts/scale --render=DIR)

A problem -- a run without its results file, a figure missing or not a
number, min > median or median > max, a run made at other threads or
sizes than planned, a harness that exited other than 0 or 1, the budget
running out -- is named on stderr and in README.md; so is each run that
reported violations.  Either makes summarize() return 1, after every file
is written.
"""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as R  # noqa: E402  (scripts/lib/results.py: formatting, tables, loading)

PROG = "scale"
# The throughput cases: (name, the harness's metric).
CASES = (("seed", "ops_per_s"), ("held", "held_pairs_per_s"))
# The scaling targets are for this many threads (results/scale-16/).
WANTED_THREADS = 16


def say(msg):
    print("%s: %s" % (PROG, msg), flush=True)


def rows_of(doc):
    out = {}
    for r in doc.get("rows", []):
        v = r.get("value")
        out[(r.get("engine"), r.get("metric"), r.get("param", ""))] = (
            float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
    return out


def positive(v):
    return v is not None and math.isfinite(v) and v > 0


class Checker:
    def __init__(self):
        self.problems, self.violations = [], []

    def problem(self, msg):
        self.problems.append(msg)


def check_doc(chk, plan, run, d):
    """(the run's results document or None, whether it reported
    violations); names what is wrong with it."""
    what = "%s/%s" % (run["scenario"], run["engine"]) + (
        " threads=%d" % run["threads"] if run["scenario"] == "sustain" else "")
    where = "runs/%s.json" % run["name"]
    if run.get("budget_stop"):
        # Stopped by SIGTERM: what finished, if anything, is not this run.
        chk.problem("%s: stopped when the budget ran out (--budget-s=%g), after %.1f s" % (
            what, plan["budget_s"], run.get("seconds", 0)))
        return None, False
    try:
        doc = R.load(os.path.join(d, where))
    except FileNotFoundError:
        chk.problem("%s: no results file %s (harness exit %s; see runs/%s.log)" % (
            what, where, run.get("exit"), run["name"]))
        return None, False
    except (OSError, ValueError) as e:
        chk.problem("%s: %s cannot be read: %s" % (what, where, e))
        return None, False
    tmo = doc.get("context", {}).get("tmo", {})
    if tmo.get("threads") != run["threads"]:
        chk.problem("%s: %s was run with --threads=%s, not %d" % (
            what, where, tmo.get("threads"), run["threads"]))
    if bool(tmo.get("quick")) != plan["quick"]:
        chk.problem("%s: %s has quick=%s, the plan %s" % (what, where, tmo.get("quick"),
                                                           plan["quick"]))
    runs = [r for r in doc.get("runs", [])
            if r.get("scenario") == run["scenario"] and r.get("engine") == run["engine"]]
    if not runs:
        chk.problem("%s: %s holds no %s run of %s (harness exit %s)" % (
            what, where, run["scenario"], run["engine"], run.get("exit")))
    violated = False
    for r in runs:
        if r.get("status") == "violations":
            violated = True
            msgs = [v.get("message", "") for v in doc.get("violations", [])
                    if v.get("engine") == run["engine"]]
            chk.violations.append("%s: %s violation%s%s" % (
                what, r.get("result"), "" if r.get("result") == 1 else "s",
                ": " + msgs[0] if msgs else ""))
        elif r.get("status") != "ok":
            chk.problem("%s: the run could not run: %s" % (what, r.get("error") or r.get("status")))
    if runs and doc.get("complete") is not True:
        chk.problem("%s: %s is not complete" % (what, where))
    if run.get("exit") not in (0, 1):
        chk.problem("%s: the harness exited %s (see runs/%s.log)" % (what, run.get("exit"),
                                                                     run["name"]))
    if run.get("exit") == 1 and runs and all(r.get("status") == "ok" for r in runs):
        chk.problem("%s: the harness exited 1 with every run ok (results not written? see "
                    "runs/%s.log)" % (what, run["name"]))
    return doc, violated


def throughput_rows(chk, plan, docs, violated):
    """A row per engine, case (seed, held) and thread count, from the
    engine's throughput run: its median, min and max over the instances,
    and the ratio to its 1-thread median."""
    reps, rows = plan["repeat"], []
    for e in plan["engines"]:
        name = "throughput-" + e
        doc = docs.get(name)
        rm = rows_of(doc) if doc else {}
        for case, metric in CASES:
            if case == "held" and "thread-per-timer" in plan["caps"].get(e, []):
                continue  # the scenario skips it: a thread per held timer
            one = None
            for t in plan["threads"]:
                what = "throughput/%s %s threads=%d" % (e, case, t)
                p = "threads=%d" % t
                med = rm.get((e, metric, p))
                lo = hi = med
                if doc is not None and (e, metric, p) not in rm:
                    chk.problem("%s: no %s row in runs/%s.json" % (what, metric, name))
                elif doc is not None and not positive(med):
                    chk.problem("%s: %s is %s, not a rate" % (
                        what, metric, "null" if med is None else R.fmt(med)))
                    med = lo = hi = None
                elif med is not None and reps > 1:
                    lo = rm.get((e, metric, "%s,instances=%d,stat=min" % (p, reps)))
                    hi = rm.get((e, metric, "%s,instances=%d,stat=max" % (p, reps)))
                    if not positive(lo) or not positive(hi):
                        chk.problem("%s: no min/max over %d instances in runs/%s.json" % (
                            what, reps, name))
                        lo = hi = None
                    elif not lo <= med <= hi:
                        chk.problem("%s: min %s, median %s, max %s are out of order" % (
                            what, R.fmt(lo), R.fmt(med), R.fmt(hi)))
                        lo = hi = None
                if t == 1:
                    one = med
                ok = med is not None and one is not None
                rows.append({
                    "engine": e, "case": case, "threads": t, "median": med, "min": lo,
                    "max": hi, "instances": reps, "ratio": med / one if ok else None,
                    "ratio_min": lo / one if ok and lo is not None else None,
                    "ratio_max": hi / one if ok and hi is not None else None,
                    "held_bytes_max": None, "held_limit_bytes": None, "sustain_s": None,
                    "verdict": ("not measured" if doc is None else "missing" if med is None
                                else "no 1-thread figure" if one is None
                                else "violations" if name in violated else "ok")})
    return rows


def sustain_rows(chk, plan, docs, violated):
    """A row per engine and thread count, from its sustain run: pairs/s,
    the most bytes held in any sample, the limit."""
    rows = []
    for e in plan["engines"]:
        one = None
        for t in plan["threads"]:
            name = "sustain-%s-t%d" % (e, t)
            what = "sustain/%s threads=%d" % (e, t)
            doc = docs.get(name)
            rm = rows_of(doc) if doc else {}
            held = next((v for (x, m, _), v in rm.items()
                         if x == e and m == "held_bytes_max"), None)
            limit = rm.get((e, "held_limit_bytes", "threads=%d" % t))
            pairs = next((v for (x, m, p), v in rm.items() if x == e and m == "pairs_per_s"
                          and R.params(p).get("threads") == str(t)), None)
            if doc is not None:
                if held is None or not math.isfinite(held) or held < 0:
                    chk.problem("%s: no held_bytes_max in runs/%s.json" % (what, name))
                    held = None
                if not positive(limit):
                    chk.problem("%s: no held_limit_bytes for threads=%d in runs/%s.json" % (
                        what, t, name))
                    limit = None
                if not positive(pairs):
                    chk.problem("%s: no pairs_per_s for threads=%d in runs/%s.json" % (
                        what, t, name))
                    pairs = None
            if t == 1:
                one = pairs
            verdict = ("not measured" if doc is None
                       else "missing" if None in (held, limit, pairs)
                       else "over the limit" if held > limit
                       else "violations" if name in violated else "ok")
            rows.append({"engine": e, "case": "sustain", "threads": t, "median": pairs,
                         "min": pairs, "max": pairs, "instances": 1,
                         "ratio": pairs / one if pairs is not None and one else None,
                         "ratio_min": None, "ratio_max": None, "held_bytes_max": held,
                         "held_limit_bytes": limit, "sustain_s": plan.get("sustain_s"),
                         "verdict": verdict})
    return rows


def summarize(d):
    """Writes summary.csv, summary.json, plots/ and README.md from DIR's
    runs; returns the exit status (1 when anything is missing or wrong)."""
    plan = R.load(os.path.join(d, "runs", "plan.json"))
    chk = Checker()
    docs, violated = {}, set()
    for run in plan["runs"]:
        docs[run["name"]], bad = check_doc(chk, plan, run, d)
        if bad:
            violated.add(run["name"])
    planned = (["throughput/" + e for e in plan["engines"]] +
               ["sustain/%s threads=%d" % (e, t) for t in plan["threads"]
                for e in plan["engines"]])
    done = {"%s/%s" % (r["scenario"], r["engine"]) +
            (" threads=%d" % r["threads"] if r["scenario"] == "sustain" else "")
            for r in plan["runs"]}
    not_run = [x for x in planned if x not in done]
    if not_run:
        chk.problem("not run%s: %s" % (" (the budget ran out)" if plan.get("stopped") else "",
                                        ", ".join(not_run)))
    rows = throughput_rows(chk, plan, docs, violated) + sustain_rows(chk, plan, docs, violated)
    harness_commits = sorted({(doc or {}).get("context", {}).get("tmo", {}).get("commit")
                              for doc in docs.values()} - {None})
    plots_ok = draw(d, plan, rows)
    if not plots_ok:
        chk.problem("gnuplot drew nothing (see the messages above)")
    write_summary(d, plan, rows, chk, harness_commits)
    write_readme(d, plan, rows, chk, harness_commits, plots_ok)
    print_table(plan, rows)
    for v in chk.violations:
        print("%s: violation: %s" % (PROG, v), file=sys.stderr)
    for p in chk.problems:
        print("%s: %s" % (PROG, p), file=sys.stderr)
    print("%s: wrote %s/summary.csv, summary.json, README.md and plots/" % (PROG, d))
    if chk.problems or chk.violations:
        print("%s: FAILED: %d problem%s, %d run%s with violations (listed above and in "
              "README.md)" % (PROG, len(chk.problems), "" if len(chk.problems) == 1 else "s",
                              len(chk.violations), "" if len(chk.violations) == 1 else "s"),
              file=sys.stderr)
        return 1
    return 0


CSV_FIELDS = ["engine", "case", "threads", "median_pairs_per_s", "min_pairs_per_s",
              "max_pairs_per_s", "instances", "ratio_to_1_thread", "ratio_min", "ratio_max",
              "held_bytes_max", "held_limit_bytes", "sustain_s", "verdict"]


def csv_row(r):
    def g(v, nd=6):
        return "" if v is None else ("%.*g" % (nd + 4, v) if isinstance(v, float) else str(v))
    return [r["engine"], r["case"], r["threads"], g(r["median"]), g(r["min"]), g(r["max"]),
            r["instances"], g(r["ratio"]), g(r["ratio_min"]), g(r["ratio_max"]),
            g(r["held_bytes_max"]), g(r["held_limit_bytes"]), g(r["sustain_s"]), r["verdict"]]


def write_summary(d, plan, rows, chk, harness_commits):
    with open(os.path.join(d, "summary.csv.tmp"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CSV_FIELDS)
        for r in rows:
            w.writerow(csv_row(r))
    os.replace(os.path.join(d, "summary.csv.tmp"), os.path.join(d, "summary.csv"))
    doc = {
        "what": "aggregate arm+cancel pairs/s against threads (throughput seed and 1 ms-held "
                "cases, sustain), and sustain's engine-held bytes against its limit",
        "command": plan["command"], "commit": plan["commit"],
        "harness_commit": harness_commits, "machine": plan["machine"],
        "load_avg_start": plan.get("load_avg_start"), "load_avg_end": plan.get("load_avg_end"),
        "plan": {k: plan[k] for k in ("engines", "threads", "repeat", "quick", "budget_s",
                                       "sustain_s", "estimate_s", "filter")},
        "seconds": plan.get("seconds"),
        "runs": [{k: r.get(k) for k in ("name", "scenario", "engine", "threads", "command",
                                        "exit", "seconds", "load_avg_start", "load_avg_end",
                                        "budget_stop")} for r in plan["runs"]],
        "rows": [{k: r[k] for k in ("engine", "case", "threads", "median", "min", "max",
                                    "instances", "ratio", "held_bytes_max", "held_limit_bytes",
                                    "sustain_s", "verdict")} for r in rows],
        "violations": chk.violations, "problems": chk.problems,
        "complete": not chk.problems,
    }
    with open(os.path.join(d, "summary.json.tmp"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(os.path.join(d, "summary.json.tmp"), os.path.join(d, "summary.json"))


# ---- plots ------------------------------------------------------------------------------


def gnuplot(out, name, body, w, h):
    ok = True
    for term, ext in (('pngcairo size %d,%d font "sans,10" noenhanced' % (w, h), "png"),
                      ('svg size %d,%d font "sans,10" noenhanced' % (w, h), "svg")):
        script = "set terminal %s\nset output '%s/%s.%s'\n%s\n" % (term, out, name, ext, body)
        p = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        if p.returncode != 0:
            print("%s: gnuplot failed on %s.%s: %s" % (PROG, name, ext, p.stderr.strip()),
                  file=sys.stderr)
            ok = False
    if ok:
        say("plot: %s/%s.png, %s.svg" % (out, name, name))
    return ok


def draw(d, plan, rows):
    out = os.path.join(d, "plots")
    os.makedirs(out, exist_ok=True)
    n = plan["threads"][-1]
    tmp = tempfile.mkdtemp(prefix="scale.")
    drawn = 0
    try:
        engines = [e for e in plan["engines"]
                   if any(r["engine"] == e and r["ratio"] is not None and r["case"] != "sustain"
                          for r in rows)]
        if engines:
            ncols = min(len(engines), 3)
            nrows = (len(engines) + ncols - 1) // ncols
            tics = ",".join(str(t) for t in plan["threads"])
            body = ["set multiplot layout %d,%d title 'Aggregate arm+cancel pairs/s at N threads "
                    "/ at 1 thread (median of %d fresh instance(s), bars: min-max; dashed: ideal)'"
                    % (nrows, ncols, plan["repeat"]),
                    "set xlabel 'threads'", "set ylabel 'x one thread'",
                    "set xrange [0.5:%g]" % (n + 0.5), "set xtics (%s)" % tics,
                    "set yrange [0:*]", "set grid", "set key top left font ',9'"]
            for e in engines:
                series = []
                for k, (case, label) in enumerate((("seed", "seed (arm+cancel)"),
                                                   ("held", "held 1 ms")), 1):
                    pts = [r for r in rows if r["engine"] == e and r["case"] == case
                           and r["ratio"] is not None]
                    if not pts:
                        continue
                    f = os.path.join(tmp, "ratio_%s_%s.dat" % (e, case))
                    with open(f, "w") as fh:
                        for r in pts:
                            lo = r["ratio_min"] if r["ratio_min"] is not None else r["ratio"]
                            hi = r["ratio_max"] if r["ratio_max"] is not None else r["ratio"]
                            fh.write("%d %.6g %.6g %.6g\n" % (r["threads"], r["ratio"], lo, hi))
                    series.append("'%s' using 1:2:3:4 with yerrorlines lw 2 pt 7 lc %d title '%s'"
                                  % (f, k, label))
                series.append("x with lines dt 2 lw 1 lc rgb 'gray30' title 'ideal'")
                body += ["set title '%s'" % e, "plot " + ", ".join(series)]
            body.append("unset multiplot")
            drawn += gnuplot(out, "scaling", "\n".join(body), 1200, 380 * nrows + 60)
        su = [r for r in rows if r["case"] == "sustain" and r["held_bytes_max"] is not None]
        if su:
            series = []
            for k, e in enumerate(plan["engines"], 1):
                pts = [r for r in su if r["engine"] == e]
                if not pts:
                    continue
                f = os.path.join(tmp, "held_%s.dat" % e)
                with open(f, "w") as fh:
                    for r in pts:  # 0 bytes cannot sit on a log axis: drawn as 1
                        fh.write("%d %.6g\n" % (r["threads"], max(r["held_bytes_max"], 1) / 1024))
                series.append("'%s' using 1:2 with linespoints lw 2 pt 7 lc %d title '%s'" % (
                    f, k, e))
            lim = [r for r in su if r["held_limit_bytes"] is not None]
            seen = {}
            for r in lim:
                seen.setdefault(r["threads"], r["held_limit_bytes"])
            if seen:
                f = os.path.join(tmp, "limit.dat")
                with open(f, "w") as fh:
                    for t in sorted(seen):
                        fh.write("%d %.6g\n" % (t, seen[t] / 1024))
                series.append("'%s' using 1:2 with linespoints dt 2 lw 2 pt 2 lc rgb 'black' "
                              "title 'limit (512 KiB + 192 KiB a thread)'" % f)
            body = ["set title 'sustain: most bytes the engine held in any sample (%g s of "
                    "arm+cancel per run; 0 drawn as 1 byte)'" % (plan.get("sustain_s") or 0),
                    "set xlabel 'threads'", "set ylabel 'KiB held (log scale)'",
                    "set logscale y", "set xrange [0.5:%g]" % (n + 0.5),
                    "set xtics (%s)" % ",".join(str(t) for t in plan["threads"]),
                    "set grid", "set key below", "plot " + ", ".join(series)]
            drawn += gnuplot(out, "sustain", "\n".join(body), 1000, 520)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return drawn > 0


# ---- README.md and the console table ------------------------------------------------------


def ratio_cell(r):
    if r is None or r["ratio"] is None:
        return "-" if r is None else r["verdict"]
    return "%.2fx" % r["ratio"]


def rate_cell(r):
    if r is None or r["median"] is None:
        return "-" if r is None else r["verdict"]
    if r["instances"] > 1 and r["min"] is not None:
        return "%s (%s-%s)" % (R.scaled_rate(r["median"]), R.scaled_rate(r["min"]),
                               R.scaled_rate(r["max"]))
    return R.scaled_rate(r["median"])


def held_cell(r):
    if r is None or r["held_bytes_max"] is None or r["held_limit_bytes"] is None:
        return "-" if r is None else r["verdict"]
    return "%s / %s%s" % (R.scaled_bytes(r["held_bytes_max"]), R.scaled_bytes(
        r["held_limit_bytes"]), "" if r["verdict"] == "ok" else " **%s**" % r["verdict"])


def grid(plan, rows, cases, cell):
    """A line per engine and case (the case left out when there is one),
    a column per thread count."""
    by = {(r["engine"], r["case"], r["threads"]): r for r in rows}
    out = []
    for e in plan["engines"]:
        for case in cases:
            if not any((e, case, t) in by for t in plan["threads"]):
                continue
            out.append([e] + ([case] if len(cases) > 1 else []) +
                       [cell(by.get((e, case, t))) for t in plan["threads"]])
    return out


def load_str(la):
    return "%.2f" % la[0] if la else "?"


def write_readme(d, plan, rows, chk, harness_commits, plots_ok):
    m = plan["machine"]
    n = plan["threads"][-1]
    hdr = ["engine", "case"] + ["%d thr" % t for t in plan["threads"]]
    al = ["---", "---"] + ["---:"] * len(plan["threads"])
    out = ["# Thread scaling: 1..%d threads, %s" % (n, ", ".join(plan["engines"])), "",
           "Written by `scripts/scale` (rerun it rather than editing this file); "
           "`summary.csv` and `summary.json` hold every figure below, `runs/` the harness's "
           "JSON (Google Benchmark's, plus the rows), its CSV and log per run.", ""]
    if n < WANTED_THREADS:
        out += ["**A %d-core run is still wanted.** This run went up to %d threads on a machine "
                "with %s cores; the scaling targets are for %d threads on %d cores.  On a quiet "
                "%d-core machine, `scripts/scale` (about %d minutes: `--budget-s=%d`) writes "
                "`results/scale-%d/`, where that run is committed." % (
                    WANTED_THREADS, n, m["nproc"], WANTED_THREADS, WANTED_THREADS,
                    WANTED_THREADS, plan["default_budget_s"] // 60, plan["default_budget_s"], WANTED_THREADS), ""]
    if plan["quick"]:
        out += ["**--quick:** CI sizes (min-time runs of 0.03 s, sustain of %g s): this run "
                "shows the script works, its figures are not measurements." % plan["sustain_s"],
                ""]
    out += ["## How it was run", "",
            "```sh", plan["command"], "```", "",
            "- **Commit:** `%s` (the tree); the harness was built from %s" % (
                plan["commit"], ", ".join("`%s`" % c for c in harness_commits) or "(not recorded)"),
            "- **Machine:** %s; nproc %s (CPUs online %s); model name %s; kernel %s" % (
                m.get("host") or "?", m["nproc"], m.get("cpus_online"),
                m.get("model_name") or "not recorded", m.get("kernel") or "?"),
            "- **Load average (1, 5, 15 min):** %s at the start, %s at the end; each run's "
            "below" % (" ".join("%.2f" % x for x in plan.get("load_avg_start") or []) or "?",
                        " ".join("%.2f" % x for x in plan.get("load_avg_end") or []) or "?"),
            "- **Engines:** %s%s" % (", ".join(plan["engines"]), " (the default: the engines "
                                     "whose caps declare lockfree-arm and no-syscall, and "
                                     "condvar as the lock baseline)" if plan["default_engines"]
                                     else ""),
            "- **Threads:** %s" % ", ".join(str(t) for t in plan["threads"]),
            "- **throughput** (one harness process per engine, `--threads=%d "
            "--repeat=%d`): each thread count's figure is the median over %d fresh engine "
            "instance%s of each instance's median of %s min-time repetitions; `seed` arms and "
            "cancels one 1 s timeout per iteration, `held` keeps each timer armed about 1 ms "
            "before cancelling it.  `--benchmark_filter=%s` keeps those two cases at those "
            "thread counts; TMO_TEST_SCALE=%s only shrinks what the filter leaves out (the "
            "live-timer arms)." % (n, plan["repeat"], plan["repeat"],
                                  "" if plan["repeat"] == 1 else "s",
                                  "3 of 0.03 s" if plan["quick"] else "5 of 0.3 s",
                                  plan["filter"], plan["throughput_scale"]),
            "- **sustain** (one harness process per engine and thread count): %g s of "
            "arm+cancel flat out per run (the scenario's own run is %g s; `--budget-s` sized "
            "it), engine-held bytes sampled every %d ms; the limit is the scenario's, 512 KiB "
            "+ 192 KiB a thread." % (plan["sustain_s"] or 0,
                                     plan["sustain_base_s"],
                                     100 if plan["quick"] else 250),
            "- **Budget:** %g s (planned %s s); took %s s." % (
                plan["budget_s"], plan.get("estimate_s"),
                "%.0f" % plan["seconds"] if plan.get("seconds") is not None else "?"),
            "", "## Aggregate pairs/s at N threads / at 1 thread", "",
            "Ideal: N.  `sustain` is its own arm+cancel rate (one run each).", "",
            R.md_table(hdr, grid(plan, rows, ("seed", "held", "sustain"), ratio_cell), al), "",
            "Median aggregate pairs/s (min-max over the instances):", "",
            R.md_table(hdr, grid(plan, rows, ("seed", "held", "sustain"), rate_cell), al), "",
            "## sustain: most bytes held / the limit", "",
            R.md_table(["engine"] + hdr[2:], grid(plan, rows, ("sustain",), held_cell),
                       al[1:]), ""]
    out += ["## Runs", "",
            R.md_table(["run", "exit", "seconds", "load at start", "load at end"],
                       [["`%s`" % r["name"], "stopped (budget)" if r.get("budget_stop")
                         else r.get("exit"), "%.1f" % r.get("seconds", 0),
                         load_str(r.get("load_avg_start")), load_str(r.get("load_avg_end"))]
                        for r in plan["runs"]],
                       ["---", "---:", "---:", "---:", "---:"]), "",
            "Commands (from the repository root; `--json` files are in `runs/`):", "", "```sh"]
    out += [r["command"] for r in plan["runs"]] + ["```", ""]
    out += ["## Plots", ""]
    for name, what in (("scaling", "Aggregate ratio against threads, per engine, with the ideal "
                                   "line"),
                       ("sustain", "sustain: most bytes held against threads, and the limit")):
        if plots_ok and os.path.exists(os.path.join(d, "plots", name + ".svg")):
            out += ["%s:" % what, "", "![%s](plots/%s.svg)" % (name, name), ""]
        else:
            out += ["%s: not drawn (no figures)." % what, ""]
    out += ["## Violations and problems", ""]
    if chk.violations or chk.problems:
        out += ["- violation: %s" % v for v in chk.violations]
        out += ["- problem: %s" % p for p in chk.problems]
    else:
        out.append("None: every figure is present and consistent, every run clean.")
    out += ["", "## Results: the full measurement", "",
            "On a quiet machine (load average well under 1; every core is measured), from the "
            "repository root:", "", "```sh",
            "scripts/scale                  # 1..nproc threads, results/scale-<nproc>/, "
            "about %d minutes" % (plan["default_budget_s"] // 60),
            "```", "",
            "Committed runs go to `results/scale-<nproc>/`; `results/scale-%d/` is the one the "
            "targets ask for." % WANTED_THREADS, ""]
    with open(os.path.join(d, "README.md.tmp"), "w") as f:
        f.write("\n".join(out))
    os.replace(os.path.join(d, "README.md.tmp"), os.path.join(d, "README.md"))


def print_table(plan, rows):
    hdr = ["engine", "case"] + ["%d thr" % t for t in plan["threads"]]
    print()
    print("aggregate pairs/s at N threads / at 1 thread (ideal: N)")
    print(R.text_table(hdr, grid(plan, rows, ("seed", "held", "sustain"), ratio_cell), left=2))
    print()
    print("sustain: most bytes held / limit")
    print(R.text_table(["engine"] + hdr[2:], grid(plan, rows, ("sustain",), held_cell)))
    print()
