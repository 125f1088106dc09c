"""Thread scaling of the engines: scripts/scale runs this (its header
lists the options).  Three parts:

  plan       engines, thread counts, instances and the sustain length,
             sized to --budget-s before anything runs
  measure    a harness process per run: throughput (seed and 1 ms-held
             cases) once per engine at --threads=N, with a
             --benchmark_filter that keeps the chosen thread counts;
             sustain once per engine and thread count
  summarize  scale_report.py: checks every figure, writes summary.csv,
             summary.json, plots/ and README.md

DIR/runs/plan.json records the plan and each run as it ends (command,
exit status, seconds, load average at start and end), so `scripts/scale
--render=DIR` summarizes a directory again without measuring.  Standard
library only (Debian's python3), gnuplot-nox for the plots.
"""

import argparse
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_report import CASES, PROG, WANTED_THREADS, say, summarize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a run costs, for the plan, in seconds.  Measured on the 2-core
# development machine: one throughput benchmark of 5 min-time repetitions
# of 0.3 s takes 2.2 s (load average 2) to 3.5 s (load 4) with Google
# Benchmark's iteration estimate, 3 of 0.03 s with --quick 0.2 s; it does
# not depend on the thread count (the repetitions run on the wall clock).
# The plan takes the slow figure; sustain then gets whatever throughput
# left of the budget (measure()).
COST = {
    False: {"bench": 3.5, "instance": 1.0, "sustain_base": 60.0, "sustain_min": 5.0,
            "sustain_max": 60.0},
    True: {"bench": 0.2, "instance": 0.2, "sustain_base": 5.0, "sustain_min": 1.0,
           "sustain_max": 5.0},
}
PROCESS_S = 0.5      # a harness process: start, engine list, writing the JSON
SUSTAIN_OVER_S = 0.6  # a sustain run beyond its duration: 200 ms settle, create, destroy
PLAN_SHARE = 0.9     # the plan fills this share of the budget; the rest is slack
# TMO_TEST_SCALE for the throughput runs: the filter leaves out the
# live-timer benchmarks (whose background timers the scenario then does not
# arm); at 0.01 whatever else a run sizes by it stays small.  The threads:N benchmarks are
# min-time runs, which the scale does not change.
THROUGHPUT_SCALE = "0.01"
DEFAULT_REPEAT = 3
DEFAULT_BUDGET_S = 480


class Die(Exception):
    def __init__(self, status, msg):
        Exception.__init__(self, msg)
        self.status = status


# ---- the machine and the tree -------------------------------------------------------


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def machine():
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": len(os.sched_getaffinity(0)), "cpus_online": os.cpu_count(),
            "model_name": model, "host": platform.node(), "kernel": platform.release()}


