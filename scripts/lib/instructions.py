"""Counts per arm+cancel pair that no machine changes: scripts/instructions.

    /usr/bin/python3 scripts/lib/instructions.py [DIR] [ENGINE...]
    /usr/bin/python3 scripts/lib/instructions.py --self-test

For each engine and each case (seed: a 1 s timeout armed and cancelled
around an empty block; held: HELD timers outstanding, each pair arms one
and cancels the one armed HELD pairs earlier; 60 s timeouts),
build/release/cli/tmo-seedloop
runs under

    valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes
             --dump-instr=yes --cache-sim=yes (a fixed cache: CACHE below)

once with N pairs and once with none; per thread the difference over N is
one pair's cost: on the arming thread (the main thread) and on every other
thread of the engine together (its timer thread, or the thread engine's
per-timer threads).  Per instruction address callgrind gives the times it
ran (Ir) and its cache misses, at the address `objdump -d` of its object
shows (callgrind writes object addresses; in an object it has no symbols
for, "???", it writes the run's address, and the load bias `valgrind -v
-v` prints, avma - svma, finds the object), and objdump says what the
instruction is.  Weighed by the times each ran:

  instructions  Ir (the loop's own, the same loop with no engine, left out)
  locked        read-modify-write instructions: a lock prefix, or xchg with
                a memory operand (implicitly locked)
  tsc_reads     rdtsc and rdtscp
  clock_reads   calls of clock_gettime (the vDSO is hidden from callgrind:
                the call is counted where it is made, in any object, by
                the calls callgrind says it made, not by its Ir)
  d1_misses     level-1 data cache misses, reads and writes (the cache
                lines the pair brings in)
  ll_misses     last-level data misses of the same accesses

They are user-space counts: a system call is one instruction here (the
kernel's work is not counted), and they do not depend on the machine's
load.  The arming thread's are exact to the pair; the timer thread's
follow how long the run lasted (a wheel's ticks, a heap engine's wake-ups
go by time, not by pairs), so a small one may come out below 0.  valgrind runs one thread at a time, so the seed loop runs with
--timely (tmo/testing.h) and valgrind with --fair-sched=yes (see the
header of scripts/instructions).

Writes DIR/instructions.csv (engine,total,producer,timer_thread: seed
instructions, what scripts/plot draws), DIR/instructions_counts.csv
(engine,case,thread,outstanding,instructions,locked,tsc_reads,clock_reads,
d1_misses,ll_misses; thread is arming or timer; outstanding: the held
loop's timers, HELD but for an engine with a cap, HELD_OF) and
DIR/instructions.json (both), and
prints the tables.  Pairs: TMO_INSTR_PAIRS (seed, default 100000) and
TMO_INSTR_HELD_PAIRS (held, default 50000), TMO_INSTR_CASES (default
"seed,held"); the thread engine runs a hundredth of the seed pairs and no
held case (a thread per held timer).

The structure an engine files its timers in (STRUCTURE: wheel's
src/ds/wheel.c, condvar's src/ds/heap.c, mpsc's near/far of
src/lf/schedule.c) is counted too, alone, through the same loops
(tmo-seedloop structure:KIND; engine "structure:KIND" in the counts), and
"x structure" is the engine's pair (both threads) over the structure's:
the throughput scenario's "x structure", in instructions rather than time.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOP = os.path.join(ROOT, "build", "release", "cli", "tmo-seedloop")
HELD = 10000  # cli/seedloop.c
# Engines that refuse past a cap on pending timers run the held loop with
# fewer outstanding, under the cap (their rows say how many): glib refuses
# past 4,096 (GLIB_MAX_PENDING, impls/glib.c), and at 10,000 its held loop
# failed ("unexpected results": the refused arms).
HELD_OF = {"glib": 4000}
# The structure each engine files in (cli/seedloop.c structure:KIND).
STRUCTURE = {"wheel": "wheel", "condvar": "heap", "mpsc": "near_far"}
# A fixed simulated cache (size, associativity, line): the counts must not
# follow the host's (valgrind would read this VM's, a 512 MiB "LL").
CACHE = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"]
EVENTS = ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
COUNTS = ["instructions", "locked", "tsc_reads", "clock_reads", "d1_misses", "ll_misses"]

# ---- what an instruction is (objdump -d's text) -------------------------------------

CLOCK_CALL = re.compile(r"\bcall\w*\s.*<(__)?clock_gettime(@plt|@@[\w.]+)?(\+0x0)?>")


def classify(text):
    """The classes an instruction (objdump's mnemonic and operands) is in."""
    t = text.strip()
    out = set()
    words = t.split()
    if not words:
        return out
    if words[0] == "lock":
        out.add("locked")
    elif words[0].startswith("xchg") and "(" in t:
        out.add("locked")  # xchg with memory is locked without the prefix
    if words[0] in ("rdtsc", "rdtscp"):
        out.add("tsc_reads")
    if CLOCK_CALL.search(t):
        out.add("clock_reads")
    return out


def self_test():
    cases = [
        ("lock cmpxchg %rcx,(%rdx)", {"locked"}),
        ("lock xadd %eax,0x8(%rdi)", {"locked"}),
        ("xchg   %rax,(%rdi)", {"locked"}),
        ("xchg   %ax,%ax", set()),
        ("cmpxchg %rcx,(%rdx)", set()),
        ("rdtsc", {"tsc_reads"}),
        ("rdtscp", {"tsc_reads"}),
        ("call   3050 <clock_gettime@plt>", {"clock_reads"}),
        ("call   9a0c0 <__clock_gettime>", {"clock_reads"}),
        ("call   4010 <tmo_now_ns>", set()),
        ("mov    %rax,(%rdi)", set()),
    ]
    bad = [(t, classify(t), want) for t, want in cases if classify(t) != want]
    for t, got, want in bad:
        print("instructions: classify(%r) = %s, want %s" % (t, sorted(got), sorted(want)))
    print("instructions: classifier %s" % ("wrong" if bad else "ok (%d cases)" % len(cases)))
    # A capped engine's held loop must stay under its cap (else every
    # refused arm fails the run): the cap as its source defines it.
    for e, n in HELD_OF.items():
        try:
            src = open(os.path.join(ROOT, "impls", e + ".c")).read()
        except OSError:
            src = ""
        m = re.search(r"#define\s+%s_MAX_PENDING\s+(\d+)" % e.upper(), src)
        if not m or n >= int(m.group(1)):
            bad.append((e, n, "cap"))
            print("instructions: HELD_OF[%r] = %d is not under impls/%s.c's %s_MAX_PENDING (%s)"
                  % (e, n, e, e.upper(), m.group(1) if m else "not found"))
    return 1 if bad else 0


_disasm = {}


def disassembly(path):
    """{static address: classes} of the instructions of an object that are
    in some class (objdump -d; an object it cannot read gives none)."""
    if path in _disasm:
        return _disasm[path]
    out = {}
    try:
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                              text=True, check=False).stdout
    except OSError:
        text = ""
    line_re = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
    for line in text.splitlines():
        m = line_re.match(line)
        if m:
            cls = classify(m.group(2))
            if cls:
                out[int(m.group(1), 16)] = cls
    _disasm[path] = out
    return out


