/*
 * Fault injection on one engine: `test_engine_faults ENGINE` (the promises
 * of the NO_ALLOC and NO_SYSCALL capabilities: caps.c).
 *
 * Through tmo_testing_set_fault the N-th allocation (then thread creation,
 * then other kernel resource) of the library fails, for N = 1, 2, ... until a
 * run hits no fault, during two phases:
 *   create  tmo_create, then a short workload and destroy;
 *   arm     arming many timers on a healthy engine (a mix that fires during
 *           the fault window and that stays pending), then every one is
 *           resolved by a cancel.
 * Each failing call must return the named error of its kind (ALLOC ->
 * TMO_ENOMEM, THREAD and SYSRES -> TMO_EAGAIN) and leave nothing armed;
 * every arm that returned 0 must fire exactly once or be prevented by its
 * cancel (a fault hit on the engine's own thread must not lose it); after
 * destroy the library's live allocations and the process's threads are back
 * to their baseline.  A fault the engine absorbs (the call still returns 0)
 * is allowed if the engine then keeps the whole contract.
 *
 * When a phase has more than DENSE fault points (an engine that allocates or
 * makes a kernel timer on every arm), every point of the first and last
 * EDGE and an even spread in between are tried, and the output says so.
 * The arm phase first arms 2000 timers; where that makes more than DENSE
 * points it arms proportionally fewer, so that every point is tried.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "engine_test.h"

#define MS TMO_NSEC_PER_MSEC
#define LIVENESS (3 * TMO_NSEC_PER_SEC)
#define DENSE 400
#define EDGE 100

/* ---- the hook: fail exactly the fail_at-th call of one kind -------------- */

static struct {
	enum tmo_fault_kind kind;
	long fail_at; /* 0: count only */
	atomic_long calls, hits;
} plan;

static int hook(enum tmo_fault_kind kind, void *ctx)
{
	if (kind != plan.kind)
		return 0;
	long n = atomic_fetch_add(&plan.calls, 1) + 1;
	if (n == plan.fail_at) {
		atomic_fetch_add(&plan.hits, 1);
		return 1;
	}
	return 0;
}

static void plan_start(enum tmo_fault_kind kind, long fail_at)
{
	plan.kind = kind;
	plan.fail_at = fail_at;
	atomic_store(&plan.calls, 0);
	atomic_store(&plan.hits, 0);
	tmo_testing_set_fault(hook, NULL);
}

static void plan_stop(void) { tmo_testing_set_fault(NULL, NULL); }

static int expected_error(enum tmo_fault_kind kind)
{
	return kind == TMO_FAULT_ALLOC ? TMO_ENOMEM : TMO_EAGAIN;
}

static const char *kind_name(enum tmo_fault_kind kind)
{
	return kind == TMO_FAULT_ALLOC ? "alloc" : kind == TMO_FAULT_THREAD ? "thread" : "sysres";
}

/* ---- timers and their accounting ---------------------------------------- */

/* A counted timer (its fires, and the group's in fired_total) and whether
 * its arm was accepted. */
struct rec {
	struct et_counted c;
	int accepted;
};
static atomic_llong fired_total;

/* Zero n records as a group counted in fired_total. */
static void recs_init(struct rec *r, int n)
{
	memset(r, 0, (size_t)n * sizeof *r);
	for (int i = 0; i < n; i++)
		et_counted_init(&r[i].c, 1, &fired_total);
}

/* Wait for the accepted short timers, cancel every accepted one, and count
 * the arms that were not resolved exactly once.  Rejected arms must never
 * fire and must read as not armed. */
