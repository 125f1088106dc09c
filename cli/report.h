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

/* Rewrite the JSON file and the CSV beside it.  Returns 0 or -1 (printed). */
int report_write(struct tmo_report *r);
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
