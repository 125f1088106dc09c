/*
 * The results sink's state, shared by sink.c (rows, runs, lookups) and
 * sink_files.c (the JSON and CSV files); private to the kit.
 */
#ifndef SK_SINK_STATE_H
#define SK_SINK_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sink.h"

/* Violations printed in full per run; the rest are counted. */
#define VIOLATIONS_SHOWN 20

struct sk_sink {
	struct sk_sink_opts opts;
	char *json_path, *csv_path;
	json_t *context, *benchmarks, *rows, *runs, *violations, *targets;
	int64_t family_offset; /* added to Google Benchmark family indices */
	/* What finished: the first *_done entries of rows, benchmarks and
	 * violations belong to runs that ended (sk_sink_end_run); a write
	 * leaves out the rest, which a run in progress is still adding to. */
	size_t rows_done, benchmarks_done, violations_done;
	int in_run; /* between sk_sink_begin_run and sk_sink_end_run */

	pthread_mutex_t mu; /* guards everything below and the json arrays */
	char scenario[64], engine[64];
	const struct sk_scenario *running; /* the scenario of the run in progress */
	int undeclared; /* rows refused in this run: metric or unit not declared */
	int64_t run_start_ns, last_progress_ns;
	int64_t run_violations;
	char skip_reason[256]; /* sk_skip() in this run; "" when none */
	int progress_line_open; /* a "\r" progress line is on the terminal */
	int tty;
};

/* One Google Benchmark document into the report, r->mu held: its context
 * where ours lacks a key, its benchmarks appended (family indices
 * renumbered past those already there, so runs stay distinct for
 * compare.py), each given the keys of `tags`. */
void sk_sink_merge_gbench_locked(struct sk_sink *r, json_t *doc, json_t *tags);

/* [1, 5, 15 minute load averages], or null. */
json_t *sk_sink_load_avg(void);

#endif
