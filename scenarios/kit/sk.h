/*
 * The scenario interface: a scenario is data plus one run function, run by the
 * harness against every chosen engine.  Each file scenarios/NAME.c exports
 * `const struct sk_scenario sk_scenario_NAME` (the file name with '-'
 * written as '_'); CMake generates the scenario table from the folder, so a
 * scenario is registered by adding its file.
 *
 * A scenario's file opens with its tables: its metrics (every figure it
 * reports: struct sk_metric), the project's targets over them (struct
 * sk_target) and the sizes its run is made of (struct sk_size).  Its code
 * follows, and last its struct sk_scenario: the manual (whose params name
 * those sizes) and the run function, defined above it.
 */
#ifndef SK_H
#define SK_H

#include <stdint.h>

#include "tmo/tmo.h"

struct sk_sink; /* results sink owned by the harness (JSON + CSV) */
struct sk_metric;
struct sk_target;
struct sk_size;
struct sk_results;

/* What the harness hands a scenario for one engine. */
struct sk_run {
	const struct tmo_engine_ops *ops; /* the engine under test */
	int threads;                      /* --threads (default 2) */
	int quick;                        /* --quick: CI-sized */
	uint64_t seed;                    /* --seed */
	struct sk_sink *report;
	int repeat;                       /* --repeat: fresh engine instances (>= 1) */
	/* --repeat's instances run each in a process of its own (kit/instance.c):
	 * the harness's command for one of them (argv, NULL-terminated, without
	 * --scenario, --repeat, --json), or NULL where they run in this process.
	 * In such a child, `instance_fd` is where its figures go
	 * (sk_instance_send: a descriptor > 2) and `instance` its index; both 0
	 * in the harness itself, so a zeroed field means "not a child". */
	const char *const *instance_argv;
	int instance, instance_fd;
};

struct sk_scenario {
	const char *name;    /* "throughput" */
	const char *summary; /* one line */
	/* Correctness scenarios count violations: the harness exits 1 when any
	 * run returned > 0. */
	int correctness;
	/* Run against run->ops.  Returns the number of violations found (0 for
	 * benchmarks), a negative enum tmo_error if it could not run, or
	 * SK_SKIPPED (see sk_skip).  A scenario that declares the metric
	 * violations (count) gets that number as its row "violations" (param
	 * ""), reported by the harness when the run ends. */
	int (*run)(const struct sk_run *run);
	/* The manual, kept beside the code it describes: `./harness --help`
	 * prints both under SCENARIOS, after the sizes, and README.md carries
	 * that output (a ctest compares them).  Plain sentences; the harness
	 * wraps them.
	 *   params      what the run does (its numbers are the sizes below),
	 *               and what --threads and --seed change
	 *   fails_when  what makes the run count a violation (exit status 1) */
	const char *params;
	const char *fails_when;
	/* The sizes the run is made of, {NULL}-terminated (NULL: none): the
	 * code reads them with sk_size(), --help prints them. */
	const struct sk_size *sizes;
	/* Every figure the scenario reports, {NULL}-terminated: sk_report()
	 * refuses a metric (or unit) not declared here, and a target can name
	 * only a declared metric (the harness checks every table before it runs
	 * anything, and prints them with --list-metrics for scripts/plot). */
	const struct sk_metric *metrics;
	/* The project's targets over those figures, {NULL}-terminated (NULL: none),
	 * printed in the end-of-run targets table when the scenario ran. */
	const struct sk_target *targets;
	/* 1: --repeat's instances run each in a process of its own
	 * (sk_instance_run), started by the harness ahead of the engines' runs,
	 * interleaved across the engines (sk_instance_prerun). */
	int instances;
	/* Optional: the scenario's own end-of-run table, printed before the
	 * targets from the rows of every run in this process. */
	void (*end_table)(const struct sk_results *res);
};

/* A figure the scenario reports: its name ("seed_median_ns_per_op") and unit
 * ("ns", "ops/s", "bytes", "count"). */
struct sk_metric {
	const char *name;
	const char *unit;
};

