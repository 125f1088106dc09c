"""Two harness runs compared the way a benchmark user can trust
(scripts/compare runs this first):

    /usr/bin/python3 scripts/lib/compare_runs.py OLD NEW [--markdown]

OLD and NEW are JSON files the harness wrote, or two directories of them.

1. The machines.  Each run's context records the CPU model, the CPUs
   online, the kernel, the architecture, the load average at its start and
   end, the host and the commit.  They are printed side by side, and a
   difference is said in words.  Runs on different CPUs (model, count or
   architecture) are DIFFERENT MACHINES: their absolute times are not
   comparable, and only the ratios measured inside each run are compared.
2. The benchmarks (Google Benchmark's entries in "benchmarks"), judged
   by process when both runs made their --repeat instances each in a
   process of its own (the entries carry "tmo_pid": kit/instance.c) and
   a benchmark came from two processes or more a side: each process's
   median is one sample, a side's figure the median of those, its spread
   theirs, and the 95 % interval of the change a two-level bootstrap (the
   processes resampled, then each drawn one's repetitions).  Verdict:
   "faster" or "slower" when the interval excludes no change and the
   change is at least MIN_EFFECT, else "within noise": a figure that moves
   between processes of one binary (where the engine's threads land, the
   pages it gets) is not a change, however tight its repetitions inside
   each process (results/2026-12-04-epyc2-fafcb22: two processes a side
   told such moves for changes).  Otherwise (one process a side, or
   files from before): every repetition of each benchmark in both runs
   (its "iteration" entries, pooled), the median and spread (IQR / median)
   of each side, the change of the median with a 95 % bootstrap
   confidence interval, and a two-sided Mann-Whitney U test.  Verdict:
   "faster" or "slower" when p < ALPHA and the change is at least
   MIN_EFFECT (a shift smaller than that is within what a shared machine
   does to one binary from run to run); "within noise" otherwise;
   "undecided" when the repetitions are too few for the test to reach
   ALPHA at all (3 against 3 cannot).  In both: "as the controls" when the row's
   engine's own controls (its empty loop and CAS floor) both moved beyond
   noise by about the same amount and the row moved within MIN_EFFECT of
   that: the machine changed in that engine's stretch (with_machine).
   And the controls of every engine together measure how far the machine
   drifted between the two runs: a row is called faster or slower only
   when it moved more than DRIFT_Q of the controls did (with_drift; one
   instance a side at full size, the controls moved 5-11 % on a shared
   VM while each run's repetitions spread 1-2 %).  Same machine only;
   the same floor applies to the ratios (3.) and to the harness's rows
   side by side (results.py, spread_word).
3. The in-run ratios, per engine (any machines): x floor (the seed
   benchmark's repetition over the CAS floor's of the same index: the
   harness runs the two interleaved over one stretch of the run; judged as
   the benchmarks are), x condvar (its rounds over the
   condvar engine's median seed) and x structure (over the engine's
   structure benchmark, where the run has one).  The last two divide by a
   figure measured in another stretch of the run: the reference's
   repetitions are resampled with the engine's in the bootstrap, and the
   verdict comes from that interval and MIN_EFFECT (judge_over).  On one
   machine a ratio that moved less than the drift floor is within noise
   (drift): its two stretches of each run drifted as the controls did,
   and the floor's own loop, though interleaved with the seed, does not
   see what moves a loop thread's cost (where the loop thread runs).
Exit status 0, or 2 when a file cannot be read.  Information only.
"""

import json
import math
import os
import random
import re
import statistics
import sys

ALPHA = 0.01
MIN_EFFECT = 0.05
BOOTSTRAP = 1000
DRIFT_Q = 0.9
CPU_KEYS = ("cpu_model", "cpus_online", "arch")