def tree_commit():
    """The commit as the harness's build records it (git describe --dirty)."""
    try:
        return subprocess.run(["git", "--no-optional-locks", "-C", ROOT, "describe", "--always",
                               "--dirty", "--abbrev=12"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---- the plan ---------------------------------------------------------------------------


def list_engines(harness):
    """[(name, caps)] in the harness's order, from `--list`."""
    try:
        p = subprocess.run([harness, "--list"], capture_output=True, text=True)
    except OSError as e:
        raise Die(2, "cannot run the harness %s: %s" % (harness, e))
    if p.returncode != 0:
        raise Die(2, "%s --list failed (exit %d): %s" % (harness, p.returncode,
                                                         p.stderr.strip()[-300:]))
    engines = []
    for line in p.stdout.splitlines():
        if line.startswith("scenarios"):
            break
        m = re.match(r"^  ([a-z][\w-]*)\s", line)
        if m:
            engines.append((m.group(1), set()))
            continue
        m = re.match(r"^\s+caps:\s*(.*)$", line)
        if m and engines:
            engines[-1][1].update(c.strip() for c in m.group(1).split(",")
                                  if c.strip() and c.strip() != "none")
    if not engines:
        raise Die(2, "%s --list names no engine" % harness)
    return engines


def default_engines(engines):
    """The lock-free engines (arm and cancel neither wait for the timer
    thread nor enter the kernel: caps lockfree-arm and no-syscall), and
    condvar as the lock baseline."""
    return [n for n, caps in engines
            if n == "condvar" or ("lockfree-arm" in caps and "no-syscall" in caps)]


def thread_counts(n):
    """1, 2, 4, ... below n, and n."""
    out, t = [], 1
    while t < n:
        out.append(t)
        t *= 2
    return out + [n]


def bench_filter(counts):
    """--benchmark_filter keeping throughput/<engine>/threads:T and
    .../held/threads:T for T in counts: the harness matches it against the
    names its console and JSON show (scenarios/kit/gbench.h)."""
    return "^throughput/[^/]+/(held/)?threads:(%s)$" % "|".join(str(t) for t in counts)


def estimate(n_engines, counts, repeat, quick, sustain_s):
    c = COST[quick]
    tp = n_engines * (PROCESS_S + repeat * (c["instance"] + len(CASES) * len(counts) * c["bench"]))
    su = n_engines * len(counts) * (PROCESS_S + SUSTAIN_OVER_S + sustain_s)
    return tp, su


def fit(plan, repeat_given, sustain_given):
    """Sets plan["repeat"] and plan["sustain_s"] so that the estimate fits
    PLAN_SHARE of the budget: sustain gets what throughput leaves, between
    its minimum and its full length; --repeat comes down (when not given)
    before sustain goes below its minimum."""
    c = COST[plan["quick"]]
    e, counts, budget = len(plan["engines"]), plan["threads"], plan["budget_s"]
    room = PLAN_SHARE * budget
    repeats = [plan["repeat"]] if repeat_given else list(range(plan["repeat"], 0, -1))
    for r in repeats:
        tp, _ = estimate(e, counts, r, plan["quick"], 0)
        if sustain_given:
            d = plan["sustain_s"]
        else:
            per = (room - tp) / (e * len(counts)) - PROCESS_S - SUSTAIN_OVER_S
            d = min(c["sustain_max"], per)
        tp, su = estimate(e, counts, r, plan["quick"], d)
        if d >= c["sustain_min"] and tp + su <= room:
            if r != plan["repeat"]:
                say("--budget-s=%g: %d fresh instance(s) per engine instead of %d" % (
                    budget, r, plan["repeat"]))
            plan["repeat"], plan["sustain_s"] = r, round(d, 1)
            plan["estimate_s"] = round(tp + su)
            return
    d = plan["sustain_s"] if sustain_given else c["sustain_min"]
    tp, su = estimate(e, counts, repeats[-1], plan["quick"], d)
    raise Die(2, "--budget-s=%g is too small: %d engines x %d thread counts with --repeat=%d "
                 "and %g s of sustain per run need about %.0f s (the plan fills %d%% of the "
                 "budget): raise --budget-s to %.0f, or choose fewer engines (--impl) or "
                 "threads (--max)" % (budget, e, len(counts), repeats[-1], d, tp + su,
                                      PLAN_SHARE * 100, math.ceil((tp + su) / PLAN_SHARE)))


# ---- running ---------------------------------------------------------------------------


def save_plan(d, plan):
    path = os.path.join(d, "runs", "plan.json")
    with open(path + ".tmp", "w") as f:
        json.dump(plan, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def run_one(d, plan, name, scenario, engine, threads, args, env_extra, hard_deadline):
    """One harness process, stopped (SIGTERM: it writes what finished) at
    the hard deadline.  Appends its record to plan["runs"]."""
    jpath = os.path.join(d, "runs", name + ".json")
    lpath = os.path.join(d, "runs", name + ".log")
    cmd = [plan["harness"]] + args + ["--json=" + jpath]
    shown = " ".join(["%s=%s" % kv for kv in sorted(env_extra.items())] +
                     [shlex.quote(plan["harness_shown"])] +
                     [shlex.quote(a) for a in args] + ["--json=runs/%s.json" % name])
    env = dict(os.environ)
    env.update(env_extra)
    rec = {"name": name, "scenario": scenario, "engine": engine, "threads": threads,
           "command": shown, "load_avg_start": loadavg(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    k = len(plan["runs"]) + 1
    print("%s: [%d/%d] %s %s threads=%s ... " % (PROG, k, plan["n_runs"], scenario, engine,
                                                 threads if scenario == "sustain"
                                                 else ",".join(map(str, plan["threads"]))),
          end="", flush=True)
    t0 = time.monotonic()
    with open(lpath, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            rc = p.wait(timeout=max(hard_deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            rec["budget_stop"] = True
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
    rec["exit"] = rc
    rec["seconds"] = round(time.monotonic() - t0, 2)
    rec["load_avg_end"] = loadavg()
    plan["runs"].append(rec)
    save_plan(d, plan)
    la = rec["load_avg_start"], rec["load_avg_end"]
    print("%s in %.1f s, load %s -> %s" % (
        "stopped at the budget" if rec.get("budget_stop") else "exit %d" % rc, rec["seconds"],
        "%.2f" % la[0][0] if la[0] else "?", "%.2f" % la[1][0] if la[1] else "?"), flush=True)
    return not rec.get("budget_stop")


def measure(d, plan):
    t_start = time.monotonic()
    hard = t_start + plan["budget_s"]
    plan_end = t_start + PLAN_SHARE * plan["budget_s"]
    quick = ["--quick"] if plan["quick"] else []
    n = plan["threads"][-1]
    for e in plan["engines"]:
        args = ["--impl=" + e, "--scenario=throughput", "--threads=%d" % n,
                "--repeat=%d" % plan["repeat"]] + quick + ["--benchmark_filter=" + plan["filter"]]
        if not run_one(d, plan, "throughput-" + e, "throughput", e, n, args,
                       {"TMO_TEST_SCALE": THROUGHPUT_SCALE}, hard):
            plan["stopped"] = "throughput/%s" % e
            return
    c = COST[plan["quick"]]
    runs = [(t, e) for t in plan["threads"] for e in plan["engines"]]
    if not plan["sustain_given"]:
        # What throughput left, shared evenly: every sustain run the same length.
        per = (plan_end - time.monotonic()) / len(runs) - PROCESS_S - SUSTAIN_OVER_S
        plan["sustain_s"] = round(max(c["sustain_min"], min(c["sustain_max"], per)), 1)
    scale = "%.6f" % (plan["sustain_s"] / c["sustain_base"])
    say("sustain: %g s per run (TMO_TEST_SCALE=%s of the scenario's %g s)" % (
        plan["sustain_s"], scale, c["sustain_base"]))
    for t, e in runs:
        args = ["--impl=" + e, "--scenario=sustain", "--threads=%d" % t] + quick
        if not run_one(d, plan, "sustain-%s-t%d" % (e, t), "sustain", e, t, args,
                       {"TMO_TEST_SCALE": scale}, hard):
            plan["stopped"] = "sustain/%s threads=%d" % (e, t)
            return


# ---- main ---------------------------------------------------------------------------------


def number(name, fraction):
    """A numeric option's parser: digits only (int() and float() would take
    ' -1', '+1', '1_0', ' 5 ', 'nan' or '1e3'), with a '.' and more digits
    for seconds; the error names the option and what is wrong."""
    pattern = r"[0-9]+(\.[0-9]+)?" if fraction else r"[0-9]+"

    def parse(v):
        if re.fullmatch(pattern, v, re.ASCII) is None:
            why = "empty" if v == "" else (
                "not a number (digits only%s: no blank, sign or other character)"
                % (", with an optional .fraction" if fraction else ""))
            raise argparse.ArgumentTypeError("--%s='%s': %s" % (name, v, why))
        return float(v) if fraction else int(v)
    return parse


def parse(argv):
    ap = argparse.ArgumentParser(prog=PROG, add_help=False, allow_abbrev=False)
    ap.add_argument("--max", type=number("max", False))
    ap.add_argument("--impl")
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=number("repeat", False))
    ap.add_argument("--budget-s", type=number("budget-s", True), default=DEFAULT_BUDGET_S)
    ap.add_argument("--sustain-s", type=number("sustain-s", True))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--harness")
    ap.add_argument("--render")
    ap.add_argument("--help", "-h", action="store_true")
    try:
        a = ap.parse_args(argv)
    except SystemExit:
        raise Die(2, "bad command line (scripts/scale --help)")
    return a


def usage():
    with open(os.path.join(ROOT, "scripts", "scale")) as f:
        for line in f.readlines()[1:]:
            if not line.startswith("#"):
                break
            print(line[2:].rstrip())


def main(argv):
    a = parse(argv)
    if a.help:
        usage()
        return 0
    if shutil.which("gnuplot") is None:
        raise Die(2, "gnuplot not found (apt-get install gnuplot-nox)")
    if a.render:
        a.render = os.path.abspath(a.render)
        if not os.path.exists(os.path.join(a.render, "runs", "plan.json")):
            raise Die(2, "--render=%s: no runs/plan.json there" % a.render)
        try:
            return summarize(a.render)
        except KeyError as e:
            raise Die(2, "--render=%s: runs/plan.json has no %s (written by another version "
                         "of scripts/scale: run it again)" % (a.render, e))
    if a.max is not None and not 1 <= a.max <= 256:
        raise Die(2, "--max=%d: want 1..256 (the harness's --threads)" % a.max)
    if a.repeat is not None and not 1 <= a.repeat <= 100:
        raise Die(2, "--repeat=%d: want 1..100 (the harness's --repeat)" % a.repeat)
    if not a.budget_s > 0:
        raise Die(2, "--budget-s=%g: want a positive number of seconds" % a.budget_s)
    c = COST[a.quick]
    if a.sustain_s is not None and not c["sustain_min"] <= a.sustain_s <= c["sustain_max"]:
        raise Die(2, "--sustain-s=%g: want %g..%g%s" % (a.sustain_s, c["sustain_min"],
                                                        c["sustain_max"],
                                                        " with --quick" if a.quick else ""))
    if a.harness:
        harness = os.path.abspath(a.harness)
        shown = a.harness
        if not os.access(harness, os.X_OK):
            raise Die(2, "--harness=%s: not an executable" % a.harness)
    else:
        # ./harness checks the packages and brings build/release up to date.
        p = subprocess.run([os.path.join(ROOT, "harness"), "--list"], stdout=subprocess.DEVNULL)
        if p.returncode != 0:
            raise Die(2, "./harness --list failed (exit %d): packages or the build (above)"
                      % p.returncode)
        harness = os.path.join(ROOT, "build", "release", "cli", "tmo-harness")
        shown = "build/release/cli/tmo-harness"
    engines = list_engines(harness)
    names = [n for n, _ in engines]
    if a.impl:
        chosen = []
        for x in a.impl.split(","):
            if x not in names:
                raise Die(2, "--impl: unknown engine '%s' (engines: %s)" % (x, " ".join(names)))
            if x not in chosen:
                chosen.append(x)
    else:
        chosen = default_engines(engines)
        if not chosen:
            raise Die(2, "no engine declares lockfree-arm and no-syscall, and condvar is not "
                         "built: name engines with --impl")
    mach = machine()
    n = a.max or mach["nproc"]
    counts = thread_counts(n)
    plan = {"command": "scripts/scale" + "".join(" " + shlex.quote(x) for x in argv),
            "harness": harness, "harness_shown": shown, "engines": chosen,
            "default_engines": not a.impl,
            "caps": {nm: sorted(cp) for nm, cp in engines if nm in chosen},
            "threads": counts, "repeat": a.repeat or DEFAULT_REPEAT, "quick": a.quick,
            "budget_s": a.budget_s, "sustain_s": a.sustain_s, "sustain_given": a.sustain_s
            is not None, "filter": bench_filter(counts), "machine": mach,
            "commit": tree_commit(), "throughput_scale": THROUGHPUT_SCALE,
            "sustain_base_s": c["sustain_base"], "default_budget_s": DEFAULT_BUDGET_S,
            "runs": []}
    fit(plan, a.repeat is not None, a.sustain_s is not None)
    plan["n_runs"] = len(chosen) * (1 + len(counts))
    d = os.path.abspath(a.out or os.path.join(ROOT, "results", "scale-%d%s" % (
        n, "-quick" if a.quick else "")))
    say("%s: threads %s; %d fresh instance(s) per engine%s; sustain %g s per run; %d runs, "
        "about %d s (budget %g s) -> %s" % (
            ", ".join(chosen), ",".join(map(str, counts)), plan["repeat"],
            " (--quick)" if a.quick else "", plan["sustain_s"], plan["n_runs"],
            plan["estimate_s"], a.budget_s, d))
    if a.plan:
        return 0
    os.makedirs(d, exist_ok=True)
    # The files this script writes, and only those: an old run's must not
    # pass for this one's.
    for sub in ("runs", "plots"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    for f in ("summary.csv", "summary.json", "README.md"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    os.makedirs(os.path.join(d, "runs"))
    if n < WANTED_THREADS:
        say("this run goes up to %d threads: a %d-core run is still wanted (results/scale-%d/)"
            % (n, WANTED_THREADS, WANTED_THREADS))
    plan["load_avg_start"] = loadavg()
    plan["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.monotonic()
    save_plan(d, plan)
    measure(d, plan)
    plan["seconds"] = round(time.monotonic() - t0, 1)
    plan["load_avg_end"] = loadavg()
    save_plan(d, plan)
    return summarize(d)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Die as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        sys.exit(e.status)
    except KeyboardInterrupt:
        # The harness got the SIGINT too and wrote the runs it finished.
        print("\n%s: interrupted: `scripts/scale --render=DIR` summarizes the runs that "
              "finished" % PROG, file=sys.stderr)
        sys.exit(130)