/* A size of the run (a count, a duration): its value in full runs and with
 * --quick, in `unit` ("timers", "s", "ms"; "" for a plain number).  A time
 * unit (s, ms, us) lets sk_size_ns() convert it. */
struct sk_size {
	const char *name;
	double full, quick;
	const char *unit;
};

/* The running scenario's size NAME for this run's mode (full or --quick),
 * in its declared unit.  Asking for a size the scenario does not declare is
 * a programming error: the process aborts, naming it. */
double sk_size(const struct sk_run *run, const char *name);
/* The same for a time size, in nanoseconds (aborts unless its unit is s,
 * ms or us). */
int64_t sk_size_ns(const struct sk_run *run, const char *name);

/* A target: a declared metric of this scenario, for each named engine,
 * compared with a bound.  The figure is the row (engine, metric, param),
 * optionally divided by a second row (per_*: NULL means the same as the
 * first), the ratio taken upside down when `inverse`, then times `scale`.
 * A figure that was not reported is "not measured", never met. */
enum sk_cmp { SK_AT_MOST, SK_AT_LEAST };
struct sk_target {
	const char *label;   /* the row's name; "%s": the engine ("%d": the threads, most_threads) */
	/* "wheel", "mpsc,wheel" (one row each, in this order), "*": every engine run */
	const char *engines;
	const char *metric, *param;
	const char *per_metric, *per_param, *per_engine; /* a ratio's denominator */
	int inverse;  /* (per figure) / (figure): "N x faster than" */
	double scale; /* 0: 1 */
	enum sk_cmp cmp;
	double bound;
	const char *unit; /* printed after the figure and the bound: " ns", "x" */
	/* Why the figure is missing, "%s" the engine that was not run; NULL:
	 * "not measured (ENGINE not run)", ENGINE the one without a figure. */
	const char *missing;
	/* The most threads measured beyond 2 (param "threads=N", N > 2, the
	 * largest reported): the bound is per thread, times N; no row without
	 * such N. */
	int most_threads;
};

/* What a summary reads: the rows of this process and the engines run. */
struct sk_results {
	struct sk_sink *sink;
	const struct tmo_engine_ops *const *engines;
	int nengines;
};
/* A row's value (the last reported), or NaN when none was reported. */
double sk_figure(const struct sk_results *res, const char *scenario, const char *engine,
                 const char *metric, const char *param);

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

/* --repeat in processes: a fresh process per instance, so what moves
 * between processes (where the threads run, the address layout, the pages
 * the engine is given) shows in the instances' spread, and a comparison
 * judges by process (scripts/compare).  sk_instance_run starts instance
 * `index` of the scenario running (run->report's) as a child harness
 * (run->instance_argv), waits for it (or takes what sk_instance_prerun
 * kept), merges its Google Benchmark entries (tagged "tmo_instance" and
 * "tmo_pid") and violations into run->report and copies its figures (the
 * `len` bytes it sent) to `figs`, setting *sent.  Returns what the
 * child's run returned (violations, SK_SKIPPED with its reason re-issued,
 * or a negative enum tmo_error); when the child could not start, died or
 * sent nothing, *sent is 0, `figs` is untouched and the return is 1 after
 * a violation that says how it ended.  The child calls sk_instance_send
 * once, with its run's result and figures, before it returns.  Main thread
 * only. */
int sk_instance_run(const struct sk_run *run, int index, void *figs, size_t len, int *sent);
/* The harness, before the runs of a scenario that declares `instances`:
 * starts instance `index` for `engine` now (argv: as instance_argv), and
 * keeps what it left for that engine's sk_instance_run.  Called instance
 * by instance across the engines (1 of each, then 2 ...), so each engine's
 * instances sample the whole stretch of the run, not one minute of it.
 * sk_instance_discard frees what no run took. */
void sk_instance_prerun(const char *const *argv, const char *scenario, const char *engine,
                        int index);
void sk_instance_discard(void);
void sk_instance_send(const struct sk_run *run, int result, const void *figs, size_t len);

/* Progress for runs longer than 2 s: call often; prints to stderr at most a
 * few times a second once the run has lasted 2 s. */
void sk_progress(const struct sk_run *run, const char *what, double fraction);

#endif