# ---- callgrind's output ---------------------------------------------------------------------


CALLS = len(EVENTS)  # after the events: the calls made from that address


def parse_callgrind(path):
    """{(object, address): [events..., calls]} of self cost, from a file
    written with --dump-instr=yes.  A call's inclusive cost line is
    skipped, and the count its calls= line gives is added to the call
    site's `calls`: a call site's Ir also holds the PLT stub it goes
    through (callgrind's --skip-plt=yes charges the stub to the caller's
    call instruction), 2 to 2.1 a call, so Ir counts the call twice."""
    names = {"ob": {}, "fn": {}}
    cost = {}
    ob, addr, skip_next, ncalls = "", 0, False, 0
    pos_re = re.compile(r"^(0x[0-9a-fA-F]+|[+-]\d+|\*)\s")
    with open(path) as f:
        for line in f:
            if line[0] in "0123456789+-*" and (line[0] != "0" or line.startswith("0x")):
                m = pos_re.match(line)
                if not m:
                    continue
                p = m.group(1)
                if p.startswith("0x"):
                    addr = int(p, 16)
                elif p != "*":
                    addr += int(p)
                if skip_next:
                    skip_next = False
                    cost.setdefault((ob, addr), [0] * (CALLS + 1))[CALLS] += ncalls
                    continue
                fields = line.split()[2:]  # instr, line, then the events
                c = cost.setdefault((ob, addr), [0] * (CALLS + 1))
                for i, v in enumerate(fields[:len(EVENTS)]):
                    c[i] += int(v)
                continue
            key, _, val = line.rstrip("\n").partition("=")
            if key in ("ob", "cob"):
                name = resolve(names["ob"], val)
                if key == "ob":
                    ob = name
            elif key == "calls":
                skip_next = True
                ncalls = int(val.split()[0])
    return cost


def resolve(table, val):
    """Callgrind's name compression: "(id) name" defines, "(id)" refers."""
    m = re.match(r"^\((\d+)\)\s*(.*)$", val)
    if not m:
        return val
    if m.group(2):
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), val)