def docs_of(p):
    """[(name, document)] of a file or a directory of the harness's JSON."""
    if os.path.isdir(p):
        names = sorted(f for f in os.listdir(p) if f.endswith(".json"))
        paths = [os.path.join(p, f) for f in names]
    else:
        paths = [p]
    out = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if isinstance(doc, dict) and "context" in doc:
            out.append((os.path.splitext(os.path.basename(path))[0], doc))
    return out


def machine(docs):
    """What the runs recorded about their machine (each field from the
    first document that records it; the load averages of all)."""
    m = {}
    loads = []
    for _, doc in docs:
        ctx = doc.get("context", {})
        tm = ctx.get("tmo", {})
        mm = tm.get("machine", {})
        this = {"cpu_model": mm.get("cpu_model"), "cpus_online": mm.get("cpus_online", ctx.get("num_cpus")),
                "arch": mm.get("arch"), "kernel": mm.get("kernel"), "host": ctx.get("host_name"),
                "commit": tm.get("commit"), "mhz": ctx.get("mhz_per_cpu")}
        for k, v in this.items():  # the first document that records each
            if m.get(k) is None:
                m[k] = v
        for k in ("load_avg_start", "load_avg_end"):
            if isinstance(mm.get(k), list) and mm[k]:
                loads.append(mm[k][0])
    m["load"] = (min(loads), max(loads)) if loads else None
    return m


def machine_report(mo, mn):
    """(lines, same_cpu)."""
    rows = [("CPU model", "cpu_model"), ("CPUs online", "cpus_online"), ("architecture", "arch"),
            ("kernel", "kernel"), ("host", "host"), ("MHz (Google Benchmark)", "mhz"),
            ("commit", "commit")]
    lines = ["%-24s %-34s %s" % ("", "old", "new")]
    diffs = []
    for label, k in rows:
        a, b = mo.get(k), mn.get(k)
        lines.append("%-24s %-34s %s" % (label, "-" if a is None else a, "-" if b is None else b))
        if a is not None and b is not None and a != b and k not in ("commit", "host"):
            diffs.append(label)
    fl = lambda l: "-" if l is None else "%.2f..%.2f" % l  # noqa: E731
    lines.append("%-24s %-34s %s" % ("load average (1 min)", fl(mo["load"]), fl(mn["load"])))
    # A key one run does not record (older harnesses had no arch) is left
    # out; the CPU model must be in both.
    keys = [k for k in CPU_KEYS if mo.get(k) is not None and mn.get(k) is not None]
    same_cpu = mo.get("cpu_model") is not None and all(mo.get(k) == mn.get(k) for k in keys)
    if not same_cpu:
        why = ", ".join(l for l, k in rows if k in keys and mo.get(k) != mn.get(k))
        lines.append("DIFFERENT MACHINES (%s): absolute times are NOT comparable; only the "
                     "ratios measured inside each run are compared." % (
                         why or "a run does not record its CPU"))
    elif diffs:
        lines.append("Same CPU, but the %s differ (a kernel changes what system calls and "
                     "wake-ups cost, a clock rate every time): absolute times are compared with "
                     "that caveat." % ", ".join(diffs))
    else:
        lines.append("Same machine (%s)." % ", ".join(
            l for l, k in rows if k in keys + ["kernel"] and mo.get(k) is not None
            and mn.get(k) is not None))
    for side, m in (("old", mo), ("new", mn)):
        cpus = m.get("cpus_online") or 0
        if m["load"] and cpus and m["load"][1] > 0.5 * cpus:
            lines.append("The %s run's machine was loaded (load average up to %.2f on %d CPUs): "
                         "its times carry other processes' work." % (side, m["load"][1], cpus))
    return lines, same_cpu


class Reps(list):
    """A benchmark's repetitions (real time in ns, or a ratio), pooled in
    repetition order.  procs: the same split by process ({pid: [values]},
    --repeat's instances each in a process of its own: the entries'
    "tmo_pid"), or None when they came from fewer than two processes."""
    procs = None


