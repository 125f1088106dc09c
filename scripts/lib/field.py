"""The field: every engine of a run side by side, with its spread.

    /usr/bin/python3 scripts/lib/field.py palette ENGINE...
        one line per engine: "ENGINE 0xRRGGBB" (scripts/plot's colours)
    /usr/bin/python3 scripts/lib/field.py spread DIR
        one line per benchmark repetition set in DIR/*.json:
        "ENGINE CASE THREADS n median_ns q1_ns q3_ns median_rate q1_rate q3_rate"
        (Google Benchmark's iteration entries: real_time per iteration and
        items_per_second; CASE is seed, floor, threads, held, cross, live:L)

results.py's report calls peers_section() for REPORT.md's "Peers" tables:
one per shape (seed, held, live 1e6, cross-thread, expiry lateness,
retention), every engine in the run, its spread over repetitions where the
run has repetitions, and how it stands against the wheel.
Standard library only.
"""

import math
import re
import statistics
import sys
import zlib

# One colour per engine in every plot, fixed by name (never by the order an
# engine appears in a run): the engines in impls/ and the peers.
PALETTE = {
    "thread": 0x7F7F7F, "condvar": 0x1F77B4, "mpsc": 0xFF7F0E, "wheel": 0xD62728,
    "libevent": 0x2CA02C, "posix": 0x9467BD, "libev": 0x8C564B, "libev-loop": 0xC49C94,
    "libuv": 0xE377C2, "libuv-loop": 0xF7B6D2, "glib": 0xBCBD22, "uring": 0x17BECF,
    "timerfd": 0x393B79, "example": 0x000000,
}
# Engines not named above (an engine from outside, --impl=PATH.so): a
# colour from this list chosen by a hash of the name, so it too is the
# same in every plot and every run.
SPARE = [0x637939, 0xAD494A, 0x5254A3, 0x8CA252, 0xBD9E39, 0x843C39, 0x7B4173, 0x3182BD]


def colour(engine):
    if engine in PALETTE:
        return PALETTE[engine]
    return SPARE[zlib.crc32(engine.encode()) % len(SPARE)]


NAME = re.compile(r"^throughput/(?P<engine>[^/]+)/(?:(?P<case>.+)/)?threads:(?P<t>\d+)$")


def repetitions(docs):
    """{(engine, case, threads): ([ns per iteration], [items per second])}."""
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    out = {}
    for _, doc in docs:
        for b in doc.get("benchmarks", []):
            m = NAME.match(b.get("name", ""))
            if m is None or b.get("run_type", "iteration") != "iteration":
                continue
            key = (m["engine"], m["case"] or "threads", int(m["t"]))
            ns, rate = out.setdefault(key, ([], []))
            if "real_time" in b:
                ns.append(b["real_time"] * scale.get(b.get("time_unit", "ns"), 1))
            # items_per_second, or a rate counter of the scenario's (cross: pairs/s)
            r = b.get("items_per_second", b.get("pairs"))
            if isinstance(r, (int, float)):
                rate.append(r)
    return out


def quartiles(s):
    """(median, q1, q3), NaN for none."""
    if not s:
        return math.nan, math.nan, math.nan
    if len(s) < 2:
        return s[0], s[0], s[0]
    q = statistics.quantiles(s, n=4, method="inclusive")
    return statistics.median(s), q[0], q[2]


def spread_lines(docs):
    out = []
    for (e, case, t), (ns, rate) in sorted(repetitions(docs).items()):
        vals = quartiles(ns) + quartiles(rate)
        out.append("%s %s %d %d %s" % (e, case, t, max(len(ns), len(rate)),
                                       " ".join("%.6g" % v for v in vals)))
    return out


# ---- REPORT.md: the peers, shape by shape ----------------------------------------

def _fmt(v, unit):
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return "-"
    if unit == "bytes":
        for div, u in ((2 ** 20, "MiB"), (2 ** 10, "KiB")):
            if v >= div:
                return "%.3g %s" % (v / div, u)
        return "%d B" % v
    if unit == "ns":
        for div, u in ((1e6, "ms"), (1e3, "us")):
            if v >= div:
                return "%.3g %s" % (v / div, u)
        return "%.3g ns" % v
    return "%.3g M/s" % (v / 1e6) if v >= 1e6 else "%.3g k/s" % (v / 1e3)


