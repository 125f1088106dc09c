"""The throughput scenario's rounds run interleaved (tp_register_rounds):

    rounds.py HARNESS DIR             run it (wheel, --quick, the rounds
                                      only) and check the JSON
    rounds.py HARNESS DIR --catches   the same run with its "round"
                                      counters renumbered benchmark by
                                      benchmark, as consecutive repetitions
                                      would be: the check must fail

The seed, the empty loop, the floor and the structure's seed each report
`rounds` repetitions, every one with a counter "round" (its place in the
run's order); together they number 1..N once each, and they are not one
benchmark's block after another's (a random order leaves all four in
blocks with odds under 1e-8).  Exit 0 when the check passes (--catches:
when it fails on the renumbered copy), 1 otherwise."""

import json
import os
import subprocess
import sys

ROUNDS = ("seed", "empty", "floor", "structure:wheel/seed")


def what_of(b):
    """"seed" of "throughput/wheel/seed/threads:1"."""
    return b["name"].split("/", 2)[2].rsplit("/threads:", 1)[0]


def check(doc):
    """None when the rounds interleave, else what is wrong."""
    reps = []
    for b in doc.get("benchmarks", []):
        what = what_of(b)
        if b.get("run_type") == "iteration" and what in ROUNDS:
            if "round" not in b:
                return "%s has no counter \"round\"" % b["name"]
            reps.append((b["round"], what))
    if not reps:
        return "no repetition of the rounds in the JSON"
    per = {w: sum(1 for _, x in reps if x == w) for w in ROUNDS}
    if len(set(per.values())) != 1 or 0 in per.values():
        return "repetitions per benchmark differ: %s" % per
    got = sorted(r for r, _ in reps)
    if got != [float(i) for i in range(1, len(reps) + 1)]:
        return "the rounds are not numbered 1..%d once each: %s" % (len(reps), got)
    order = [w for _, w in sorted(reps)]
    blocks = 1 + sum(1 for a, b in zip(order, order[1:]) if a != b)
    print("rounds: %d repetitions of %d benchmarks in %d blocks: %s" % (
        len(order), len(ROUNDS), blocks, " ".join(w.split(":")[0][:5] for w in order)))
    if blocks <= len(ROUNDS):
        return "each benchmark's repetitions ran as one block (%d blocks): not interleaved" % blocks
    return None


def main(argv):
    harness, tmp = argv[0], argv[1]
    catches = "--catches" in argv[2:]
    out = os.path.join(tmp, "rounds%s.json" % ("_catches" if catches else ""))
    flt = "--benchmark_filter=^throughput/wheel/(seed|empty|floor|structure:wheel/seed)/"
    rc = subprocess.run([harness, "--impl=wheel", "--scenario=throughput", "--quick", flt,
                         "--json=" + out], stdout=subprocess.DEVNULL).returncode
    if rc != 0:
        print("FAIL: the harness exited %d" % rc)
        return 1
    doc = json.load(open(out))
    if catches:
        # Renumber as if each benchmark's repetitions had run one after another.
        n = 0
        for w in ROUNDS:
            for b in doc["benchmarks"]:
                if b.get("run_type") == "iteration" and what_of(b) == w:
                    n += 1
                    b["round"] = float(n)
    why = check(doc)
    if catches:
        print("the renumbered copy: %s" % (why or "passed"))
        return 0 if why else 1
    if why:
        print("FAIL: %s" % why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
