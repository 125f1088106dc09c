/*
 * Small helpers shared by the scenarios (header-only: the .c files in scenarios/
 * are each a scenario).  Nothing here is timed on a fast path except
 * sk_now_ns (one clock read).
 */
#ifndef SK_UTIL_H
#define SK_UTIL_H

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "shared.h" /* the PRNG (sk_rng) and TMO_TEST_SCALE (sk_scale), the tests' too */
#include "sk.h"

static inline int64_t sk_now_ns(void) { return tmo_now_ns(); }

/* tmo_cancel's result by name: its four results, an error's name, or "an
 * unknown result". */
static inline const char *sk_cancel_name(int rc)
{
	return rc == TMO_CANCEL_PREVENTED ? "TMO_CANCEL_PREVENTED"
	       : rc == TMO_CANCEL_FIRED   ? "TMO_CANCEL_FIRED"
	       : rc == TMO_CANCEL_WAITED  ? "TMO_CANCEL_WAITED"
	       : rc == TMO_CANCEL_SELF    ? "TMO_CANCEL_SELF"
	       : rc < 0                   ? tmo_errname(rc)
	                                  : "an unknown result";
}

static inline void sk_sleep_ns(int64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* Wait until CLOCK_MONOTONIC reaches `when`: sleep while far, then spin
 * yielding the CPU (2 cores: a pure spin would starve the timer thread). */
static inline void sk_wait_until(int64_t when)
{
	for (;;) {
		int64_t left = when - sk_now_ns();
		if (left <= 0)
			return;
		if (left > 200000)
			sk_sleep_ns(left - 100000);
		else
			sched_yield();
	}
}

/* Resident set size in bytes (/proc/self/statm), or 0 if unreadable. */
static inline uint64_t sk_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long long size = 0, res = 0;
	if (f == NULL)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* CPU time (user + system) of the whole process (getrusage), of the
 * calling thread, and of the process's other threads (the engine's, while
 * a scenario's own thread waits or measures beside them). */
static inline int64_t sk_process_cpu_ns(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * TMO_NSEC_PER_SEC +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * TMO_NSEC_PER_USEC;
}
static inline int64_t sk_thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * TMO_NSEC_PER_SEC + ts.tv_nsec;
}
static inline int64_t sk_others_cpu_ns(void) { return sk_process_cpu_ns() - sk_thread_cpu_ns(); }

/* Is the engine working?  A wait that judges "no progress" counts it as
 * progress (state, not patience) when the other threads used at least
 * 1/SK_BUSY of one CPU since its last look: a timer thread filing or
 * expiring a million timers is busy, not stuck; an idle engine's ticks
 * use well under 1 %.  Look over seconds, not milliseconds: the process's
 * getrusage and the thread's clock disagree by a few ms now and then. */
#define SK_BUSY 20
struct sk_busy {
	int64_t at, cpu;
};
static inline struct sk_busy sk_busy_start(void)
{
	return (struct sk_busy){sk_now_ns(), sk_others_cpu_ns()};
}
static inline int sk_busy_since(struct sk_busy *b)
{
	struct sk_busy now = sk_busy_start();
	int busy = (now.cpu - b->cpu) * SK_BUSY >= now.at - b->at;
	*b = now;
	return busy;
}

static inline int sk_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}
static inline int sk_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
/* q-quantile (0..1) of a sorted array, nearest rank. */
static inline int64_t sk_quantile_i64(const int64_t *sorted, size_t n, double q)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)ceil(q * (double)n);
	if (i > 0)
		i--;
	if (i >= n)
		i = n - 1;
	return sorted[i];
}
static inline double sk_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, sk_cmp_double);
	return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* How long sk_arm_retry asks again: longer than any other run here holds
 * a shared limit (expiry's 1e5 kernel timers are due within about 1 s, and
 * fire or are cancelled soon after). */
#define SK_ARM_PATIENCE_NS (10 * TMO_NSEC_PER_SEC)

/* tmo_arm, retried while the engine answers TMO_EAGAIN (every 1 ms, for at
 * most SK_ARM_PATIENCE_NS).  For scenarios that keep few timers in flight:
 * there a refusal is not the engine's own capacity but a limit shared with
 * other processes (posix: RLIMIT_SIGPENDING is per user, and a concurrent
 * run can hold all of it).  Each retry is counted in *retries so the
 * scenario reports it; TMO_EAGAIN is returned if it persists, which the
 * caller treats as a shortage of that resource (a skip or a run cut short,
 * said), never as a violation. */
static inline int sk_arm_retry(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns,
                               tmo_callback *cb, void *arg, uint64_t *retries)
{
	int rc = tmo_arm(e, t, timeout_ns, cb, arg);
	if (rc != TMO_EAGAIN)
		return rc;
	int64_t until = sk_now_ns() + SK_ARM_PATIENCE_NS;
	while (rc == TMO_EAGAIN && sk_now_ns() < until) {
		++*retries;
		sk_sleep_ns(TMO_NSEC_PER_MSEC);
		rc = tmo_arm(e, t, timeout_ns, cb, arg);
	}
	return rc;
}

/* A fresh engine for the run, or why not: 0 and *e, SK_SKIPPED after
 * sk_skip() when the engine is short of a per-user kernel resource
 * (TMO_EAGAIN: kernel timers, threads, which other processes share) or
 * lacks its kernel facility (TMO_EUNAVAIL: io_uring disabled), or the
 * negative enum tmo_error it failed with. */
static inline int sk_create_or_skip(const struct sk_run *run, struct tmo **e)
{
	int rc = tmo_create_ops(run->ops, NULL, e);
	if (rc == TMO_EAGAIN) {
		sk_skip(run, "the engine could not be created: TMO_EAGAIN (%s; a per-user limit such "
		             "as RLIMIT_SIGPENDING for kernel timers, which other processes share)",
		        tmo_strerror(rc));
		return SK_SKIPPED;
	}
	if (rc == TMO_EUNAVAIL) {
		sk_skip(run, "the engine could not be created: TMO_EUNAVAIL (%s)", tmo_strerror(rc));
		return SK_SKIPPED;
	}
	return rc;
}

/* The run stops short because sk_arm_retry gave up (TMO_EAGAIN for
 * SK_ARM_PATIENCE_NS on end): skipped with that reason.  Returns
 * SK_SKIPPED. */
static inline int sk_skip_refused(const struct sk_run *run)
{
	sk_skip(run, "the engine refused to arm with TMO_EAGAIN for %lld s on end (%s; a per-user "
	             "limit such as RLIMIT_SIGPENDING for kernel timers, which other processes "
	             "share)",
	        (long long)(SK_ARM_PATIENCE_NS / TMO_NSEC_PER_SEC), tmo_strerror(TMO_EAGAIN));
	return SK_SKIPPED;
}

/* Engines whose arms are OS threads or kernel objects cannot hold a million
 * live timers: scenarios size such runs down and say so in their output. */
static inline int sk_thread_per_timer(const struct sk_run *run)
{
	return (run->ops->caps & TMO_CAP_THREAD_PER_TIMER) != 0;
}

/* Report a row with a printf-formatted param. */
#define sk_report_fmt(run, metric, value, unit, ...)                    \
	do {                                                            \
		char sk_param_[160];                                    \
		snprintf(sk_param_, sizeof sk_param_, __VA_ARGS__);     \
		sk_report((run), (metric), sk_param_, (value), (unit)); \
	} while (0)

#endif
