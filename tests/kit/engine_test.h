/* The test kit, linked into every test: engine lookup from argv (the
 * engine tests, tests/engine/), sizes that shrink under sanitizers,
 * sleeping and the one bounded wait, the PRNG and the TMO_TEST_SCALE
 * reader (scenarios/kit/shared.h, the scenarios' too), what /proc says
 * about this process's threads and kernel timers, counting callbacks
 * (et_count_cb, et_counted) and a unit test's closing allocation check
 * (et_main_end).  Everything but et_init's engine works without et_init
 * (the unit tests call none).
 *
 * Environment:
 *   TMO_TEST_SCALE  a factor in (0, 1] applied to workload sizes (sanitizer
 *                   builds set it lower); default 1.
 *   TMO_TEST_SEED   seed for the PRNG (printed at start); default fixed. */
#ifndef TMO_TEST_ENGINE_TEST_H
#define TMO_TEST_ENGINE_TEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../scenarios/kit/shared.h" /* sk_rng, sk_scale */
#include "tmo/testing.h"
#include "tmo/tmo.h"

/* The engine under test, set by et_init. */
extern const char *et_name;
extern const struct tmo_engine_ops *et_ops;

/* Engines outside the registry that et_init also accepts by name
 * (NULL-terminated; NULL when none).  Only the fixture builds set it: broken
 * engines that prove these tests can fail (tests/fixtures/). */
extern const struct tmo_engine_ops *const *et_extra_engines;

/* Parse argv[1] as an engine name, or as the path of a shared object that
 * exports one (tmo/engine.h: a word with '/' or ending in .so; et_name is
 * then the table's name).  An unknown name exits 2; a file that is no
 * engine exits 3 with the loader's error name and why.
 * Prints a banner with the engine's caps, resolution and the seed. */
void et_init(int argc, char **argv, const char *test);

/* n scaled by TMO_TEST_SCALE (sk_scale), at least `min`. */
long et_scaled(long n, long min);

/* 1 when the engine runs one OS thread per armed timer. */
int et_thread_per_timer(void);

void et_sleep_ns(int64_t ns);

/* Busy for ns on this thread (a callback that must hold its thread). */
void et_spin_ns(int64_t ns);

/* The one bounded wait: evaluate `cond` until it holds or timeout_ns has
 * passed, sleeping poll_ns between looks (a waiter must not starve the
 * thread it waits for on 2 cores).  Its value is 1 when `cond` held at the
 * last look, else 0: a wait that gives up fails the CHECK around it instead
 * of hanging.  `cond` is evaluated once a look, so it may be an attempt
 * ("(rc = tmo_arm(...)) != TMO_EAGAIN"). */
#define ET_WAIT_UNTIL_EVERY(cond, timeout_ns, poll_ns)                           \
	({                                                                           \
		int64_t et_end_ = tmo_now_ns() + (timeout_ns);                           \
		int et_ok_;                                                              \
		while (!(et_ok_ = !!(cond)) && tmo_now_ns() < et_end_)                   \
			et_sleep_ns(poll_ns);                                                \
		et_ok_;                                                                  \
	})
/* The same, looking every 100 us. */
#define ET_WAIT_UNTIL(cond, timeout_ns)                                          \
	ET_WAIT_UNTIL_EVERY(cond, timeout_ns, 100 * TMO_NSEC_PER_USEC)

/* Wait until *v >= target or timeout_ns passes; returns 1 if reached. */
int et_wait_ge(atomic_llong *v, long long target, int64_t timeout_ns);

/* Create the engine, fire one timer, destroy it, and wait until none of its
 * threads is listed any more: afterwards the process has every thread it
 * will keep (a sanitizer's runtime starts its background thread with the
 * first engine), so thread counts taken next are a stable baseline.
 * Returns 0, the create error, or TMO_ETIMEDOUT. */
int et_warm_up(void);

/* Wait up to timeout_ns for child `pid` to exit; on timeout kill it.
 * Returns 1 with its *status, or 0. */
int et_wait_child(pid_t pid, int64_t timeout_ns, int *status);

/* Threads in this process (entries of /proc/self/task), -1 if unknown. */
int et_thread_count(void);