def reps(pooled, procs=None):
    r = Reps(pooled)
    r.procs = procs if procs and len(procs) >= 2 else None
    return r


def samples(docs):
    """{benchmark name: Reps of its real times in ns, one per repetition}."""
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    out = {}
    for _, doc in docs:
        for b in doc.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or "real_time" not in b:
                continue
            out.setdefault(b["name"], []).append(
                (b.get("repetition_index", 0), b.get("tmo_pid"),
                 b["real_time"] * scale.get(b.get("time_unit", "ns"), 1)))
    res = {}
    for k, s in out.items():
        s.sort(key=lambda x: x[0])
        procs = {}
        for _, pid, v in s:
            if pid is not None:
                procs.setdefault(pid, []).append(v)
        res[k] = reps([v for _, _, v in s], procs if sum(map(len, procs.values())) == len(s)
                      else None)
    return res


def by_process(*ss):
    """Every sample came from two processes or more: judged by process."""
    return all(getattr(x, "procs", None) for x in ss)


def proc_medians(s):
    return [statistics.median(v) for v in s.procs.values()]


def center(s, hier):
    """The figure a side shows: the median of its processes' medians when
    judged by process (hier: by_process of every sample compared), else the
    median of every repetition."""
    return statistics.median(proc_medians(s)) if hier else statistics.median(s)


def draw(s, rng, hier):
    """One bootstrap draw of center(s): by process, the processes resampled,
    then each drawn one's repetitions (a two-level bootstrap: the spread
    between processes and within each both widen the interval)."""
    if not hier:
        return statistics.median(rng.choices(s, k=len(s)))
    groups = rng.choices(list(s.procs.values()), k=len(s.procs))
    return statistics.median(statistics.median(rng.choices(g, k=len(g))) for g in groups)


def utest(a, b):
    """Two-sided Mann-Whitney U p-value (scipy), None without scipy."""
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def min_p(n1, n2):
    """The smallest two-sided p the exact U test can give for these sizes."""
    c = 1
    for i in range(n1):
        c = c * (n1 + n2 - i) // (i + 1)
    return 2.0 / c


def boot_ci(a, b, rng, ra=None, rb=None):
    """95 % bootstrap interval of center(b) / center(a) - 1; with
    references ra and rb, of the ratios (center(b) / center(rb)) /
    (center(a) / center(ra)) - 1, every sample resampled (draw: by process
    when every sample has processes)."""
    hier = by_process(*[x for x in (a, b, ra, rb) if x is not None])

    def med(s):
        return draw(s, rng, hier)
    r = []
    for _ in range(BOOTSTRAP):
        if ra is None:
            ma = med(a)
            mb = med(b)
        else:  # the new side first: the ratio rows draw in this order
            mb = med(b) / med(rb)
            ma = med(a) / med(ra)
        r.append(mb / ma - 1 if ma else 0.0)
    r.sort()
    return r[int(0.025 * len(r))], r[int(0.975 * len(r)) - 1]


def moved(ch, lo, hi, lower_better):
    """"faster" or "slower" for a change of at least MIN_EFFECT whose
    interval excludes zero, else None."""
    if abs(ch) >= MIN_EFFECT and (lo > 0 or hi < 0):
        return "slower" if (ch > 0) == lower_better else "faster"
    return None


def spread(s):
    """IQR / median, as a fraction."""
    if len(s) < 2:
        return 0.0
    q = statistics.quantiles(s, n=4)
    m = statistics.median(s)
    return (q[2] - q[0]) / m if m else 0.0