def _versus(v, wheel, lower_better, word="faster"):
    """How an engine stands against the wheel, in words ("2.10x faster than
    wheel", "wheel 3.00x faster")."""
    if v == 0 and lower_better and isinstance(wheel, (int, float)) and wheel > 0:
        return "holds none; wheel %s" % _fmt(wheel, "bytes")
    if any(x is None or not isinstance(x, (int, float)) or math.isnan(x) or x <= 0
           for x in (v, wheel)):
        return "-"
    r = v / wheel
    if abs(r - 1) < 0.02:
        return "same as wheel"
    better = r < 1 if lower_better else r > 1
    k = max(r, 1 / r)
    ks = "{:,.0f}".format(k) if k >= 100 else "%.1f" % k if k >= 10 else "%.2f" % k
    return ("%sx %s than wheel" % (ks, word)) if better else ("wheel %sx %s" % (ks, word))


def _largest_n(rows, engine, q):
    best, val = -1, math.nan
    for (sc, e, m, p), v in rows.items():
        if sc != "expiry" or e != engine or m != "lateness_ns":
            continue
        kv = dict(x.split("=", 1) for x in p.split(",") if "=" in x)
        if kv.get("q") == q and kv.get("n", "").isdigit() and int(kv["n"]) > best:
            best, val = int(kv["n"]), v
    return val, best


# (title, unit, lower is better, row key (scenario, metric, param), benchmark
#  (case, threads) whose repetitions give the spread or None, which of them
#  ("ns" or "rate"), the word for "better")
SHAPES = [
    ("Seed: arm + cancel of a 1 s timeout, one thread", "ns", True,
     ("throughput", "seed_median_ns_per_op", ""), ("seed", 1), "ns", "faster"),
    ("Held: timers cancelled about 1 ms after arming, one thread", "rate", False,
     ("throughput", "held_pairs_per_s", "threads=1"), ("held", 1), "rate", "faster"),
    ("Live 1e6: the seed loop with a million other timers armed", "ns", True,
     ("throughput", "live_ns_per_op", "live=1000000"), ("live:1000000", 1), "ns", "faster"),
    ("Cross-thread: armed on one thread, cancelled on another", "rate", False,
     ("throughput", "cross_pairs_per_s", "threads=2"), ("cross", 2), "rate", "faster"),
    ("Expiry lateness p99 (callback start - deadline), each engine's largest n", "ns", True,
     None, None, None, "less late"),
    ("Retention: engine-held bytes once cancelled 120 s timeouts settled", "bytes", True,
     ("retention", "held_bytes", "variant=cancelled,when=settled"), None, None, "smaller"),
]


def _shape_value(rows, key, e):
    if key is None:
        v, n = _largest_n(rows, e, "p99")
        return v, ("n=%d" % n if n > 0 else "")
    return rows.get((key[0], e, key[1], key[2]), math.nan), ""


def peers_section(docs, rows, engines):
    """REPORT.md's "Peers" section: markdown lines."""
    reps = repetitions(docs)
    out = ["## Peers, shape by shape", "",
           "Every engine of the run in each shape; the spread is the interquartile range "
           "over the benchmark's repetitions (Google Benchmark's, pooled over --repeat "
           "instances), \"one run\" where the scenario measures once.  Ratios are against "
           "the wheel measured in the same run.", ""]
    for title, unit, lower, key, bench, kind, word in SHAPES:
        wheel, _ = _shape_value(rows, key, "wheel")
        table = []
        for e in engines:
            v, note = _shape_value(rows, key, e)
            if not isinstance(v, (int, float)) or math.isnan(v):
                continue
            sp = "one run"
            if bench is not None and (e,) + bench in reps:
                ns, rate = reps[(e,) + bench]
                s = ns if kind == "ns" else rate
                if len(s) >= 2:
                    _, q1, q3 = quartiles(s)
                    sp = "%s - %s (n=%d)" % (_fmt(q1, unit), _fmt(q3, unit), len(s))
            table.append("| %s | %s%s | %s | %s |" % (
                e, _fmt(v, unit), " (%s)" % note if note else "", sp,
                "-" if e == "wheel" else _versus(v, wheel, lower, word)))
        out.append("### %s" % title)
        out.append("")
        if not table:
            out += ["Not in this run.", ""]
            continue
        out += ["| engine | figure | spread | against the wheel |", "|---|---:|---|---|"]
        out += table + [""]
    return out


def main(argv):
    if argv and argv[0] == "palette":
        for e in argv[1:]:
            print("%s 0x%06X" % (e, colour(e)))
        return 0
    if len(argv) == 2 and argv[0] == "spread":
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        from results import dir_docs
        print("\n".join(spread_lines(dir_docs(argv[1]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
