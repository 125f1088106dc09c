"""Checks a scripts/scale output directory against the harness's own run
files (tests/scripts/test.sh, case scale_quick):

    /usr/bin/python3 tests/scripts/scale_check.py DIR ENGINES THREADS NPROC EXIT
    (ENGINES and THREADS comma-separated: condvar,wheel 1,2; EXIT: scripts/scale's)

summary.csv has each engine x case (seed, held, sustain) x thread count
once, its verdict "ok", or "violations" exactly when the run's JSON says
so (an engine's violation is the harness's finding, reported: then, and
only then, the exit status is 1); min <= median <= max; the ratio is exactly 1 at one
thread and median / the 1-thread median elsewhere; each median, min, max
and held figure is the one the run's JSON holds; sustain's limit is the
scenario's 512 KiB + 192 KiB a thread; Google Benchmark ran only the
chosen cases and thread counts; summary.json records the machine, the
commit and each run's load average at start and end.  Exit 1 naming the
first mismatch.
"""

import csv
import json
import math
import os
import sys

d, engines = sys.argv[1], sys.argv[2].split(",")
threads, nproc = [int(t) for t in sys.argv[3].split(",")], int(sys.argv[4])
status = int(sys.argv[5])


def fail(msg):
    print("scale_check: " + msg)
    sys.exit(1)


def close(a, b):
    return b is not None and math.isclose(a, b, rel_tol=1e-8)


def run_doc(name):
    with open(os.path.join(d, "runs", name + ".json")) as f:
        return json.load(f)


with open(os.path.join(d, "summary.csv")) as f:
    rows = list(csv.DictReader(f))
got = {(r["engine"], r["case"], int(r["threads"])): r for r in rows}
want = {(e, c, t) for e in engines for c in ("seed", "held", "sustain") for t in threads}
if len(got) != len(rows) or set(got) != want:
    fail("%d rows; differing from the plan: %s" % (len(rows), sorted(set(got) ^ want)))

violated = set()
for (e, c, t), r in sorted(got.items()):
    name = "sustain-%s-t%d" % (e, t) if c == "sustain" else "throughput-" + e
    bad = any(x["status"] != "ok" for x in run_doc(name)["runs"])
    if bad:
        violated.add(name)
    med, lo, hi = (float(r[k + "_pairs_per_s"]) for k in ("median", "min", "max"))
    ratio, one = float(r["ratio_to_1_thread"]), float(got[(e, c, 1)]["median_pairs_per_s"])
    if r["verdict"] not in (("violations", "over the limit") if bad else ("ok",)):
        fail("%s %s %d: verdict %s, the run's JSON %s" % (e, c, t, r["verdict"],
                                                         "violations" if bad else "ok"))
    if not 0 < lo <= med <= hi:
        fail("%s %s %d: verdict %s, min %g, median %g, max %g" % (e, c, t, r["verdict"], lo,
                                                                  med, hi))
    if (t == 1 and ratio != 1.0) or not close(ratio, med / one):
        fail("%s %s %d: ratio %r, median / 1-thread median %r" % (e, c, t, ratio, med / one))
    if c == "sustain":
        doc = run_doc("sustain-%s-t%d" % (e, t))
        v = {x["metric"]: x["value"] for x in doc["rows"]}
        pairs = [x["value"] for x in doc["rows"] if x["metric"] == "pairs_per_s"]
        limit = (512 + 192 * t) * 1024
        if not close(float(r["held_bytes_max"]), v.get("held_bytes_max")) or \
           pairs != [v.get("pairs_per_s")] or not close(med, pairs[0]):
            fail("%s sustain %d: held %s, pairs/s %g; the run's JSON: %s, %s" % (
                e, t, r["held_bytes_max"], med, v.get("held_bytes_max"), pairs))
        if float(r["held_limit_bytes"]) != limit or v.get("held_limit_bytes") != limit:
            fail("%s sustain %d: limit %s (JSON %s), want %d" % (
                e, t, r["held_limit_bytes"], v.get("held_limit_bytes"), limit))
        continue
    metric = "ops_per_s" if c == "seed" else "held_pairs_per_s"
    v = {x["param"]: x["value"] for x in run_doc("throughput-" + e)["rows"]
         if x["engine"] == e and x["metric"] == metric}
    if not (close(med, v.get("threads=%d" % t)) and
            close(lo, v.get("threads=%d,instances=3,stat=min" % t)) and
            close(hi, v.get("threads=%d,instances=3,stat=max" % t))):
        fail("%s %s %d: median %g, min %g, max %g; the run's JSON: %s" % (e, c, t, med, lo, hi, v))

for e in engines:
    ran = {b.get("run_name") for b in run_doc("throughput-" + e)["benchmarks"]}
    chosen = {"throughput/%s/%sthreads:%d" % (e, h, t) for h in ("", "held/") for t in threads}
    if ran != chosen:
        fail("throughput-%s.json: Google Benchmark ran %s, want %s" % (e, sorted(ran),
                                                                        sorted(chosen)))

with open(os.path.join(d, "summary.json")) as f:
    s = json.load(f)
m = s["machine"]
if m["nproc"] != nproc or not m.get("model_name") or not s["commit"]:
    fail("machine %s, commit %s" % (m, s["commit"]))
if len(s["runs"]) != len(engines) * (1 + len(threads)) or s["problems"] or not s["complete"]:
    fail("%d runs; problems %s" % (len(s["runs"]), s["problems"]))
if len(s["violations"]) != len(violated) or status != (1 if violated else 0):
    fail("violations %s, runs with violations %s, exit %d" % (s["violations"], violated, status))
for r in s["runs"]:
    if len(r["load_avg_start"] or []) != 3 or len(r["load_avg_end"] or []) != 3 or \
       r["exit"] != (1 if r["name"] in violated else 0):
        fail("run %s: load average %s to %s, exit %s" % (r["name"], r["load_avg_start"],
                                                         r["load_avg_end"], r["exit"]))
print("scale_check: %d rows, each the runs' own figure%s" % (
    len(rows), "; the harness reported violations in %s (reported, not the script's)" % (
        ", ".join(sorted(violated))) if violated else ""))
