/* Shared helpers for the per-engine tests (tests/engine_*.c): engine lookup
 * from argv, sizes that shrink under sanitizers, sleeping and bounded
 * waiting, a per-thread PRNG, and the process's thread count.
 *
 * Environment:
 *   TMO_TEST_SCALE  a factor in (0, 1] applied to workload sizes (sanitizer
 *                   builds set it lower); default 1.
 *   TMO_TEST_SEED   seed for the PRNG (printed at start); default fixed. */
#ifndef TMO_TEST_ENGINE_TEST_H
#define TMO_TEST_ENGINE_TEST_H

#include <stdatomic.h>
#include <stdint.h>

#include "tmo/testing.h"
#include "tmo/tmo.h"

/* The engine under test, set by et_init. */
extern const char *et_name;
extern const struct tmo_engine_ops *et_ops;

/* Engines outside the registry that et_init also accepts by name
 * (NULL-terminated; NULL when none).  Only the fixture builds set it: broken
 * engines that prove these tests can fail (tests/fixtures/). */
extern const struct tmo_engine_ops *const *et_extra_engines;

/* Parse argv[1] as an engine name; on failure print why and exit(2).
 * Prints a banner with the engine's caps, resolution and the seed. */
void et_init(int argc, char **argv, const char *test);

/* n scaled by TMO_TEST_SCALE, at least `min`. */
long et_scaled(long n, long min);

/* 1 when the engine runs one OS thread per armed timer. */
int et_thread_per_timer(void);

void et_sleep_ns(int64_t ns);

/* Wait until *v >= target or timeout_ns passes; returns 1 if reached. */
int et_wait_ge(atomic_llong *v, long long target, int64_t timeout_ns);

/* Create the engine, fire one timer, destroy it: afterwards the process has
 * every thread it will keep (a sanitizer's runtime starts its background
 * thread with the first engine), so thread counts taken next are a stable
 * baseline.  Returns 0 or the create error. */
int et_warm_up(void);

/* Threads in this process (entries of /proc/self/task), -1 if unknown. */
int et_thread_count(void);

/* Wait up to timeout_ns for the thread count to drop to `want` (threads
 * that were joined may take a moment to leave /proc); returns the last
 * count seen. */
int et_wait_thread_count(int want, int64_t timeout_ns);

/* POSIX timers this process holds (lines "ID:" of /proc/self/timers), -1
 * if unknown: a leak check for engines built on timer_create. */
int et_kernel_timer_count(void);

/* 1 when this user's queued-signal quota (RLIMIT_SIGPENDING, shared by every
 * process of the user, SigQ in /proc/self/status) is used up: timer_create
 * then fails with EAGAIN because of other processes, not the engine. */
int et_sigq_full(void);

/* xorshift64* PRNG; each thread keeps its own state. */
struct et_rng {
	uint64_t s;
};
void et_rng_seed(struct et_rng *r, uint64_t stream);
uint64_t et_rand(struct et_rng *r);
/* Uniform in [0, n). */
uint64_t et_below(struct et_rng *r, uint64_t n);
/* Fisher-Yates shuffle of idx[0..n). */
void et_shuffle(struct et_rng *r, int *idx, int n);

/* Name of a cancel result or error ("PREVENTED", "TMO_ENOTARMED"). */
const char *et_result_name(int rc);

#endif
