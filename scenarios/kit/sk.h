/*
 * The scenario interface: a scenario is data plus one run function, run by the
 * harness against every chosen engine.  Each file scenarios/NAME.c exports
 * `const struct sk_scenario sk_scenario_NAME` (the file name with '-'
 * written as '_'); CMake generates the scenario table from the folder, so a
 * scenario is registered by adding its file.
 */
#ifndef SK_H
#define SK_H

#include <stdint.h>

#include "tmo/tmo.h"

struct sk_sink; /* results sink owned by the harness (JSON + CSV) */

/* What the harness hands a scenario for one engine. */
struct sk_run {
	const struct tmo_engine_ops *ops; /* the engine under test */
	int threads;                      /* --threads (default 2) */
	int quick;                        /* --quick: CI-sized */
	uint64_t seed;                    /* --seed */
	struct sk_sink *report;
	int repeat;                       /* --repeat: fresh engine instances (>= 1) */
};

struct sk_scenario {
	const char *name;    /* "throughput" */
	const char *summary; /* one line */
	/* Correctness scenarios count violations: the harness exits 1 when any
	 * run returned > 0. */
	int correctness;
	/* Run against run->ops.  Returns the number of violations found (0 for
	 * benchmarks), a negative enum tmo_error if it could not run, or
	 * SK_SKIPPED (see sk_skip). */
	int (*run)(const struct sk_run *run);
	/* The manual, kept beside the code it describes: `./harness --help`
	 * prints both under SCENARIOS and README.md carries that output (a
	 * ctest compares them).  Plain sentences; the harness wraps them.
	 *   params      what the run does and with which sizes: full, then
	 *               --quick, and what --threads and --seed change
	 *   fails_when  what makes the run count a violation (exit status 1) */
	const char *params;
	const char *fails_when;
};

/* One result row: scenario and engine come from the run; `metric` names the
 * figure ("ns_per_op"), `param` its parameters ("threads=2,live=1000000" or
 * ""), `unit` its unit ("ns", "ops/s", "bytes", "count").  Rows go to the
 * JSON file and to the CSV beside it. */
void sk_report(const struct sk_run *run, const char *metric, const char *param,
                double value, const char *unit);

/* Print a violation with what is needed to reproduce it (stderr). */
void sk_violation(const struct sk_run *run, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A run that cannot happen here and now for want of a per-user kernel
 * resource that other processes hold (kernel timers, threads) is neither a
 * violation nor an error: the scenario says why with sk_skip() and returns
 * SK_SKIPPED.  Violations it found before that still count (it
 * returns them instead).  The harness reports the run as skipped, with the
 * reason, and exits 77 when every run it made was skipped. */
#define SK_SKIPPED (-1000)
void sk_skip(const struct sk_run *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Progress for runs longer than 2 s: call often; prints to stderr at most a
 * few times a second once the run has lasted 2 s. */
void sk_progress(const struct sk_run *run, const char *what, double fraction);

#endif