def judge(a, b, rng, lower_better=True):
    """A row's figures and verdict for samples a (old) and b (new).  By
    process (both sides from two processes or more): the centers are the
    medians of the processes' medians, the spread theirs, the verdict from
    the two-level bootstrap interval and MIN_EFFECT; the U test over the
    process medians is shown, not used (3 against 3 cannot reach ALPHA)."""
    hier = by_process(a, b)
    ma, mb = center(a, hier), center(b, hier)
    ch = mb / ma - 1 if ma else 0.0
    lo, hi = boot_ci(a, b, rng)
    if hier:
        pa, pb = proc_medians(a), proc_medians(b)
        return {"old": ma, "new": mb, "so": spread(pa), "sn": spread(pb), "ch": ch, "lo": lo,
                "hi": hi, "p": utest(pa, pb), "verdict": moved(ch, lo, hi, lower_better) or
                "within noise", "procs": (len(pa), len(pb))}
    p = utest(a, b)
    if len(a) < 3 or len(b) < 3 or min_p(len(a), len(b)) >= ALPHA:
        v = "undecided (n=%d/%d)" % (len(a), len(b))
    elif p is None:
        v = "undecided (no scipy)"
    else:
        v = (p < ALPHA and moved(ch, lo, hi, lower_better)) or "within noise"
    return {"old": ma, "new": mb, "so": spread(a), "sn": spread(b), "ch": ch, "lo": lo, "hi": hi,
            "p": p, "verdict": v}


NAME = re.compile(r"^(?P<scen>[^/]+)/(?P<engine>[^/]+)/(?:(?P<case>.+)/)?threads:(?P<t>\d+)$")


def parse(name):
    m = NAME.match(name)
    return None if m is None else (m["scen"], m["engine"], m["case"] or "threads", int(m["t"]))


def is_control(name):
    """A benchmark that measures no engine: an engine's empty loop or CAS
    floor."""
    p = parse(name)
    return p is not None and p[2] in ("empty", "floor")


def judge_over(a, ra, b, rb, rng, lower_better=True):
    """A ratio row whose reference was measured in another stretch of the
    run (x condvar: condvar's own seed benchmark; x structure: the
    structure's): the samples a, b (old, new: the engine's repetitions) over
    the median of the reference's repetitions ra, rb.  Both are resampled
    in the bootstrap, so a reference that moved between the runs widens the
    interval instead of moving every engine's row at once; the verdict
    comes from that interval (no U test: the ratio of two independent
    samples has none) and MIN_EFFECT."""
    hier = by_process(a, ra, b, rb)
    ma, mb = center(a, hier) / center(ra, hier), center(b, hier) / center(rb, hier)
    ch = mb / ma - 1 if ma else 0.0
    lo, hi = boot_ci(a, b, rng, ra, rb)
    if min(len(a), len(b), len(ra), len(rb)) < 3 and not hier:
        v = "undecided (n=%d/%d)" % (len(a), len(b))
    else:
        v = moved(ch, lo, hi, lower_better) or "within noise"
    sa = [x / center(ra, hier) for x in (proc_medians(a) if hier else a)]
    sb = [x / center(rb, hier) for x in (proc_medians(b) if hier else b)]
    return {"old": ma, "new": mb, "so": spread(sa), "sn": spread(sb), "ch": ch, "lo": lo, "hi": hi,
            "p": None, "verdict": v}


def ratio_samples(s, engines):
    """{(engine, 'x floor'|'x condvar'|'x structure'): (samples, reference)}:
    x floor's samples are per-repetition ratios (the seed's and the floor's
    repetitions run interleaved over one stretch) and its reference None;
    the others' samples are the seed's repetitions and the reference the
    repetitions it is divided by."""
    out = {}
    by = {}
    for name, v in s.items():
        p = parse(name)
        if p and p[3] == 1:
            by[(p[1], p[2])] = v
    ref = by.get(("condvar", "seed"))
    for e in engines:
        seed = by.get((e, "seed"))
        if not seed:
            continue
        floor = by.get((e, "floor"))
        if floor and len(floor) == len(seed):
            procs = None
            if by_process(seed, floor) and seed.procs.keys() == floor.procs.keys():
                procs = {k: [x / f for x, f in zip(v, floor.procs[k]) if f]
                         for k, v in seed.procs.items()}
            out[(e, "x floor")] = (reps([x / f for x, f in zip(seed, floor) if f], procs), None)
        if ref and e != "condvar":
            out[(e, "x condvar")] = (seed, ref)
        struct = next((v for (en, c), v in by.items()
                       if en == e and c.startswith("structure:") and c.endswith("/seed")), None)
        if struct:
            out[(e, "x structure")] = (seed, struct)
    return out


