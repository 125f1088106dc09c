/*
 * The harness's results sink (implements tmo_report/tmo_violation/
 * tmo_progress of scenarios/scenario.h): rows, Google Benchmark JSON and
 * violations of every run, written as one JSON file and a CSV beside it.
 *
 * Synchronization: tmo_report() and tmo_violation() may be called from any
 * thread (a mutex serialises them); the report_* functions below are for the
 * harness's main thread.
 */
#ifndef TMO_CLI_REPORT_H
#define TMO_CLI_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "scenario.h"

#ifdef __cplusplus
extern "C" {
#endif

struct report_opts {
	const char *json_path; /* NULL: keep results in memory only */
	const char *argv0;     /* how to reproduce: the program name */
	int threads, quick;
	uint64_t seed;
	const char *command; /* the command line, for the JSON's context */
};

struct tmo_report *report_open(const struct report_opts *opts);
void report_close(struct tmo_report *r);

/* A scenario run against one engine starts / ends (the result is what the
 * scenario's run function returned). */
void report_begin_run(struct tmo_report *r, const char *scenario, const char *engine);
void report_end_run(struct tmo_report *r, int result, double seconds);

/* Merge one Google Benchmark JSON document ({"context", "benchmarks"}) into
 * the report: benchmarks are appended (family indices renumbered so several
 * runs stay distinct for compare.py), the first context is kept. */
void report_add_gbench_json(struct tmo_report *r, const char *json_text);

/* One row of the end-of-run targets table, kept in the JSON's "targets"
 * (measured NaN: not measured). */
void report_add_target(struct tmo_report *r, const char *what, double measured, const char *op,
                       double want, const char *unit, const char *verdict);

/* Before any run: the --json destination and its CSV are regular files or
 * absent, and files can be created beside them.  Touches neither.  Returns
 * 0 or -1 (printed). */
int report_check_writable(struct tmo_report *r);

/* Replace the JSON file and the CSV beside it with what finished so far
 * (the runs that ended: rows, benchmarks and violations of a run still in
 * progress are left out), "complete": complete.  Each file is written to a
 * temporary name beside it and renamed over it, so it always holds a whole
 * document: the previous one or this one.  Returns 0 or -1 after printing
 * the error (a full disk, a closed directory...).  Without --json: 0. */
int report_write(struct tmo_report *r, int complete);
/* The same with "complete": false and "interrupted": {"signal": NAME,
 * "scenario", "engine" of the run cut short}.  Callable from any thread
 * (the signal-waiting thread of the harness). */
int report_write_interrupted(struct tmo_report *r, const char *signal_name);
/* Runs that ended (report_end_run) so far. */
size_t report_runs_done(struct tmo_report *r);
/* The CSV's path (FILE.json -> FILE.csv), or NULL without --json. */
const char *report_csv_path(const struct tmo_report *r);

/* A row's value, looked up by scenario, engine, metric, param.  Returns 1
 * and sets *value when found (the last such row), else 0. */
int report_lookup(struct tmo_report *r, const char *scenario, const char *engine,
                  const char *metric, const char *param, double *value);
/* Violations recorded in this process (all runs). */
int64_t report_violations(const struct tmo_report *r);

#ifdef __cplusplus
}
#endif
#endif