/* Threads of this process named "tmo-<engine>", the engines' own (tmo.h,
 * Threads): their ids, at most `max` into out, and how many. */
int et_engine_thread_ids(pid_t *out, int max);
int et_engine_threads(void);

/* The ids of this process's threads, at most `max` into out; returns how
 * many. */
int et_thread_ids(pid_t *out, int max);

/* A thread of this process that is not among before[0..n) (the thread a
 * create just started), 0 if none. */
pid_t et_new_thread(const pid_t *before, int n);

/* 1 when thread `tid` of this process sleeps in the kernel (state S or D in
 * /proc/self/task/<tid>/stat: blocked on a futex, a join, a wait), 0 when
 * it runs, is runnable, or is gone. */
bool et_thread_blocked(pid_t tid);

/* Wait up to timeout_ns until `tid` has been seen blocked `looks` times in
 * a row, a millisecond apart (a thread that only brushed past a lock is
 * not); returns whether it was. */
bool et_wait_blocked(pid_t tid, int looks, int64_t timeout_ns);

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

/* 1 when a TMO_EAGAIN from timer_create is other processes' doing: this
 * process holds fewer than half of its RLIMIT_SIGPENDING in kernel timers,
 * so the user's quota (shared by all the user's processes) went to others.
 * An engine that leaks kernel timers holds them itself, and gets 0.  *own
 * gets this process's kernel timers, *limit the limit. */
int et_sigq_taken_by_others(int *own, unsigned long long *limit);

/* A shortage the environment caused is a skip (exit 77, ctest's SKIP), not
 * a failure: when rc is TMO_EAGAIN and either ops is posix and
 * et_sigq_taken_by_others, or ops runs a thread per timer (out of threads),
 * print "SKIP: <what> ..." with the reason and exit 77.  Otherwise return:
 * the caller's check judges rc. */
void et_skip_if_shortage(const struct tmo_engine_ops *ops, int rc, const char *what);

/* tmo_create_ops and tmo_arm through et_skip_if_shortage; create CHECKs
 * that it succeeded (NULL if not). */
struct tmo *et_create_or_skip(const struct tmo_engine_ops *ops, const char *what);
int et_arm_or_skip(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                   void *arg, const char *what);

/* Raise this process's queued-signal limit (RLIMIT_SIGPENDING, the
 * timer_create quota) as far as allowed: the quota is counted per user, so
 * other processes' kernel timers count against it. */
void et_raise_sigpending(void);

/* Seed r for stream `stream` (each thread its own) from TMO_TEST_SEED. */
void et_rng_seed(struct sk_rng *r, uint64_t stream);

/* Cancel of a timer whose callback was seen to run: the callback's last
 * store is not its return, so the engine may still be inside it (WAITED).
 * WAITED promises the callback has returned, so a second cancel answers for
 * the settled timer.  Returns that settled answer. */
int et_cancel_settled(struct tmo *e, struct tmo_timer *t);

/* A callback that adds one to the atomic_int at arg. */
void et_count_cb(struct tmo_timer *t, void *arg);

/* A timer that counts its own fires (exactly once is fires == 1) and adds
 * each to its group's total (what a wait for the due ones watches).  Arm it
 * with et_counted_cb and the slot as arg. */
struct et_counted {
	struct tmo_timer t;
	atomic_int fires;
	atomic_llong *total;
};
/* Zero n slots and make `total` their group's (the total is not reset). */
void et_counted_init(struct et_counted *s, int n, atomic_llong *total);
void et_counted_cb(struct tmo_timer *t, void *arg);

/* A callback that holds its thread until released: arg is a struct
 * et_gate; it sets `in`, then sleeps until `open` is set. */
struct et_gate {
	atomic_int in, open;
};
void et_gate_cb(struct tmo_timer *t, void *arg);

/* The end of a unit test's main: checks that the library's live
 * allocations are back to `base` (tmo_testing_live_allocs() when main
 * began: no case leaked), then gives the exit status (TEST_EXIT). */
int et_main_end(int64_t base);

/* Name of a cancel result or error ("PREVENTED", "TMO_ENOTARMED"). */
const char *et_result_name(int rc);

#endif