def engines_in(s):
    seen = []
    for name in s:
        p = parse(name)
        if p and p[1] not in seen:
            seen.append(p[1])
    return seen


def fmt_ns(v):
    return "%.3g us" % (v / 1e3) if v >= 1e4 else "%.3g ns" % v


def row_text(label, j, unit_fmt):
    p = "-" if j["p"] is None else "%.3f" % j["p"]
    return [label, "%s ±%.0f%%" % (unit_fmt(j["old"]), 50 * j["so"]),
            "%s ±%.0f%%" % (unit_fmt(j["new"]), 50 * j["sn"]),
            "%+.1f%% [%+.1f, %+.1f]" % (100 * j["ch"], 100 * j["lo"], 100 * j["hi"]), p, j["verdict"]]


def table(header, rows, markdown):
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return out
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in [header] + rows]


def tally(rows):
    n = len(rows)
    c = {}
    for r in rows:
        c[r[-1].split(" ")[0]] = c.get(r[-1].split(" ")[0], 0) + 1
    noise = c.get("within", 0)
    machine = c.get("as", 0)
    return n, "%d rows: %d faster, %d slower, %d within noise (%.0f %%), %s%d undecided" % (
        n, c.get("faster", 0), c.get("slower", 0), noise, 100.0 * noise / n if n else 0,
        "%d as their engine's controls moved (%.0f %%), " % (machine, 100.0 * machine / n)
        if machine else "", c.get("undecided", 0))


def controls(rows):
    """The benchmarks that measure no engine (the empty loop, the CAS
    floor): when they move, the machine's state moved between the runs, and
    the other verdicts carry that."""
    ctl = [r for r in rows if is_control(r[0])]
    moved = [r for r in ctl if r[-1] in ("faster", "slower")]
    if not ctl:
        return []
    if not moved:
        return ["Controls (the empty loop, the CAS floor: no engine in them): all %d within "
                "noise." % len(ctl)]
    return ["Controls (the empty loop, the CAS floor: no engine in them): %d of %d moved "
            "beyond noise (%s): the machine's state changed between the runs (load, "
            "frequency, neighbours), which repetitions inside one run cannot show; read "
            "the verdicts above with that in mind." % (
                len(moved), len(ctl), ", ".join("%s %s" % ("/".join(r[0].split("/")[1:3]), r[3].split(" ")[0])
                                                for r in moved))]


def with_machine(common, judged):
    """Each engine's controls (its empty loop and CAS floor, run interleaved
    with its seed) measure the machine during that engine's stretch of the
    run.  When they moved beyond noise, by about the same amount, a row of
    that engine that moved within MIN_EFFECT of their shift is the machine's
    doing, not the engine's: its verdict becomes "as the controls" (the
    shift shown).  A row that moved otherwise keeps faster or slower."""
    shift = {}
    for k in common:
        if is_control(k) and judged[k]["verdict"] in ("faster", "slower"):
            shift.setdefault(parse(k)[1], []).append(judged[k]["ch"])
    for k in common:
        p = parse(k)
        j = judged[k]
        ctl = shift.get(p[1]) if p and not is_control(k) else None
        if not ctl or len(ctl) < 2 or max(ctl) - min(ctl) >= MIN_EFFECT:
            continue  # both controls moved, together, or no shift to name
        m = sum(ctl) / len(ctl)
        if j["verdict"] in ("faster", "slower") and abs(j["ch"] - m) < MIN_EFFECT:
            j["verdict"] = "as the controls (%+.0f%%)" % (100 * m)