static long resolve_all(struct tmo *e, struct rec *r, int n, long short_accepted)
{
	long bad = 0;
	if (!et_wait_ge(&fired_total, short_accepted, LIVENESS)) {
		fprintf(stderr, "  only %lld of %ld due timers fired\n",
		        (long long)atomic_load(&fired_total), short_accepted);
		bad++;
	}
	char *prevented = calloc((size_t)n, 1);
	for (int i = 0; i < n; i++) {
		int rc = tmo_cancel(e, &r[i].c.t);
		if (!r[i].accepted) {
			if (rc != TMO_ENOTARMED) {
				fprintf(stderr, "  rejected arm %d: cancel says %s\n", i,
				        et_result_name(rc));
				bad++;
			}
			continue;
		}
		if (rc == TMO_CANCEL_PREVENTED)
			prevented[i] = 1;
		else if (rc != TMO_CANCEL_FIRED && rc != TMO_CANCEL_WAITED) {
			fprintf(stderr, "  arm %d: cancel says %s\n", i, et_result_name(rc));
			bad++;
		}
	}
	et_sleep_ns(5 * MS); /* a prevented timer that fires anyway shows now */
	for (int i = 0; i < n; i++) {
		int want = r[i].accepted && !prevented[i] ? 1 : 0;
		if (atomic_load(&r[i].c.fires) != want) {
			if (bad < 5)
				fprintf(stderr, "  arm %d (%s): fired %d times\n", i,
				        r[i].accepted ? prevented[i] ? "prevented" : "accepted" : "rejected",
				        atomic_load(&r[i].c.fires));
			bad++;
		}
	}
	free(prevented);
	return bad;
}

/* Arm n timers (every 8th due within 1 ms, the rest in 10 s); returns the
 * number of accepted short ones, counts rejections by error. */
static long arm_batch(struct tmo *e, struct rec *r, int n, int *rejected, int *wrong_error,
                      int expect)
{
	long short_ok = 0;
	for (int i = 0; i < n; i++) {
		int is_short = i % 8 == 0;
		int64_t to = is_short ? (i % 3) * 500 * TMO_NSEC_PER_USEC : 10 * TMO_NSEC_PER_SEC;
		int rc = tmo_arm(e, &r[i].c.t, to, et_counted_cb, &r[i].c);
		r[i].accepted = rc == 0;
		if (rc == 0) {
			short_ok += is_short;
		} else {
			(*rejected)++;
			if (rc != expect) {
				fprintf(stderr, "  arm %d failed with %s, expected %s\n", i,
				        tmo_errname(rc), tmo_errname(expect));
				(*wrong_error)++;
			}
		}
	}
	return short_ok;
}

/* A healthy engine's whole small life: some fire, some are prevented. */
static long small_workload(struct tmo *e)
{
	enum { N = 24 };
	struct rec r[N];
	recs_init(r, N);
	atomic_store(&fired_total, 0);
	int rejected = 0, wrong = 0;
	long short_ok = arm_batch(e, r, N, &rejected, &wrong, 0);
	return resolve_all(e, r, N, short_ok) + rejected;
}

/* ---- a phase: the list of N to try --------------------------------------- */

struct tally {
	long points;     /* fault points (calls of the kind) in a clean run */
	long runs;       /* runs with one fault armed */
	long injected;   /* runs in which the fault was hit */
	long failed;     /* ... and the call under test returned an error */
	long absorbed;   /* ... and it still returned 0 */
	long violations; /* wrong error, lost/duplicated timer, leak */
	long env;        /* runs where the system refused more arms (EAGAIN) than
	                    the faults injected: e.g. other processes had used up
	                    this user's signal quota, which timer_create needs */
	int sampled;
};

static long next_n(const struct tally *t, long i)
{
	/* i-th point to try (1-based); after the list, points+1, points+2... */
	if (t->points <= DENSE)
		return i;
	long spread = DENSE - 2 * EDGE;
	if (i <= EDGE)
		return i;
	if (i <= EDGE + spread)
		return EDGE + (i - EDGE) * (t->points - 2 * EDGE) / (spread + 1);
	if (i <= DENSE)
		return t->points - (DENSE - i);
	return t->points + (i - DENSE);
}

struct baseline {
	int64_t live;
	int threads, ktimers;
};

/* Threads of this test before any engine existed: the test starts none of
 * its own, so after every destroy (or failed create) the count returns here.
 * (Read at each run instead, it could include a just-joined thread that has
 * not left /proc yet.) */
static int threads_at_start;

static struct baseline baseline_now(void)
{
	return (struct baseline){tmo_testing_live_allocs(), threads_at_start,
	                         et_kernel_timer_count()};
}

