/*
 * The harness's results sink (implements sk_report/sk_violation/sk_skip/
 * sk_progress of scenarios/kit/sk.h): rows, Google Benchmark JSON and
 * violations of every run, written as one JSON file and a CSV beside it.
 *
 * Synchronization: sk_report() and sk_violation() may be called from any
 * thread (a mutex serialises them); the sk_sink_* functions below are for the
 * harness's main thread.
 */
#ifndef SK_SINK_H
#define SK_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "sk.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sk_sink_opts {
	const char *json_path; /* NULL: keep results in memory only */
	const char *argv0;     /* how to reproduce: the program name */
	int threads, quick;
	uint64_t seed;
	const char *command; /* the command line, for the JSON's context */
};

struct sk_sink *sk_sink_open(const struct sk_sink_opts *opts);
void sk_sink_close(struct sk_sink *r);

/* A scenario run against one engine starts / ends (the result is what the
 * scenario's run function returned: end_run adds it as the row
 * "violations" when it is >= 0 and the scenario declares that metric).  sk_report() refuses, with a message, a
 * row whose metric or unit the scenario does not declare (its metrics
 * table); end_run returns how many it refused in the run (the harness fails
 * the run on any). */
void sk_sink_begin_run(struct sk_sink *r, const struct sk_scenario *scenario, const char *engine);
int sk_sink_end_run(struct sk_sink *r, int result, double seconds);

/* Merge one Google Benchmark JSON document ({"context", "benchmarks"}) into
 * the report: benchmarks are appended (family indices renumbered so several
 * runs stay distinct for compare.py), the first context is kept. */
void sk_sink_add_gbench_json(struct sk_sink *r, const char *json_text);

/* One row of the end-of-run targets table, kept in the JSON's "targets"
 * (measured NaN: not measured). */
void sk_sink_add_target(struct sk_sink *r, const char *what, double measured, const char *op,
                       double want, const char *unit, const char *verdict);

/* Before any run: the --json destination and its CSV are regular files or
 * absent, and files can be created beside them.  Touches neither.  Returns
 * 0 or -1 (printed). */
int sk_sink_check_writable(struct sk_sink *r);

/* Replace the JSON file and the CSV beside it with what finished so far
 * (the runs that ended: rows, benchmarks and violations of a run still in
 * progress are left out), "complete": complete.  Each file is written to a
 * temporary name beside it and renamed over it, so it always holds a whole
 * document: the previous one or this one.  Returns 0 or -1 after printing
 * the error (a full disk, a closed directory...).  Without --json: 0. */
int sk_sink_write(struct sk_sink *r, int complete);
/* The same with "complete": false and "interrupted": {"signal": NAME,
 * "scenario", "engine" of the run cut short}.  Callable from any thread
 * (the signal-waiting thread of the harness). */
int sk_sink_write_interrupted(struct sk_sink *r, const char *signal_name);
/* Runs that ended (sk_sink_end_run) so far. */
size_t sk_sink_runs_done(struct sk_sink *r);
/* The CSV's path (FILE.json -> FILE.csv), or NULL without --json. */
const char *sk_sink_csv_path(const struct sk_sink *r);

/* The size NAME that scenario S declares, or NULL. */
const struct sk_size *sk_sink_size(const struct sk_scenario *s, const char *name);

/* A row's value, looked up by scenario, engine, metric, param.  Returns 1
 * and sets *value when found (the last such row), else 0. */
int sk_sink_lookup(struct sk_sink *r, const char *scenario, const char *engine,
                  const char *metric, const char *param, double *value);

#ifdef __cplusplus
}
#endif
#endif