def biases(log):
    """{object path: avma - svma} from valgrind -v -v's "Reading syms"."""
    out, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Reading syms from (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"svma 0x([0-9a-f]+), avma 0x([0-9a-f]+)", line)
        if m and cur and cur not in out:
            out[cur] = int(m.group(2), 16) - int(m.group(1), 16)
    return out


def classes_at(ob, addr, bias):
    """What the instruction at callgrind's (object, address) is."""
    if ob in bias:
        return disassembly(ob).get(addr, ())
    for path, b in bias.items():  # "???": a run address in an object without symbols
        if addr >= b and os.path.isfile(path):
            cls = disassembly(path).get(addr - b)
            if cls:
                return cls
    return ()


def weigh(cost, bias):
    """The counts of one thread's file."""
    ir = EVENTS.index("Ir")
    d1 = [EVENTS.index("D1mr"), EVENTS.index("D1mw")]
    ll = [EVENTS.index("DLmr"), EVENTS.index("DLmw")]
    tot = dict.fromkeys(COUNTS, 0)
    for (ob, addr), c in cost.items():
        tot["instructions"] += c[ir]
        tot["d1_misses"] += c[d1[0]] + c[d1[1]]
        tot["ll_misses"] += c[ll[0]] + c[ll[1]]
        if c[ir]:
            for k in classes_at(ob, addr, bias):
                # a clock read is a call made (its Ir holds the PLT stub too)
                tot[k] += c[CALLS] if k == "clock_reads" else c[ir]
    return tot


# One valgrind run's limit in seconds: io_uring's submissions are not
# carried to completion under valgrind here, and uring's loop then waits
# for ever (a few seconds to a minute is what the others take).
RUN_TIMEOUT = int(os.environ.get("TMO_INSTR_TIMEOUT", "300"))