static void check_baseline(struct tally *t, struct baseline b0, const char *what, long n)
{
	int64_t live = tmo_testing_live_allocs();
	int threads = et_wait_thread_count(b0.threads, LIVENESS);
	int ktimers = et_kernel_timer_count();
	if (live != b0.live || threads != b0.threads || ktimers != b0.ktimers) {
		fprintf(stderr,
		        "  %s fault #%ld: live allocs %lld -> %lld, threads %d -> %d, kernel timers "
		        "%d -> %d\n",
		        what, n, (long long)b0.live, (long long)live, b0.threads, threads, b0.ktimers,
		        ktimers);
		t->violations++;
	}
}

/* Wait (up to 10 s) for this user's signal quota to have room: other
 * processes of the same user (parallel tests) may hold it all. */
static void wait_sigq(void)
{
	ET_WAIT_UNTIL_EVERY(!et_sigq_full(), 10 * TMO_NSEC_PER_SEC, 100 * MS);
}

static struct tally phase_create(enum tmo_fault_kind kind)
{
	struct tally t = {0};
	struct tmo *e = NULL;
	/* clean run: count the points */
	plan_start(kind, 0);
	int rc = tmo_create_ops(et_ops, NULL, &e);
	plan_stop();
	t.points = atomic_load(&plan.calls);
	CHECK_EQ(rc, 0);
	if (rc == 0)
		tmo_destroy(&e);
	t.sampled = t.points > DENSE;
	for (long i = 1; i < 100000; i++) {
		long n = next_n(&t, i);
		struct baseline b0 = baseline_now();
		e = NULL;
		plan_start(kind, n);
		rc = tmo_create_ops(et_ops, NULL, &e);
		plan_stop();
		long hit = atomic_load(&plan.hits);
		t.runs++;
		if (hit) {
			t.injected++;
			if (rc == 0)
				t.absorbed++;
			else
				t.failed++;
		}
		if (rc != 0) {
			if (!hit || rc != expected_error(kind) || e != NULL) {
				fprintf(stderr, "  create, %s fault #%ld (hit %ld): %s, handle %p\n",
				        kind_name(kind), n, hit, tmo_errname(rc), (void *)e);
				t.violations++;
			}
		} else {
			t.violations += small_workload(e) != 0;
			tmo_destroy(&e);
		}
		check_baseline(&t, b0, "create", n);
		if (!hit && n > t.points)
			break; /* a run past the last point, clean: done */
	}
	return t;
}

static struct tally phase_arm(enum tmo_fault_kind kind)
{
	struct tally t = {0};
	int n_timers = et_thread_per_timer() ? (int)et_scaled(120, 16) : (int)et_scaled(2000, 200);
	struct rec *r = malloc((size_t)n_timers * sizeof *r);
	recs_init(r, n_timers);
	struct tmo *e = NULL;
	int rejected = 0, wrong = 0, recounted = 0;

	/* clean run: count the points; where there are more than DENSE (an
	 * allocation or kernel timer per arm), fewer arms so that every point
	 * is tried, and count again */
again:
	recs_init(r, n_timers);
	rejected = wrong = 0;
	wait_sigq();
	CHECK_EQ(tmo_create_ops(et_ops, NULL, &e), 0);
	if (!e)
		return t;
	atomic_store(&fired_total, 0);
	plan_start(kind, 0);
	long short_ok = arm_batch(e, r, n_timers, &rejected, &wrong, 0);
	plan_stop();
	t.points = atomic_load(&plan.calls);
	if (rejected != 0 && wrong == 0 && et_sigq_full()) {
		printf("  arm/%s: the clean run was refused %d arms (EAGAIN) while other processes "
		       "held this user's whole signal quota; fault points counted as seen\n",
		       kind_name(kind), rejected);
		t.env++;
	} else {
		CHECK_EQ(rejected, 0);
	}
	CHECK_EQ(resolve_all(e, r, n_timers, short_ok), 0);
	tmo_destroy(&e);
	if (t.points > DENSE && !recounted) {
		recounted = 1;
		n_timers = (int)((long)n_timers * (DENSE - 50) / t.points);
		if (n_timers >= 50)
			goto again;
	}
	t.sampled = t.points > DENSE;