def drift_floor(so, sn):
    """(the least change a row must show to be called faster or slower,
    the controls it comes from): the DRIFT_Q quantile (nearest rank) of
    how far the controls (the empty loops and CAS floors of every engine:
    no engine in them) moved between the runs (so, sn: samples()), or
    MIN_EFFECT if larger or with fewer than 4 controls.  A row that moved
    less moved no more than the machine did under loops that hold no
    engine.  Same machine only: across machines the controls move by the
    machines' difference, and the ratios are what is compared.  A control
    judged by process counts only when it moved beyond its processes'
    spread (judge: faster or slower), else as 0: its own processes
    differ by that much, which the rows' intervals already carry (a
    0.5 ns empty loop moves by up to half from one fresh process to the
    next: results/2026-12-04-epyc2-bdff9df)."""
    rng = random.Random(1)

    def moved_by(k):
        if not by_process(so[k], sn[k]):
            return abs(statistics.median(sn[k]) / statistics.median(so[k]) - 1)
        j = judge(so[k], sn[k], rng)
        return abs(j["ch"]) if j["verdict"] in ("faster", "slower") else 0.0
    ch = sorted(moved_by(k) for k in sn if k in so and is_control(k) and statistics.median(so[k]))
    if len(ch) < 4:
        return MIN_EFFECT, len(ch)
    return max(MIN_EFFECT, ch[int(math.ceil(DRIFT_Q * len(ch))) - 1]), len(ch)


def with_drift(judged, floor):
    """Rows (not the controls themselves) called faster or slower that
    moved less than the drift floor are within noise.  judged: {row:
    judge()'s figures}; the ratio rows' keys are (engine, ratio)."""
    for k, j in judged.items():
        if isinstance(k, str) and (not parse(k) or is_control(k)):
            continue
        if j["verdict"] in ("faster", "slower") and abs(j["ch"]) < floor:
            j["verdict"] = "within noise (drift)"


def drift_line(floor, n):
    if floor <= MIN_EFFECT:
        return []
    return ["Drift: %d%% of the %d controls moved by up to %.1f%% between the runs (the machine, "
            "not an engine: none is in them); rows that moved less read \"within noise "
            "(drift)\", here, in the ratios and in the rows side by side: a change that "
            "small is not told apart from the machine's by runs in two processes."
            % (round(100 * DRIFT_Q), n, 100 * floor)]


def reference_moved(so, sn, rng):
    """A line when condvar's seed benchmark, which every x condvar row
    divides by, moved by MIN_EFFECT or more between the runs: those rows
    then share one cause, not one each."""
    k = "throughput/condvar/seed/threads:1"
    if k not in so or k not in sn:
        return []
    j = judge(so[k], sn[k], rng)
    if abs(j["ch"]) < MIN_EFFECT:
        return []
    return ["Reference: condvar's seed benchmark, which every x condvar row divides by, moved "
            "%+.1f%% [%+.1f, %+.1f] between the runs (%s): the x condvar rows carry that one "
            "shift; read them beside each engine's own seed row above." % (
                100 * j["ch"], 100 * j["lo"], 100 * j["hi"], j["verdict"])]


def process_line(judged):
    """What "by process" means, when rows were judged so."""
    n = [j["procs"] for j in judged.values() if "procs" in j]
    if not n:
        return []
    lo = min(min(x) for x in n)
    hi = max(max(x) for x in n)
    return ["By process: %d of these %d rows came from %s processes a side (--repeat's "
            "instances, each in a process of its own): each side is the median of its "
            "processes' medians, the spread theirs, the interval a bootstrap that resamples the "
            "processes and then each one's repetitions; faster or slower when that interval "
            "excludes no change and the change is at least %.0f %% (the U p shown is over the "
            "process medians: with 3 a side it cannot be under 0.1, so it decides nothing).  "
            "A row that moves between processes of one binary is within noise, however tight "
            "its repetitions inside each." % (
                len(n), len(judged), str(lo) if lo == hi else "%d-%d" % (lo, hi),
                100 * MIN_EFFECT)]


