"""tests/scripts/check_workflow.py ROOT WORKFLOW: the hosted-CI workflow parses and
everything it names exists.

  - YAML that parses, with `on`, and jobs that each have `runs-on` and steps;
  - every step either `uses` an action (owner/name@ref, or ./path that
    exists) or `run`s commands;
  - in each `run`, every command given by path (`.ci/run`, `scripts/compare`,
    the script after bash/sh/python3) exists in ROOT, and one run directly is
    executable; every other relative path a command names exists, unless it
    is an output the run makes (results/ci, build/);
  - upload paths lie in those outputs.
Exit 1 with one line per problem.  Run by the ctests scripts/ci_workflow
and scripts/ci_workflow_catches_missing (tests/scripts/scripts.cmake).
"""

import os
import re
import shlex
import sys

import yaml

OUTPUTS = ("results/ci", "build")
INTERPRETERS = {"bash", "sh", "python3", "/usr/bin/python3", "env"}
PATH_RE = re.compile(r"^(\./)?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.*-]+)+/?$")


def is_output(p):
    p = p[2:] if p.startswith("./") else p
    return any(p == o or p.startswith(o + "/") for o in OUTPUTS)


def check_run(root, where, script, problems):
    for line in script.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            problems.append("%s: cannot split %r: %s" % (where, line, e))
            continue
        command_next = True
        via_interpreter = False
        for w in words:
            if w in ("&&", "||", ";", "|", "then", "else", "do", "if", "!", "{", "}"):
                command_next = True
                continue
            if w.startswith(">") or w.startswith("<") or w.startswith("$") or w.startswith("-"):
                command_next = False
                continue
            if command_next:
                command_next = False
                if w in INTERPRETERS:
                    command_next, via_interpreter = True, True
                    continue
                if "/" in w and not w.startswith("/"):
                    path = os.path.join(root, w)
                    if not os.path.isfile(path):
                        problems.append("%s: runs %s, which is not in the repository" % (where, w))
                    elif not via_interpreter and not os.access(path, os.X_OK):
                        problems.append("%s: runs %s, which is not executable" % (where, w))
                via_interpreter = False
                continue
            if PATH_RE.match(w) and not w.startswith("/") and not is_output(w):
                if not os.path.exists(os.path.join(root, w)):
                    problems.append("%s: names %s, which is not in the repository" % (where, w))


def main(root, wf):
    problems = []
    with open(wf) as f:
        try:
            doc = yaml.safe_load(f)
        except yaml.YAMLError as e:
            print("%s: does not parse: %s" % (wf, e))
            return 1
    if not isinstance(doc, dict):
        print("%s: not a mapping" % wf)
        return 1
    # YAML 1.1 reads the key `on` as the boolean true.
    if "on" not in doc and True not in doc:
        problems.append("no `on:` (no event starts the workflow)")
    jobs = doc.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        problems.append("no jobs")
        jobs = {}
    nrun = 0
    for name, job in jobs.items():
        if "runs-on" not in job:
            problems.append("job %s: no runs-on" % name)
        steps = job.get("steps") or []
        if not steps:
            problems.append("job %s: no steps" % name)
        for i, step in enumerate(steps):
            where = "job %s, step %d (%s)" % (name, i + 1, step.get("name", "unnamed"))
            if ("uses" in step) == ("run" in step):
                problems.append("%s: wants exactly one of uses/run" % where)
                continue
            if "uses" in step:
                u = step["uses"]
                if u.startswith("./"):
                    if not os.path.exists(os.path.join(root, u)):
                        problems.append("%s: uses %s, which is not in the repository" % (where, u))
                elif not re.match(r"^[\w.-]+/[\w./-]+@[\w.-]+$", u):
                    problems.append("%s: uses %r: want owner/name@ref" % (where, u))
                paths = (step.get("with") or {}).get("path")
                if "upload-artifact" in u and paths:
                    for p in str(paths).split():
                        if not is_output(p):
                            problems.append("%s: uploads %s, which no step makes" % (where, p))
            else:
                nrun += 1
                check_run(root, where, step["run"], problems)
    if nrun == 0:
        problems.append("no step runs anything")
    for p in problems:
        print("%s: %s" % (wf, p))
    if not problems:
        print("%s: parses; %d jobs, %d run steps, every script it names exists" % (
            wf, len(jobs), nrun))
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