	for (long i = 1; i < 100000; i++) {
		long n = next_n(&t, i);
		wait_sigq();
		struct baseline b0 = baseline_now();
		recs_init(r, n_timers);
		CHECK_EQ(tmo_create_ops(et_ops, NULL, &e), 0);
		if (!e)
			break;
		atomic_store(&fired_total, 0);
		rejected = wrong = 0;
		plan_start(kind, n);
		short_ok = arm_batch(e, r, n_timers, &rejected, &wrong, expected_error(kind));
		/* keep the fault armed while the due timers fire: a fault on the
		 * engine's own thread must not lose an accepted timer either */
		et_sleep_ns(2 * MS);
		plan_stop();
		long hit = atomic_load(&plan.hits);
		t.runs++;
		if (hit) {
			t.injected++;
			if (rejected)
				t.failed++;
			else
				t.absorbed++;
		}
		long bad = resolve_all(e, r, n_timers, short_ok);
		/* More refusals than injected faults: TMO_EAGAIN is also what the
		 * kernel itself may answer (timer_create's quota is per user and
		 * shared with every other process), so for the EAGAIN kinds those
		 * are reported, not blamed; a sticky failure inside the library
		 * would show as a leak in check_baseline.  Extra ENOMEM is blamed. */
		int env = rejected > hit && !wrong && expected_error(kind) == TMO_EAGAIN;
		if (env)
			t.env++;
		if (bad || wrong || (rejected > hit && !env)) {
			fprintf(stderr, "  arm, %s fault #%ld: %ld unresolved, %d wrong errors, "
			        "%d rejected for %ld faults\n",
			        kind_name(kind), n, bad, wrong, rejected, hit);
			t.violations++;
		}
		struct tmo_stats st;
		CHECK_EQ(tmo_stats(e, &st), 0);
		if (st.pending != 0) {
			fprintf(stderr, "  arm, %s fault #%ld: %llu still pending\n", kind_name(kind), n,
			        (unsigned long long)st.pending);
			t.violations++;
		}
		tmo_destroy(&e);
		check_baseline(&t, b0, "arm", n);
		if (!hit && n > t.points)
			break;
	}
	free(r);
	return t;
}

static void report(const char *phase, enum tmo_fault_kind kind, const struct tally *t)
{
	printf("| %s | %s | %ld%s | %ld | %ld | %ld | %ld | %ld%s |\n", phase, kind_name(kind),
	       t->points, t->sampled ? " (sampled)" : "", t->runs, t->injected, t->failed,
	       t->absorbed, t->violations, t->env ? " (+ EAGAIN from the system in some runs)" : "");
	fflush(stdout);
	CHECK_EQ(t->violations, 0);
}

/* timer_create's quota (RLIMIT_SIGPENDING) is counted per user, so tests
 * run in parallel by the same user share it.  Raise ours as far as allowed
 * so only injected faults refuse arms; refusals while it is full anyway are
 * reported in the table, not blamed on the engine. */
static void raise_sigpending(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_SIGPENDING, &rl) != 0)
		return;
	rlim_t before = rl.rlim_cur;
	et_raise_sigpending();
	getrlimit(RLIMIT_SIGPENDING, &rl);
	printf("RLIMIT_SIGPENDING %llu -> %llu\n", (unsigned long long)before,
	       (unsigned long long)rl.rlim_cur);
}

int main(int argc, char **argv)
{
	et_init(argc, argv, "engine_faults");
	raise_sigpending();
	CHECK_EQ(et_warm_up(), 0);
	threads_at_start = et_thread_count();
	static const enum tmo_fault_kind kinds[] = {TMO_FAULT_ALLOC, TMO_FAULT_THREAD,
	                                            TMO_FAULT_SYSRES};
	long total = 0;
	printf("| phase | kind | fault points | runs | faults hit | call failed | absorbed | "
	       "violations |\n|---|---|---|---|---|---|---|---|\n");
	for (int k = 0; k < 3; k++) {
		struct tally c = phase_create(kinds[k]);
		report("create", kinds[k], &c);
		struct tally a = phase_arm(kinds[k]);
		report("arm", kinds[k], &a);
		total += c.injected + a.injected;
	}
	printf("engine %s: %ld faults injected in all\n", et_name, total);
	return TEST_EXIT();
}