def compare(old, new, markdown=False):
    od, nd = docs_of(old), docs_of(new)
    rng = random.Random(1)
    h = (lambda t: "### " + t) if markdown else (lambda t: "== " + t + " ==")
    out = [h("Machines: %s (old) vs %s (new)" % (old, new))]
    lines, same = machine_report(machine(od), machine(nd))
    out += (["```text"] + lines + ["```"]) if markdown else lines
    so, sn = samples(od), samples(nd)
    header = ["benchmark", "old median ±IQR/2", "new median ±IQR/2", "change [95% CI]", "U p",
              "verdict"]
    common = [k for k in sn if k in so]
    out += ["", h("Benchmarks: by process, a bootstrap interval and a change of at least %.0f %%"
                  % (100 * MIN_EFFECT) if same and any(by_process(so[k], sn[k]) for k in common)
                  else "Benchmarks: every repetition, U test (p < %g) and a change of at least "
                  "%.0f %%" % (ALPHA, 100 * MIN_EFFECT))]
    floor, nctl = drift_floor(so, sn) if same else (MIN_EFFECT, 0)
    if not same:
        out.append("Absolute times: not comparable (different machines); %d benchmarks in both "
                   "runs are left out." % len(common))
    elif not common:
        out.append("No benchmark is in both runs.")
    else:
        judged = {k: judge(so[k], sn[k], rng) for k in common}
        with_drift(judged, floor)
        with_machine(common, judged)
        rows = [row_text(k, judged[k], fmt_ns) for k in common]
        out += process_line(judged)
        out += table(header, rows, markdown) + ["", "Benchmarks: " + tally(rows)[1]]
        out += controls(rows) + drift_line(floor, nctl)
    engines = [e for e in engines_in(sn) if e in engines_in(so)]
    ro, rn = ratio_samples(so, engines), ratio_samples(sn, engines)
    out += ["", h("In-run ratios (comparable across machines): the seed benchmark per repetition")]
    def judge_ratio(k):
        (a, ra), (b, rb) = ro[k], rn[k]
        return judge(a, b, rng) if ra is None or rb is None else judge_over(a, ra, b, rb, rng)
    rjudged = {k: judge_ratio(k) for k in rn if k in ro}
    if same:  # the machine's drift, as for the benchmarks (drift_floor)
        with_drift(rjudged, floor)
    rows = [row_text("%s %s" % k, j, lambda v: "%.3gx" % v) for k, j in rjudged.items()]
    if not any(k[1] == "x structure" for k in rn):
        out.append("x structure: not in these runs (no structure benchmark recorded).")
    if rows:
        header[0] = "engine, ratio"
        out += table(header, rows, markdown) + ["", "Ratios: " + tally(rows)[1]]
        out += reference_moved(so, sn, rng)
    else:
        out.append("No ratio is in both runs (the throughput scenario's seed benchmark).")
    return "\n".join(out) + "\n", same


def main(argv):
    """compare_runs.py OLD NEW [--markdown]: the report, exit 0.
    compare_runs.py --same-cpu OLD NEW: nothing printed, exit 0 when both
    runs recorded the same CPU (model, count, architecture), else 1."""
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 2:
        print("usage: compare_runs.py [--same-cpu] OLD NEW [--markdown]", file=sys.stderr)
        return 2
    try:
        if "--same-cpu" in argv:
            return 0 if machine_report(machine(docs_of(args[0])), machine(docs_of(args[1])))[1] else 1
        text, _ = compare(args[0], args[1], markdown="--markdown" in argv)
    except (OSError, ValueError) as e:
        print("compare: %s" % e, file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
