/*
 * gbench — Google Benchmark (1.7.1) through a C interface, so benchmark
 * scenarios are written in C and measured, repeated, threaded and reported by
 * Google Benchmark.
 *
 * Overview
 * --------
 *   struct gb_bench *b = gb_register("throughput/wheel/seed", body, ctx);
 *   gb_iterations(b, 10000); gb_repetitions(b, 20); gb_threads(b, 1);
 *   struct gb_result *res; size_t n = gb_run(run, &res);   // runs and clears
 *
 * The body runs the batch form of the keep-running loop, which amortises the
 * loop's own cost over `batch` operations:
 *
 *   static void body(gb_state *st, void *ctx) {
 *       while (gb_keep_running_batch(st, 64))
 *           for (int i = 0; i < 64; i++) op(ctx);
 *   }
 *
 * A body must keep calling gb_keep_running_batch() until it returns 0
 * (leaving early aborts the process); after gb_skip_with_error() it returns 0
 * at once.
 *
 * Names: Google Benchmark appends "/iterations:N/repeats:N/real_time/
 * threads:N"; gb_run() keeps only "/threads:N", so a result is named
 * "<scenario>/<engine>/<case>/threads:N" (aggregates get "_median" etc.), in
 * the console, in gb_result and in the JSON.
 *
 * Output: gb_run() prints Google Benchmark's console table on stdout and adds
 * its JSON ("context" and "benchmarks", the format compare.py reads) to the
 * run's report.  The library Debian ships is a debug build: scenarios measure
 * the loop's own cost with an empty body and report it.
 *
 * Synchronization: register and run from the harness's main thread only;
 * the gb_state functions are for the benchmark body, each thread its own
 * state.
 */
#ifndef TMO_GBENCH_H
#define TMO_GBENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tmo_run;
typedef struct gb_state gb_state; /* a benchmark::State */
struct gb_bench;                  /* a registered benchmark */
typedef void gb_fn(gb_state *st, void *ctx);

/* ---- process setup (the CLI calls these) ---- */

/* Hand Google Benchmark its own flags (--benchmark_*, --v): argv[1..] holds
 * only those.  Returns 0, or -1 after printing every flag it did not
 * recognise (Google Benchmark alone would ignore them silently). */
int gb_init(int argc, char **argv);

/* ---- registration ---- */

/* Register body(st, ctx) under `name`.  The name is copied; ctx must live
 * until gb_run() returns. */
struct gb_bench *gb_register(const char *name, gb_fn *body, void *ctx);
/* Fixed iteration count per repetition (per thread), instead of min time. */
void gb_iterations(struct gb_bench *b, uint64_t n);
/* Run N times; results for each repetition plus mean/median/stddev/cv. */
void gb_repetitions(struct gb_bench *b, int n);
/* Run at least this long (seconds), when no fixed iteration count. */
void gb_min_time(struct gb_bench *b, double seconds);
/* Run the body on N threads at once (always call it: the name gets
 * "/threads:N"). */
void gb_threads(struct gb_bench *b, int n);
/* Time per iteration from wall time instead of the main thread's CPU time
 * (always wanted here: engines do their work on other threads too). */
void gb_use_real_time(struct gb_bench *b);

/* ---- inside a body ---- */

/* The batch form of the keep-running loop: returns non-zero while `n` more
 * iterations are to be run (it may overshoot the total by up to n). */
int gb_keep_running_batch(gb_state *st, uint64_t n);
int gb_thread_index(const gb_state *st);
int gb_thread_count(const gb_state *st);
/* Iterations this thread will run in this repetition. */
uint64_t gb_max_iterations(const gb_state *st);
void gb_pause_timing(gb_state *st);
void gb_resume_timing(gb_state *st);
/* Stop this benchmark with an error shown in the report (a failed arm...). */
void gb_skip_with_error(gb_state *st, const char *msg);

enum gb_counter_flags {
	GB_COUNTER_DEFAULT = 0,
	GB_COUNTER_RATE = 1 << 0,        /* divided by the run's time */
	GB_COUNTER_AVG_THREADS = 1 << 1, /* averaged over threads, not summed */
};
/* Set a user counter on this thread's state.  Counters are SUMMED over
 * threads unless GB_COUNTER_AVG_THREADS. */
void gb_counter(gb_state *st, const char *name, double value, unsigned flags);
/* items_per_second: items counted over the threads, divided by the time. */
void gb_items_processed(gb_state *st, int64_t items);

/* ---- running ---- */

#define GB_MAX_COUNTERS 8
struct gb_result {
	char name[200];          /* without iterations/repeats/real_time parts */
	int threads;
	int64_t repetition;      /* -1 for aggregates */
	char aggregate[16];      /* "" for one repetition, else "mean", "median",
	                            "stddev", "cv" */
	int error;               /* 1 when the body called gb_skip_with_error */
	char error_message[120];
	double iterations;       /* over all threads */
	double real_ns;          /* real time per iteration (ns) over all threads:
	                            wall time / iterations of all threads */
	double cpu_ns;           /* main thread's CPU time per iteration (ns) */
	double real_s;           /* wall seconds of this repetition */
	int ncounters;
	struct {
		char name[32];
		double value;    /* as reported (rates already divided) */
	} counters[GB_MAX_COUNTERS];
};

/* Run every registered benchmark (honouring --benchmark_filter), print the
 * console table, add the JSON to run->report, then clear the registrations.
 * *out (free with gb_results_free) receives one entry per repetition and per
 * aggregate.  Returns the number of entries. */
size_t gb_run(const struct tmo_run *run, struct gb_result **out);
void gb_results_free(struct gb_result *res);

/* Helpers over a result array: the first non-error entry named `name`
 * (exactly, aggregate suffix included, e.g. "x/threads:1_median"), or NULL. */
const struct gb_result *gb_find(const struct gb_result *res, size_t n, const char *name);
/* A counter of a result, or NaN. */
double gb_result_counter(const struct gb_result *r, const char *counter);

#ifdef __cplusplus
}
#endif
#endif /* TMO_GBENCH_H */
