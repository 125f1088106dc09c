/*
 * gbench — Google Benchmark (1.7.1) through a C interface, so benchmark
 * scenarios are written in C and measured, repeated, threaded and reported by
 * Google Benchmark.
 *
 * Overview
 * --------
 *   struct sk_gb_bench *b = sk_gb_register("throughput/wheel/seed", body, ctx);
 *   sk_gb_iterations(b, 10000); sk_gb_repetitions(b, 20); sk_gb_threads(b, 1);
 *   struct sk_gb_result *res; size_t n = sk_gb_run(run, &res);   // runs and clears
 *
 * The body runs the batch form of the keep-running loop, which amortises the
 * loop's own cost over `batch` operations:
 *
 *   static void body(sk_gb_state *st, void *ctx) {
 *       while (sk_gb_keep_running_batch(st, 64))
 *           for (int i = 0; i < 64; i++) op(ctx);
 *   }
 *
 * A body must keep calling sk_gb_keep_running_batch() until it returns 0
 * (leaving early aborts the process); after sk_gb_skip_with_error() it returns 0
 * at once.
 *
 * Names: Google Benchmark appends "/iterations:N/repeats:N/real_time/
 * threads:N"; sk_gb_run() keeps only "/threads:N", so a result is named
 * "<scenario>/<engine>/<case>/threads:N" (aggregates get "_median" etc.), in
 * the console, in sk_gb_result and in the JSON.  --benchmark_filter is
 * matched against that name (not Google Benchmark's longer one), with
 * Google Benchmark's rules: an extended regex found anywhere in it, a
 * leading '-' selecting what does not match.
 *
 * Output: sk_gb_run() prints Google Benchmark's console table on stdout and adds
 * its JSON ("context" and "benchmarks", the format compare.py reads) to the
 * run's report.  The library Debian ships is a debug build: scenarios measure
 * the loop's own cost with an empty body and report it.
 *
 * Synchronization: register and run from the harness's main thread only;
 * the sk_gb_state functions are for the benchmark body, each thread its own
 * state.
 */
#ifndef SK_GBENCH_H
#define SK_GBENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sk_run;
typedef struct sk_gb_state sk_gb_state; /* a benchmark::State */
struct sk_gb_bench;                  /* a registered benchmark */
typedef void sk_gb_fn(sk_gb_state *st, void *ctx);

/* ---- process setup (the CLI calls these) ---- */

/* Hand Google Benchmark its own flags (--benchmark_*, --v): argv[1..] holds
 * only those.  Returns 0, or -1 after printing every flag it did not
 * recognise (Google Benchmark alone would ignore them silently). */
int sk_gb_init(int argc, char **argv);

/* ---- registration ---- */

/* Whether --benchmark_filter selects "<name>/threads:<threads>": a scenario
 * skips the set-up of a benchmark that will not run (e.g. a million
 * background timers). */
int sk_gb_selected(const char *name, int threads);

/* Register body(st, ctx) under `name`.  The name is copied; ctx must live
 * until sk_gb_run() returns. */
struct sk_gb_bench *sk_gb_register(const char *name, sk_gb_fn *body, void *ctx);
/* Fixed iteration count per repetition (per thread), instead of min time. */
void sk_gb_iterations(struct sk_gb_bench *b, uint64_t n);
/* Run N times; results for each repetition plus mean/median/stddev/cv. */
void sk_gb_repetitions(struct sk_gb_bench *b, int n);
/* Run at least this long (seconds), when no fixed iteration count. */
void sk_gb_min_time(struct sk_gb_bench *b, double seconds);
/* Run the body on N threads at once (always call it: the name gets
 * "/threads:N"). */
void sk_gb_threads(struct sk_gb_bench *b, int n);
/* Time per iteration from wall time instead of the main thread's CPU time
 * (always wanted here: engines do their work on other threads too). */
void sk_gb_use_real_time(struct sk_gb_bench *b);

/* ---- inside a body ---- */

/* The batch form of the keep-running loop: returns non-zero while `n` more
 * iterations are to be run (it may overshoot the total by up to n). */
int sk_gb_keep_running_batch(sk_gb_state *st, uint64_t n);
int sk_gb_thread_index(const sk_gb_state *st);
int sk_gb_thread_count(const sk_gb_state *st);
/* Iterations this thread will run in this repetition. */
uint64_t sk_gb_max_iterations(const sk_gb_state *st);
void sk_gb_pause_timing(sk_gb_state *st);
void sk_gb_resume_timing(sk_gb_state *st);
/* Stop this benchmark with an error shown in the report (a failed arm...). */
void sk_gb_skip_with_error(sk_gb_state *st, const char *msg);

enum sk_gb_counter_flags {
	SK_GB_COUNTER_DEFAULT = 0,
	SK_GB_COUNTER_RATE = 1 << 0,        /* divided by the run's time */
	SK_GB_COUNTER_AVG_THREADS = 1 << 1, /* averaged over threads, not summed */
};
/* Set a user counter on this thread's state.  Counters are SUMMED over
 * threads unless SK_GB_COUNTER_AVG_THREADS. */
void sk_gb_counter(sk_gb_state *st, const char *name, double value, unsigned flags);
/* items_per_second: items counted over the threads, divided by the time. */
void sk_gb_items_processed(sk_gb_state *st, int64_t items);

/* ---- running ---- */

#define SK_GB_MAX_COUNTERS 8
struct sk_gb_result {
	char name[200];          /* without iterations/repeats/real_time parts */
	int threads;
	int64_t repetition;      /* -1 for aggregates */
	char aggregate[16];      /* "" for one repetition, else "mean", "median",
	                            "stddev", "cv" */
	int error;               /* 1 when the body called sk_gb_skip_with_error */
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
	} counters[SK_GB_MAX_COUNTERS];
};

/* Run every registered benchmark that --benchmark_filter selects, print the
 * console table, add the JSON to run->report, then clear the registrations
 * (when the filter selects none: nothing is run, printed or added, 0).
 * *out (free with sk_gb_results_free) receives one entry per repetition and per
 * aggregate.  Returns the number of entries. */
size_t sk_gb_run(const struct sk_run *run, struct sk_gb_result **out);
/* sk_gb_run with the registered benchmarks' repetitions run in a random
 * order among one another (Google Benchmark's random interleaving), so the
 * repetitions of each sample the same stretch of time as the others': a
 * ratio of their medians does not carry the machine's drift from one
 * benchmark's stretch to the next.  Meant for fixed-iteration repetitions
 * (a min-time benchmark's first repetition would size itself on whatever
 * ran before it). */
size_t sk_gb_run_interleaved(const struct sk_run *run, struct sk_gb_result **out);
/* a's n_a entries followed by b's (both freed; a NULL array is empty) in
 * *out; returns the count (0 and *out NULL when out of memory). */
size_t sk_gb_results_concat(struct sk_gb_result *a, size_t n_a, struct sk_gb_result *b,
                            size_t n_b, struct sk_gb_result **out);
void sk_gb_results_free(struct sk_gb_result *res);

/* Helpers over a result array: the first non-error entry named `name`
 * (exactly, aggregate suffix included, e.g. "x/threads:1_median"), or NULL. */
const struct sk_gb_result *sk_gb_find(const struct sk_gb_result *res, size_t n, const char *name);
/* A counter of a result, or NaN. */
double sk_gb_result_counter(const struct sk_gb_result *r, const char *counter);

#ifdef __cplusplus
}
#endif
#endif /* SK_GBENCH_H */
