"""Read the harness's result files (./harness --json=DIR/NAME.json) and
write what a person reads: DIR/REPORT.md, and two runs side by side.

    /usr/bin/python3 scripts/lib/results.py report DIR [--summary]
    /usr/bin/python3 scripts/lib/results.py compare OLD NEW [--all] [--markdown]
                                                    [--other-machine]
    /usr/bin/python3 scripts/lib/results.py cores DIR
    /usr/bin/python3 scripts/lib/results.py metrics-check [SCENARIO:METRIC ...]

scripts/plot runs `report` after drawing DIR/plots/; scripts/compare runs
`compare` after Google Benchmark's compare.py.  Standard library only, so
Debian's python3 is all it needs.  A row is (scenario, engine, metric,
param) -> value; params are "k=v,k=v" (the CSV writes ';' for ',').
"""

import glob
import json
import math
import os
import re
import subprocess
import sys

from compare_runs import MIN_EFFECT  # a change within what one binary does from run to run
from compare_runs import drift_floor, samples
from instructions import HELD  # the held loop's timers outstanding, but for a capped engine

# ---- the harness's metrics ---------------------------------------------------------

# metrics.tsv beside this file is `tmo-harness --list-metrics`: every metric
# each scenario declares beside its code (scripts/update-readme writes it, the
# ctest harness/help_matches_manual checks it against the binary).  Every
# metric this file or scripts/plot reads is named here, in USED, or passed to
# `metrics-check` by scripts/plot, and must be declared there: a renamed
# metric stops the report with its name instead of leaving a figure empty.
METRICS_TSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metrics.tsv")

USED = [
    ("throughput", "seed_median_ns_per_op"), ("throughput", "floor_ns_per_op"),
    ("throughput", "live_ns_per_op"), ("throughput", "ops_per_s"),
    ("throughput", "held_pairs_per_s"), ("throughput", "cross_pairs_per_s"),
    ("expiry", "lateness_ns"), ("retention", "held_bytes"), ("sustain", "held_bytes_max"),
    ("sustain", "pairs_per_s"), ("race", "arms_per_s"), ("smoke", "arm_cancel_ns_per_op"),
    ("actors", "receive_after_ns"), ("throughput", "ratio_to_structure"),
    ("throughput", "structure_seed_ns_per_op"), ("throughput", "structure_held_pairs_per_s"),
    ("service", "requests_per_s"), ("service", "pairs_per_s"), ("service", "cpu_ns_per_request"),
    ("service", "engine_threads_cpu_ns_per_request"), ("service", "held_bytes"),
    ("service", "engine_cpu_ns_per_request"),
    ("service", "lateness_ns"), ("service", "outlived"), ("service", "requests"),
]