def run(engine, pairs, held, work):
    """Per thread ("arming", "timer") totals of one seedloop run; held: the
    timers outstanding in the held loop, 0 for the seed loop."""
    for f in os.listdir(work):
        os.unlink(os.path.join(work, f))
    out = os.path.join(work, "cg.%p")
    cmd = ["valgrind", "-v", "-v", "--tool=callgrind", "--separate-threads=yes",
           "--fair-sched=yes", "--dump-instr=yes", "--cache-sim=yes"] + CACHE + [
           "--callgrind-out-file=" + out, LOOP, engine, str(pairs), "--timely"] + (
           ["--held=%d" % held] if held else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, check=False,
                           timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError("%s: the %s loop did not finish in %d s under valgrind "
                           "(TMO_INSTR_TIMEOUT; killed)" % (engine, "held" if held else "seed",
                                                            RUN_TIMEOUT))
    if p.returncode != 0:
        why = [l for l in p.stderr.splitlines() if l.startswith(("tmo-seedloop:", "usage:"))]
        raise RuntimeError("%s: the %s loop failed (exit %d)%s" % (
            engine, "held" if held else "seed", p.returncode, (": " + why[-1]) if why else ""))
    bias = biases(p.stderr)
    tot = {"arming": dict.fromkeys(COUNTS, 0), "timer": dict.fromkeys(COUNTS, 0)}
    for f in os.listdir(work):
        m = re.search(r"-(\d+)$", f)
        if not m:
            continue
        w = weigh(parse_callgrind(os.path.join(work, f)), bias)
        side = tot["arming" if m.group(1) == "01" else "timer"]
        for k in COUNTS:
            side[k] += w[k]
    return tot


def per_pair(engine, pairs, held, work, loop_own=None):
    """{thread: {count: per pair}}, the loop's own left out of the arming
    thread's (loop_own: the same from the loop with no engine)."""
    a, b = run(engine, pairs, held, work), run(engine, 0, held, work)
    out = {}
    for side in a:
        out[side] = {k: (a[side][k] - b[side][k]) / pairs for k in COUNTS}
        if loop_own and side == "arming":
            for k in COUNTS:
                out[side][k] -= loop_own["arming"][k]
    return out


def engines_of(args):
    if args:
        return args
    p = subprocess.run([os.path.join(ROOT, "build", "release", "cli", "tmo-harness"), "--list"],
                       capture_output=True, text=True, check=False)
    out, on = [], False
    for line in p.stdout.splitlines():
        if line.startswith("engines"):
            on = True
        elif line.startswith("scenarios"):
            on = False
        elif on and re.match(r"^  [a-z]", line):
            out.append(line.split()[0])
    return out or ["thread", "condvar", "mpsc", "wheel", "libevent", "posix"]


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    if self_test() != 0:
        return 1
    d = argv[1] if len(argv) > 1 else os.path.join(ROOT, "results", "ci")
    engines = engines_of(argv[2:])
    seed_n = int(os.environ.get("TMO_INSTR_PAIRS", "100000"))
    held_n = int(os.environ.get("TMO_INSTR_HELD_PAIRS", "50000"))
    cases = [c for c in (("seed", seed_n, False), ("held", held_n, True))
             if c[0] in os.environ.get("TMO_INSTR_CASES", "seed,held").split(",")]
    os.makedirs(d, exist_ok=True)
    rows, counts, ratios = [], [], {}
    with tempfile.TemporaryDirectory() as work:
        own = {}  # the loop's own, per (case, outstanding)
        for e in engines:
            for case, n, held in cases:
                if e == "thread":
                    if held:
                        continue  # a thread per held timer: 10,000 threads
                    n = max(1, n // 100)
                held = HELD_OF.get(e, HELD) if held else 0
                if (case, held) not in own:
                    own[(case, held)] = per_pair("-", n, held, work)
                try:
                    c = per_pair(e, n, held, work, own[(case, held)])
                except RuntimeError as err:
                    print("instructions: %s" % err, file=sys.stderr)
                    continue
                for side in ("arming", "timer"):
                    counts.append(dict({"engine": e, "case": case, "thread": side, "pairs": n,
                                        "outstanding": held},
                                       **{k: round(v, 2) for k, v in c[side].items()}))
                s = STRUCTURE.get(e)
                if s is not None:
                    try:
                        sc = per_pair("structure:" + s, n, held, work, own[(case, held)])
                    except RuntimeError as err:
                        print("instructions: %s" % err, file=sys.stderr)
                    else:
                        counts.append(dict({"engine": "structure:" + s, "case": case,
                                            "thread": "arming", "pairs": n, "outstanding": held},
                                           **{k: round(v, 2) for k, v in sc["arming"].items()}))
                        if sc["arming"]["instructions"] > 0:
                            ratios.setdefault(e, {})[case] = round(
                                (c["arming"]["instructions"] + c["timer"]["instructions"]) /
                                sc["arming"]["instructions"], 2)
                if case == "seed":
                    p, t = c["arming"]["instructions"], c["timer"]["instructions"]
                    rows.append({"engine": e, "total": round(p + t, 1), "producer": round(p, 1),
                                 "timer_thread": round(t, 1)})
    write(d, rows, counts, own, seed_n, held_n, ratios)
    return 0


def write(d, rows, counts, own, seed_n, held_n, ratios):
    with open(os.path.join(d, "instructions.csv"), "w") as f:
        f.write("engine,total,producer,timer_thread\n")
        for r in rows:
            f.write("%s,%.1f,%.1f,%.1f\n" % (r["engine"], r["total"], r["producer"],
                                              r["timer_thread"]))
    with open(os.path.join(d, "instructions_counts.csv"), "w") as f:
        f.write("engine,case,thread,outstanding," + ",".join(COUNTS) + "\n")
        for r in counts:
            f.write("%s,%s,%s,%d," % (r["engine"], r["case"], r["thread"], r["outstanding"]) +
                    ",".join("%.2f" % r[k] for k in COUNTS) + "\n")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip() or "unknown"
    doc = {"what": "per arm+cancel pair (callgrind, seedloop, --timely): instructions, locked "
                   "instructions, TSC reads, clock reads, D1 and LL data misses, per thread",
           "commit": commit, "pairs": seed_n, "held_pairs": held_n, "held_outstanding": HELD,
           "cache": CACHE,
           "loop_own": {"%s@%d" % c if c[1] else c[0]: own[c]["arming"]["instructions"]
                        for c in own},
           "rows": rows, "counts": counts,
           "x_structure": ratios}
    with open(os.path.join(d, "instructions.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("per pair (callgrind, user space; seed %d pairs, held %d pairs with %d outstanding; "
          "the loop's own left out)" % (seed_n, held_n, HELD))
    print("  %-18s %-10s %-7s %12s %7s %5s %6s %8s %8s" % (
        "engine", "case", "thread", "instructions", "locked", "tsc", "clock", "D1 miss", "LL miss"))
    for r in counts:
        case = r["case"] if r["outstanding"] in (0, HELD) else "%s@%d" % (r["case"],
                                                                           r["outstanding"])
        print("  %-18s %-10s %-7s %12.1f %7.2f %5.2f %6.2f %8.2f %8.2f" % (
            r["engine"], case, r["thread"], r["instructions"], r["locked"], r["tsc_reads"],
            r["clock_reads"], r["d1_misses"], r["ll_misses"]))
    for e, r in ratios.items():
        print("  x structure, %s / structure:%s (instructions, both threads): %s" % (
            e, STRUCTURE[e], ", ".join("%s %.2fx" % kv for kv in r.items())))
    print("wrote %s/instructions.csv, instructions_counts.csv and instructions.json" % d)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