def declared_metrics(path=METRICS_TSV):
    """{(scenario, metric): unit} from metrics.tsv."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            sc, metric, unit = line.rstrip("\n").split("\t")
            out[(sc, metric)] = unit
    return out


def undeclared(pairs):
    """The (scenario, metric) pairs metrics.tsv does not declare."""
    have = declared_metrics()
    return [p for p in pairs if tuple(p) not in have]


def check_metrics(extra=()):
    """Exit 2 naming every metric read here or in `extra` that is not declared."""
    missing = undeclared(list(USED) + [tuple(x.split(":", 1)) for x in extra])
    for sc, m in missing:
        print("results: metric %s of scenario %s is read here but not declared by the harness "
              "(%s; scripts/update-readme refreshes it)" % (m, sc, METRICS_TSV), file=sys.stderr)
    if missing:
        sys.exit(2)


# ---- loading -----------------------------------------------------------------------


def load(path):
    with open(path) as f:
        return json.load(f)


def dir_docs(d):
    """(name, document) for every DIR/*.json the harness wrote, in the order
    the runs were made (context.date; the name breaks ties)."""
    out = []
    for p in sorted(glob.glob(os.path.join(d, "*.json"))):
        try:
            doc = load(p)
        except (OSError, ValueError) as e:
            print("results: %s: %s (skipped)" % (p, e), file=sys.stderr)
            continue
        # the harness's files have runs; instructions.json (scripts/instructions) has not
        if isinstance(doc, dict) and "rows" in doc and "runs" in doc:
            out.append((os.path.splitext(os.path.basename(p))[0], doc))
    out.sort(key=lambda nd: (str(nd[1].get("context", {}).get("date", "")), nd[0]))
    return out


def rows_of(docs):
    """{(scenario, engine, metric, param): value}, the last row winning."""
    r = {}
    for _, doc in docs:
        for row in doc.get("rows", []):
            v = row.get("value")
            r[(row["scenario"], row["engine"], row["metric"], row.get("param", ""))] = (
                float(v) if isinstance(v, (int, float)) else math.nan)
    return r


def engines_of(docs):
    """Engines in the order the harness lists them (context.tmo.engines),
    keeping only those with a run."""
    ran, order = set(), []
    for _, doc in docs:
        for run in doc.get("runs", []):
            ran.add(run["engine"])
        for e in doc.get("context", {}).get("tmo", {}).get("engines", []):
            if e["name"] not in order:
                order.append(e["name"])
    return [e for e in order if e in ran] + sorted(ran - set(order))


def params(p):
    """'k=v,k=v' (or ';') -> {k: v}."""
    out = {}
    for kv in re.split("[,;]", p or ""):
        if "=" in kv:
            k, v = kv.split("=", 1)
            out[k] = v
    return out


def num(v):
    return v is not None and isinstance(v, float) and not math.isnan(v) and not math.isinf(v)


def fmt(v, unit=""):
    """A figure a person reads: 3 significant digits, thousands grouped."""
    if not num(v):
        return "-"
    a = abs(v)
    if a >= 1000:
        s = "{:,.0f}".format(v)
    elif a >= 100:
        s = "%.0f" % v
    elif a >= 10:
        s = "%.1f" % v
    elif a >= 1:
        s = "%.2f" % v
    elif a == 0:
        s = "0"
    else:
        s = "%.3g" % v
    return s + unit


def scaled_rate(v):
    """ops/s as M/s or k/s."""
    if not num(v):
        return "-"
    if v >= 1e6:
        return "%.3gM" % (v / 1e6)
    if v >= 1e3:
        return "%.3gk" % (v / 1e3)
    return "%.3g" % v


def scaled_ns(v):
    """A duration from ns: ns, us, ms or s, 3 significant digits."""
    if not num(v):
        return "-"
    for unit, div in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= div:
            return "%.3g %s" % (v / div, unit)
    return "%.3g ns" % v


def scaled_bytes(v):
    if not num(v):
        return "-"
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= div:
            return "%.3g %s" % (v / div, unit)
    return "%.0f B" % v


def md_table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def text_table(header, rows, left=1):
    """Columns padded; the first `left` flush left, the rest (figures)
    flush right."""
    cols = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(c[i]) for c in cols) for i in range(len(header))]
    lines = []
    for k, c in enumerate(cols):
        lines.append("  ".join((c[i].ljust(w[i]) if i < left else c[i].rjust(w[i]))
                               for i in range(len(c))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    return "\n".join(lines)


# ---- the machine ----------------------------------------------------------------------


def cores(docs):
    """CPUs of the machine the runs measured: the harness's record, else
    Google Benchmark's, else this machine's."""
    for _, doc in docs:
        c = doc.get("context", {})
        n = c.get("tmo", {}).get("machine", {}).get("cpus_online") or c.get("num_cpus")
        if n:
            return int(n)
    return os.cpu_count() or 1


# ---- thread scaling (shared with scripts/plot) ---------------------------------

# Keys of a param that number repetitions, not cases: their values are
# folded into a median.
REPEAT_KEYS = {"rep", "repeat", "repetition", "round", "run"}


def scaling_series(rows):
    """{(engine, case): {threads: value}} from throughput rows whose param
    has threads=N and whose unit is a rate (metric *_per_s, not the
    cross-thread pair).  case = the metric plus the param's other keys, so
    cases added later (a held-1-ms arm, --repeat=N) become their own
    series; repetitions of one case and thread count are folded into their
    median."""
    acc = {}
    for (sc, eng, metric, p), v in rows.items():
        if sc != "throughput" or not metric.endswith("_per_s") or metric.startswith("cross"):
            continue
        kv = params(p)
        if "threads" not in kv or not num(v):
            continue
        try:
            t = int(kv.pop("threads"))
        except ValueError:
            continue
        for k in REPEAT_KEYS:
            kv.pop(k, None)
        case = metric + "".join(",%s=%s" % (k, kv[k]) for k in sorted(kv))
        acc.setdefault((eng, case), {}).setdefault(t, []).append(v)
    out = {}
    for key, by_t in acc.items():
        out[key] = {t: sorted(vs)[len(vs) // 2] for t, vs in by_t.items()}
    return out


# ---- the figures table -----------------------------------------------------------------


def throughput_figures(rows, engines):
    """The seed benchmark's headline per engine: ns/op, x floor, x faster
    than thread, N threads / 1 (N = the most measured), live timers, cross."""
    thread = rows.get(("throughput", "thread", "seed_median_ns_per_op", ""), math.nan)
    series = scaling_series(rows)
    maxt = max([t for s in series.values() for t in s] or [0])
    lives = sorted({int(params(p)["live"]) for (sc, _, m, p) in rows
                    if sc == "throughput" and m == "live_ns_per_op" and "live" in params(p)})
    header = ["engine", "ns per arm+cancel", "x floor", "x structure", "held 1 ms: x structure",
              "x faster than thread"]
    if maxt >= 2:
        header.append("%d threads / 1" % maxt)
    header += ["%s live, ns/op" % live_label(n) for n in lives] + ["cross-thread, ns/pair"]
    # a cache line's round trip between two threads, measured beside each
    # engine's rows (no engine in it): records made before it have none
    handoff = any(sc == "throughput" and m == "handoff_round_trip_ns" for (sc, _, m, _) in rows)
    if handoff:
        header.append("handoff round trip, ns")
    table = []
    for e in engines:
        ns = rows.get(("throughput", e, "seed_median_ns_per_op", ""), math.nan)
        if not num(ns):
            continue
        fl = rows.get(("throughput", e, "floor_ns_per_op", ""), math.nan)
        # x structure: the engine's time per pair over its own structure's
        # alone (same loops, one thread); "-": no structure in the tree
        line = [e, fmt(ns), fmt(ns / fl if num(fl) else math.nan),
                fmt(rows.get(("throughput", e, "ratio_to_structure", "case=seed"), math.nan)),
                fmt(rows.get(("throughput", e, "ratio_to_structure", "case=held"), math.nan)),
                fmt(thread / ns)]
        if maxt >= 2:
            s = series.get((e, "ops_per_s"), {})
            line.append(fmt(s[maxt] / s[1]) if maxt in s and 1 in s else "-")
        for n in lives:
            line.append(fmt(rows.get(("throughput", e, "live_ns_per_op", "live=%d" % n), math.nan)))
        cross = rows.get(("throughput", e, "cross_pairs_per_s", "threads=2"), math.nan)
        line.append(fmt(1e9 / cross if num(cross) and cross > 0 else math.nan))
        if handoff:
            line.append(fmt(rows.get(("throughput", e, "handoff_round_trip_ns", "threads=2"),
                                     math.nan)))
        table.append(line)
    return header, table


def live_label(n):
    return "1e%d" % round(math.log10(n)) if n > 0 and 10 ** round(math.log10(n)) == n else str(n)


def largest(rows, scenario, engine, metric, key, want=None):
    """The value at the largest `key` (e.g. n) among rows whose other
    params match `want`."""
    best, val = -1, math.nan
    for (sc, e, m, p), v in rows.items():
        if sc != scenario or e != engine or m != metric:
            continue
        kv = params(p)
        if key not in kv or any(kv.get(k) != x for k, x in (want or {}).items()):
            continue
        try:
            n = float(kv[key])
        except ValueError:
            continue
        if n > best:
            best, val = n, v
    return best, val


def glance_figures(rows, engines):
    """One line per engine from the other scenarios, where they ran."""
    cols = []

    def col(title, get):
        vals = [get(e) for e in engines]
        if any(v != "-" for v in vals):
            cols.append((title, vals))

    def late(e):
        n, v = largest(rows, "expiry", e, "lateness_ns", "n", {"q": "p99"})
        return "-" if not num(v) else "%s (n=%s)" % (scaled_ns(v), live_label(int(n)))
    col("expiry lateness p99", late)
    col("retention settled", lambda e: scaled_bytes(rows.get(
        ("retention", e, "held_bytes", "variant=cancelled,when=settled"), math.nan)))
    col("sustain held max", lambda e: scaled_bytes(next(
        (v for (sc, x, m, _), v in rows.items()
         if sc == "sustain" and x == e and m == "held_bytes_max"), math.nan)))
    col("sustain pairs/s", lambda e: scaled_rate(next(
        (v for (sc, x, m, _), v in rows.items()
         if sc == "sustain" and x == e and m == "pairs_per_s"), math.nan)))
    col("race arms/s", lambda e: scaled_rate(rows.get(("race", e, "arms_per_s", ""), math.nan)))
    if not cols:
        return None, None
    header = ["engine"] + [c[0] for c in cols]
    return header, [[e] + [c[1][i] for c in cols] for i, e in enumerate(engines)]


def service_figures(rows, engines):
    """The service scenario per engine and worker count."""
    counts = sorted({int(params(p)["threads"]) for (sc, _, m, p) in rows
                     if sc == "service" and m == "requests_per_s" and "threads" in params(p)})
    header = ["engine", "workers", "requests/s", "timer pairs/s", "CPU ns/request",
              "engine's ns/request", "on its threads", "held peak", "held settled", "outlived",
              "lateness p50", "lateness p99"]
    table = []
    for e in engines:
        for t in counts:
            def g(m, extra=""):
                return rows.get(("service", e, m, "threads=%d%s" % (t, extra)), math.nan)
            rps = g("requests_per_s")
            if not num(rps):
                continue
            req, out = g("requests"), g("outlived")
            table.append([e, t, scaled_rate(rps), scaled_rate(g("pairs_per_s")),
                          fmt(g("cpu_ns_per_request")), fmt(g("engine_cpu_ns_per_request")),
                          fmt(g("engine_threads_cpu_ns_per_request")),
                          scaled_bytes(g("held_bytes", ",when=peak")),
                          scaled_bytes(g("held_bytes", ",when=settled")),
                          fmt(100 * out / req, " %") if num(req) and req > 0 else "-",
                          scaled_ns(g("lateness_ns", ",q=p50")),
                          scaled_ns(g("lateness_ns", ",q=p99"))])
    return header, table


def counts_figures(d):
    """DIR/instructions_counts.csv (scripts/instructions) as a table."""
    path = os.path.join(d, "instructions_counts.csv")
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        lines = [l.rstrip("\n").split(",") for l in f if l.strip()]
    if len(lines) < 2:
        return None, None
    head = lines[0]
    header = ["engine", "pair", "thread", "instructions", "locked", "TSC reads", "clock reads",
              "D1 misses", "LL misses"]
    table = []
    for r in lines[1:]:
        v = dict(zip(head, r))
        def n(k):
            try:
                return fmt(float(v.get(k, "nan")))
            except ValueError:
                return "-"
        case = v.get("case", "?")
        out = v.get("outstanding", "")
        if case == "held" and out not in ("", "0", str(HELD)):
            case = "held (%s outstanding: the engine's cap)" % out
        table.append([v.get("engine", "?"), case, v.get("thread", "?"),
                      n("instructions"), n("locked"), n("tsc_reads"), n("clock_reads"),
                      n("d1_misses"), n("ll_misses")])
    return header, table


def x_structure(d):
    """["wheel: seed 0.76x, held 2.76x", ...] from DIR/instructions.json."""
    path = os.path.join(d, "instructions.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        xs = json.load(f).get("x_structure", {})
    return ["%s: %s" % (e, ", ".join("%s %.2fx" % (c, v) for c, v in r.items()))
            for e, r in xs.items()]


# ---- REPORT.md -------------------------------------------------------------------------

# (name, title, what it shows, why it may be missing)
PLOTS = [
    ("ns_per_op", "Seed benchmark",
     "arm + cancel of a 1 s timeout around an empty block, median of rounds, one thread, "
     "log scale, each engine in its colour (the same in every plot) with the interquartile "
     "range over the rounds; beside each engine the in-run floor (an uncontended CAS pair)",
     "no throughput rows"),
    ("thread_scaling", "Thread scaling",
     "aggregate pairs/s against threads, one panel per case (each thread arming and "
     "cancelling its own timer; timers held 1 ms), every engine in its colour on one shared "
     "log scale, bars: the interquartile range over repetitions; dashed: the ideal (one "
     "thread's rate times the threads); dotted: the machine's cores",
     "no throughput rows with threads=N"),
    ("live_timers", "Live timers",
     "the seed benchmark with 1e3 / 1e5 / 1e6 other timers armed (60-3600 s), log-log",
     "no throughput live_ns_per_op rows"),
    ("lateness_cdf", "Lateness CDF",
     "expiry: callback start - deadline, random deadlines, each engine's largest size",
     "no expiry rows"),
    ("retention", "Retention",
     "120 s timeouts cancelled ~1 ms after arming: engine-held bytes at the peak, after the "
     "cancels, settled, and with every timeout abandoned",
     "no retention rows"),
    ("instructions", "Instructions per arm+cancel",
     "instructions one arm+cancel costs per engine: in total, on the arming thread, on the "
     "timer thread (DIR/instructions.csv)",
     "DIR/instructions.csv not found: scripts/instructions DIR measures it"),
]


def git_commit():
    """The commit of the scripts that draw the report ("-dirty" when
    scripts/ has uncommitted changes; the results being drawn do not
    count)."""
    here = os.path.dirname(os.path.abspath(__file__))
    git = ["git", "--no-optional-locks", "-C", here]
    try:
        c = subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
        clean = subprocess.run(git + ["diff", "--quiet", "HEAD", "--", ".."],
                               capture_output=True).returncode == 0
        return c if clean else c + "-dirty"
    except (OSError, subprocess.CalledProcessError):
        return None


def machine_lines(docs):
    host, model, cpus, mhz, loads = set(), set(), set(), set(), []
    for name, doc in docs:
        c = doc.get("context", {})
        m = c.get("tmo", {}).get("machine", {})
        if c.get("host_name"):
            host.add(c["host_name"])
        if m.get("cpu_model"):
            model.add(m["cpu_model"])
        if m.get("cpus_online") or c.get("num_cpus"):
            cpus.add(int(m.get("cpus_online") or c.get("num_cpus")))
        if c.get("mhz_per_cpu"):
            mhz.add(c["mhz_per_cpu"])
        start = m.get("load_avg_start") or c.get("load_avg")
        end = m.get("load_avg_end")
        if start:
            loads.append((name, start[0], end[0] if end else None))
    out = []
    out.append("- **Machine:** %s; %s CPUs; CPU model %s%s" % (
        ", ".join(sorted(host)) or "host not recorded",
        "/".join(str(x) for x in sorted(cpus)) or "?",
        "; ".join(sorted(model)) if model else "not recorded",
        "; %s MHz" % "/".join(str(x) for x in sorted(mhz)) if mhz else ""))
    if loads:
        lo = min(min(l[1], l[2] if l[2] is not None else l[1]) for l in loads)
        hi = max(max(l[1], l[2] if l[2] is not None else l[1]) for l in loads)
        detail = ", ".join("%s %.2f%s" % (n, s, " to %.2f" % e if e is not None else "")
                           for n, s, e in loads)
        out.append("- **Load average (1 min):** %.2f-%.2f over the runs (%s)" % (lo, hi, detail))
    else:
        out.append("- **Load average:** not recorded")
    return out


def report(d, summary=False):
    docs = dir_docs(d)
    rows = rows_of(docs)
    engines = engines_of(docs)
    out = []
    title = os.path.basename(os.path.normpath(d))
    out.append("# Results: %s" % title if not summary else "## Results: %s" % title)
    out.append("")
    out.append("Written by `scripts/plot %s` from the harness's JSON files here; the plots "
               "are in `plots/`." % d)
    out.append("")
    commits = sorted({doc.get("context", {}).get("tmo", {}).get("commit")
                      for _, doc in docs} - {None})
    here = git_commit()
    if commits:
        out.append("- **Commit:** %s (recorded by the harness)" % ", ".join(
            "`%s`" % c for c in commits))
    else:
        note = ("; README.md here names the commits" if os.path.exists(
            os.path.join(d, "README.md")) else "")
        out.append("- **Commit:** not recorded in these files (they predate the harness "
                   "recording it%s); drawn by the scripts at `%s`" % (note, here or "unknown"))
    out.extend(machine_lines(docs))
    quick = sorted({bool(doc.get("context", {}).get("tmo", {}).get("quick")) for _, doc in docs})
    threads = sorted({doc.get("context", {}).get("tmo", {}).get("threads") for _, doc in docs}
                     - {None})
    dates = sorted(doc.get("context", {}).get("date") for _, doc in docs
                   if doc.get("context", {}).get("date"))
    out.append("- **Runs:** %d file%s, %s sizes, --threads=%s%s" % (
        len(docs), "" if len(docs) == 1 else "s",
        " and ".join("--quick" if q else "full" for q in quick) or "?",
        "/".join(str(t) for t in threads) or "?",
        ", %s to %s" % (dates[0], dates[-1]) if dates else ""))
    incomplete = [n for n, doc in docs if doc.get("complete") is False]
    if incomplete:
        out.append("- **Incomplete:** %s (interrupted or stopped: only the runs that finished)"
                   % ", ".join("`%s.json`" % n for n in incomplete))

    # Runs: scenario x engine.
    runs = {}
    for _, doc in docs:
        for r in doc.get("runs", []):
            runs[(r["scenario"], r["engine"])] = r
    scen = []
    for _, doc in docs:
        for r in doc.get("runs", []):
            if r["scenario"] not in scen:
                scen.append(r["scenario"])
    # Skipped: a per-user resource other processes held (the run says why).
    skipped = [r for r in runs.values() if r.get("status") == "skipped"]
    bad = [r for r in runs.values() if r.get("status") not in ("ok", "skipped")]
    out.append("- **Verdict:** %d runs, %s%s" % (
        len(runs), "all clean" if not bad else "%d not clean: %s" % (
            len(bad), ", ".join("%s/%s (%s)" % (r["scenario"], r["engine"], run_cell(r))
                                for r in bad)),
        "" if not skipped else "; %d skipped: %s" % (
            len(skipped), "; ".join("%s/%s (%s)" % (r["scenario"], r["engine"],
                                                     r.get("reason", "?"))
                                    for r in skipped))))
    out.append("")
    out.append("## Runs")
    out.append("")
    out.append(md_table(["scenario"] + engines,
                        [[s] + [run_cell(runs.get((s, e))) for e in engines] for s in scen],
                        ["---"] + [":---:"] * len(engines)))
    out.append("")

    out.append("## Figures")
    out.append("")
    h, t = throughput_figures(rows, engines)
    if t:
        out.append("Seed benchmark, one thread, median of rounds; \"x floor\": times an "
                   "uncontended CAS pair measured in the same rounds.  Compare engines "
                   "within one run: figures move between runs on a shared machine.")
        out.append("")
        out.append(md_table(h, t))
        out.append("")
    h, t = glance_figures(rows, engines)
    if t:
        out.append(md_table(h, t))
        out.append("")
    h, t = service_figures(rows, engines)
    if t:
        out.append("Service: requests holding 1-4 timeouts (100 ms..120 s) for a log-normal "
                   "service time (median 1 ms, p99 50 ms), 1 % outliving one; CPU per request "
                   "is the process's (getrusage); the engine's, that less the harness's own "
                   "(one worker, no engine); on its threads, what ran off the workers; "
                   "lateness of the timeouts that fired.")
        out.append("")
        out.append(md_table(h, t, ["---", "---:"] + ["---:"] * (len(h) - 2)))
        out.append("")
    h, t = counts_figures(d)
    if t:
        out.append("Counts per pair that no machine changes (`scripts/instructions`: "
                   "callgrind, user space; seed: arm+cancel at once; held: 10,000 "
                   "outstanding; the arming thread's exact, the timer thread's following the "
                   "run's length): instructions, locked (read-modify-write) instructions, TSC "
                   "and clock reads, data cache misses of a fixed 32 KiB / 8 MiB cache.  "
                   "structure:KIND: the structure wheel (wheel), condvar (heap) or mpsc "
                   "(near_far) files in, alone, through the same loops, a clock read a "
                   "100 pairs.")
        out.append("")
        out.append(md_table(h, t, ["---", "---", "---"] + ["---:"] * (len(h) - 3)))
        out.append("")
        xs = x_structure(d)
        if xs:
            out.append("x structure, in instructions (the engine's pair, both threads, over "
                       "its structure's): " + "; ".join(xs) + ".")
            out.append("")
    if not rows:
        out.append("No rows.")
        out.append("")

    if rows:  # scripts/lib/field.py: every engine, shape by shape
        import field
        out.extend(field.peers_section(docs, rows, engines))

    out.append("## Targets")
    out.append("")
    targets = [x for _, doc in docs for x in doc.get("targets", [])]
    if targets:
        out.append(md_table(["target", "measured", "wanted", "verdict"], [
            [x["target"], fmt(x["measured"] if isinstance(x.get("measured"), (int, float))
                              else math.nan, x.get("unit", "")),
             "%s %s%s" % (x["op"], fmt(float(x["wanted"])), x.get("unit", "")),
             x["verdict"]] for x in targets], ["---", "---:", "---:", "---"]))
        met = sum(1 for x in targets if x["verdict"] == "met")
        out.append("")
        out.append("%d of %d met (targets are reported, never asserted)." % (met, len(targets)))
    else:
        out.append("None in these files (the throughput, retention and race runs report them).")
    out.append("")

    out.append("## Violations")
    out.append("")
    viol = [(doc_name, v) for doc_name, doc in docs for v in doc.get("violations", [])]
    if viol:
        for _, v in viol:
            out.append("- `%s/%s`: %s" % (v["scenario"], v["engine"], v["message"]))
    else:
        out.append("None.")
    out.append("")

    if summary:
        out.append("Plots: in the artifact (`plots/*.png`, `plots/*.svg`, `REPORT.md`).")
        return "\n".join(out) + "\n"
    out.append("## Plots")
    out.append("")
    for name, ttl, what, missing in PLOTS:
        svg = os.path.join(d, "plots", name + ".svg")
        if os.path.exists(svg):
            out.append("### %s" % ttl)
            out.append("")
            out.append(what[0].upper() + what[1:] + ".")
            out.append("")
            out.append("![%s](plots/%s.svg)" % (ttl, name))
        else:
            out.append("### %s: not drawn" % ttl)
            out.append("")
            out.append("Not drawn: %s." % missing.replace("DIR/", ""))
        out.append("")
    return "\n".join(out)


def run_cell(r):
    if r is None:
        return ""
    st = r.get("status")
    if st in ("ok", "skipped"):
        return st
    if st == "violations":
        n = r.get("result", 0)
        return "**%d violation%s**" % (n, "" if n == 1 else "s")
    return "**%s**" % (r.get("error") or st or "?")


# ---- compare ----------------------------------------------------------------------

LOWER_BETTER = ("ns", "bytes", "us", "ms", "s", "count")

# Rows compared by default: (scenario, metric regex, param keys that must be
# present, or None).  --all compares every row both runs have.
HEADLINE = [
    ("throughput", r"^seed_median_ns_per_op$"),
    ("throughput", r"^floor_ns_per_op$"),
    ("throughput", r"_per_s$"),
    ("throughput", r"^live_ns_per_op$"),
    ("expiry", r"^lateness_ns$"),
    ("retention", r"^held_bytes$"),
    ("sustain", r"^(held_bytes_max|pairs_per_s)$"),
    ("race", r"^arms_per_s$"),
    ("smoke", r"^arm_cancel_ns_per_op$"),
    ("actors", r"^receive_after_ns$"),
]


def headline(key):
    sc, _, metric, p = key
    if sc == "expiry" and params(p).get("q") != "p99":
        return False
    if sc == "retention" and params(p).get("when") not in ("settled",):
        return False
    return any(sc == s and re.search(m, metric) for s, m in HEADLINE)


def units_of(docs):
    u = {}
    for _, doc in docs:
        for row in doc.get("rows", []):
            u[(row["scenario"], row["engine"], row["metric"], row.get("param", ""))] = row.get(
                "unit", "")
    return u


def change(old, new, unit):
    """'1.32x slower' / '1.10x faster' / 'same' for a figure whose unit
    says which way is better; the ratio alone otherwise."""
    if not num(old) or not num(new):
        return "-"
    if old == 0 or new == 0:
        return "same" if old == new else "-"
    r = new / old
    lower = unit in LOWER_BETTER
    higher = unit.endswith("/s")
    if not lower and not higher:
        return "x%.2f" % r
    if abs(r - 1) < 0.005:
        return "same"
    better = (r < 1) if lower else (r > 1)
    word = ("better" if better else "worse") if unit in ("bytes", "count") else (
        "faster" if better else "slower")
    return "%.2fx %s" % (max(r, 1 / r), word)


# Units of times and rates: what a different machine makes incomparable.
MACHINE_BOUND = ("ns", "us", "ms", "s")


def instance_range(rows, k):
    """(min, max) over the --repeat instances of row k, from its
    "instances=N,stat=min|max" siblings; None for a run of one instance or
    a row that is itself such a statistic."""
    sc, e, m, p = k
    if "stat=" in p:
        return None
    pre = p + "," if p else ""
    lo = hi = None
    for (sc2, e2, m2, p2), v in rows.items():
        if (sc2, e2, m2) != (sc, e, m) or not p2.startswith(pre + "instances=") or not num(v):
            continue
        if p2.endswith(",stat=min"):
            lo = v
        elif p2.endswith(",stat=max"):
            hi = v
    return None if lo is None or hi is None else (lo, hi)


def spread_word(orows, nrows, k, drift=0.0):
    """Row k's verdict from the two runs' instance ranges: "within noise"
    when they overlap (the change is inside what one binary's fresh
    instances already differ by) or the medians differ by less than
    MIN_EFFECT; "within noise (drift)" when they differ by less than
    `drift` either way (the machine's drift between the runs, measured by
    the controls: compare_runs.py, drift_floor); "beyond the ranges"
    otherwise; "-" without ranges."""
    a, b = instance_range(orows, k), instance_range(nrows, k)
    if a is None or b is None:
        return "-"
    o, n = orows[k], nrows[k]
    small = num(o) and num(n) and o != 0 and abs(n / o - 1) < MIN_EFFECT
    if (a[0] <= b[1] and b[0] <= a[1]) or small:
        return "within noise"
    if num(o) and num(n) and o > 0 and n > 0 and max(n / o, o / n) - 1 < drift:
        return "within noise (drift)"
    return "beyond the ranges"


def compare(old, new, all_rows=False, markdown=False, other_machine=False):
    def docs_of(p):
        if os.path.isdir(p):
            return dir_docs(p)
        return [(os.path.splitext(os.path.basename(p))[0], load(p))]
    od, nd = docs_of(old), docs_of(new)
    orows, nrows = rows_of(od), rows_of(nd)
    # the machine's drift between the runs (MIN_EFFECT without controls)
    drift = 0.0 if other_machine else drift_floor(samples(od), samples(nd))[0]
    units = units_of(od)
    units.update(units_of(nd))
    common = [k for k in nrows if k in orows and (all_rows or headline(k))]
    engines = engines_of(nd) + [e for e in engines_of(od) if e not in engines_of(nd)]
    order = {e: i for i, e in enumerate(engines)}
    scen_order = {}
    for _, doc in nd + od:
        for r in doc.get("runs", []):
            scen_order.setdefault(r["scenario"], len(scen_order))

    def sort_key(k):
        # scenario, then the headline list's order, then the param's keys
        # and numbers (threads=1 before threads=2), then the engine.
        kv = params(k[3])
        nums = [float(v) if re.match(r"^-?[0-9.]+$", v) else 0 for v in kv.values()]
        rank = next((i for i, (sc, m) in enumerate(HEADLINE)
                     if sc == k[0] and re.search(m, k[2])), len(HEADLINE))
        return (scen_order.get(k[0], 99), rank, k[2], sorted(kv), nums, order.get(k[1], 99))
    common.sort(key=sort_key)
    table = []
    for k in common:
        u = units.get(k, "")
        table.append([k[0], k[1], k[2] + ("" if not k[3] else " " + k[3]),
                      fmt(orows[k]) + (" " + u if u else ""), fmt(nrows[k]) + (" " + u if u else ""),
                      "not comparable" if other_machine and (u in MACHINE_BOUND or u.endswith("/s"))
                      else change(orows[k], nrows[k], u),
                      spread_word(orows, nrows, k, drift)])
    header = ["scenario", "engine", "figure", "old", "new", "new vs old", "verdict (instances)"]
    out = []
    qo = {bool(doc.get("context", {}).get("tmo", {}).get("quick")) for _, doc in od}
    qn = {bool(doc.get("context", {}).get("tmo", {}).get("quick")) for _, doc in nd}
    title = "Rows side by side: %s (old) vs %s (new)" % (old, new)
    out.append(("### " if markdown else "== ") + title + ("" if markdown else " =="))
    if markdown:
        out.append("")
    if qo != qn:
        out.append("Note: one run used --quick sizes and the other full sizes; figures that "
                   "depend on size (expiry's n, retention's requests) compare only where "
                   "the sizes match.")
        if markdown:
            out.append("")
    if other_machine:
        out.append("Note: the runs were made on different machines (scripts/compare said "
                   "which): times and rates are not comparable; ratios, bytes and counts are.")
        if markdown:
            out.append("")
    if not table:
        out.append("No row is in both runs%s." % ("" if all_rows else " (try --all)"))
    else:
        out.append(md_table(header, table, ["---", "---", "---", "---:", "---:", "---", "---"])
                   if markdown else text_table(header, table, left=3))
    only = len([k for k in nrows if k not in orows]) + len([k for k in orows if k not in nrows])
    out.append("")
    ranged = [r[-1] for r in table if r[-1] != "-"]
    if ranged:
        out.append("Verdict from the instances' ranges (--repeat: min..max over the fresh "
                   "engine instances of each run): %d of %d rows within noise (the ranges "
                   "overlap, or the change is under %d %%%s), %d beyond the ranges.  Rows "
                   "without a range: one instance, or a figure no instance repeats; the "
                   "benchmarks' verdicts above carry the test." % (
                       sum(1 for v in ranged if v.startswith("within noise")), len(ranged),
                       100 * MIN_EFFECT,
                       "" if drift <= MIN_EFFECT else ", or under the %.1f %% the controls "
                       "drifted by: %d rows" % (100 * drift, ranged.count("within noise (drift)")),
                       ranged.count("beyond the ranges")))
    else:
        out.append("No row has an instances' range (runs of one instance: --repeat=N gives "
                   "one); \"new vs old\" is the ratio alone, and the benchmarks' verdicts "
                   "above carry the test of noise.")
    out.append("%d figures compared%s; %d rows are in one run only.  Speed is information, "
               "never a failure: compare engines within one run." % (
                   len(table), "" if all_rows else " (headline rows; --all: every row)", only))
    return "\n".join(out) + "\n"


def main(argv):
    if argv and argv[0] == "metrics-check":
        check_metrics(argv[1:])
        return 0
    check_metrics()
    if len(argv) >= 2 and argv[0] == "report":
        text = report(argv[1], summary="--summary" in argv[2:])
        if "--summary" in argv[2:]:
            sys.stdout.write(text)
        else:
            path = os.path.join(argv[1], "REPORT.md")
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            print("plot: %s" % path)
        return 0
    if len(argv) >= 3 and argv[0] == "compare":
        sys.stdout.write(compare(argv[1], argv[2], all_rows="--all" in argv[3:],
                                 markdown="--markdown" in argv[3:],
                                 other_machine="--other-machine" in argv[3:]))
        return 0
    if len(argv) == 2 and argv[0] == "cores":
        print(cores(dir_docs(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "scaling":
        # engine case threads value, one line each (scripts/plot's data)
        for (e, case), s in sorted(scaling_series(rows_of(dir_docs(argv[1]))).items()):
            for t in sorted(s):
                print(e, case, t, s[t])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
