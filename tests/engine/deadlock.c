/*
 * A cancel that would deadlock is refused (include/tmo/tmo.h, TMO_EDEADLK):
 * `test_engine_deadlock ENGINE` pairs ENGINE with every engine of the
 * registry (itself included, as a second instance):
 *
 *  pair     a callback of each engine cancels the other's timer, both
 *           callbacks started before either cancels (each announces it
 *           started and waits for the other's announcement).  Both cancels
 *           return, at least one with TMO_EDEADLK and each other one with
 *           WAITED (it waited for the refused side's callback), both
 *           callbacks complete, and nothing is lost: each engine fired its
 *           one timer and cancelled none, and a cancel afterwards finds
 *           each FIRED.
 *  rearm    the pairs again, each callback re-arming its own timer (1 h)
 *           before it announces itself: the refused cancel changed
 *           nothing (its victim's re-arm is still pending, and cancelled
 *           afterwards), the other prevented the re-arm after waiting
 *           (PREVENTED); one fire and one cancel per timer.
 *  cycle    the same with three engines (A's callback cancels B's timer,
 *           B's C's, C's A's): ENGINE and the next two of the registry.
 *  shared   engines whose callbacks run concurrently
 *           (TMO_CAP_CONCURRENT_CALLBACKS): two timers of ONE engine.
 *  race     ENGINE's pair again and again, each callback spinning until
 *           both started, so the two cancels check at the same moment:
 *           every round refuses at least one (sometimes both).
 *  nocycle  no false refusal: A's callback cancels B's timer while B's
 *           callback runs but waits for nothing (it returns once A's
 *           thread is seen blocked): A's cancel waits (WAITED, or FIRED
 *           when B's callback returned first), never TMO_EDEADLK.
 *
 * Every wait is bounded by a watchdog (WATCHDOG_S, 10 s): a hang prints
 * "WATCHDOG: <case>: ... deadlocked" and exits 1 at once (the hung threads
 * cannot be joined), never hangs CI.
 *
 * `test_engine_deadlock --no-check ENGINE` switches the check off
 * (tmo_testing_deadlock_check(0)) and runs ENGINE's same-kind pair: it must
 * hang, and the watchdog (2 s there) must say so; registered as a ctest
 * that passes only on that line (deadlock.cmake): the check is what
 * prevents the hang.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine_test.h"
#include "tmo/testing.h"

#define WATCHDOG_S 10
#define MAXN 3

static int64_t watchdog_ns = WATCHDOG_S * TMO_NSEC_PER_SEC;

/* One side of a cycle: its engine, its timer, and whose timer its
 * callback cancels. */
struct side {
	struct tmo *e;
	struct tmo_timer t;
	struct side *victim;
	struct ring *ring;
	atomic_int started, done;
	atomic_int tid;
	int rc; /* the callback's cancel; read after `done` */
};

struct ring {
	int n;
	struct side s[MAXN];
	atomic_int started;  /* callbacks that announced they started */
	int wait_for_others; /* each callback waits until every one started */
	int nocycle;         /* side 1 returns once side 0's thread is blocked */
	int tight;           /* wait for the others spinning: cancels at once */
	int rearm;           /* each callback first re-arms its own timer (1 h) */
	atomic_int bad;      /* a callback's own bounded wait gave up */
};

static atomic_int late; /* a re-arm (1 h) fired: never */
static void never_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg, atomic_fetch_add(&late, 1); }

static int all_started(struct ring *r) { return atomic_load(&r->started) == r->n; }

static void side_cb(struct tmo_timer *t, void *arg)
{
	struct side *me = arg;
	struct ring *r = me->ring;
	(void)t;
	atomic_store(&me->tid, (int)gettid());
	if (r->rearm && tmo_arm(me->e, t, 3600 * TMO_NSEC_PER_SEC, never_cb, NULL) != 0)
		atomic_fetch_add(&r->bad, 1);
	atomic_store(&me->started, 1);
	atomic_fetch_add(&r->started, 1);
	if (r->nocycle && me == &r->s[1]) {
		/* wait for nothing but side 0's thread to block (in its cancel) */
		if (!ET_WAIT_UNTIL(atomic_load(&r->s[0].tid) != 0, watchdog_ns) ||
		    !et_wait_blocked(atomic_load(&r->s[0].tid), 3, watchdog_ns))
			atomic_fetch_add(&r->bad, 1);
		atomic_store(&me->done, 1);
		return;
	}
	if (r->tight) {
		int64_t end = tmo_now_ns() + watchdog_ns;
		while (!all_started(r) && tmo_now_ns() < end)
			sched_yield();
		if (!all_started(r))
			atomic_fetch_add(&r->bad, 1);
	} else if (r->wait_for_others &&
	           !ET_WAIT_UNTIL_EVERY(all_started(r), watchdog_ns, 20000)) {
		atomic_fetch_add(&r->bad, 1);
	}
	me->rc = me->victim != NULL ? tmo_cancel(me->victim->e, &me->victim->t) : 0;
	atomic_store(&me->done, 1);
}

static int count(struct ring *r, size_t field)
{
	int k = 0;
	for (int i = 0; i < r->n; i++)
		k += atomic_load((atomic_int *)(void *)((char *)&r->s[i] + field));
	return k;
}

/* Every callback done, or the watchdog: print the hang and exit 1. */
static void await_ring(struct ring *r, const char *name, int say)
{
	int64_t t0 = tmo_now_ns();
	if (ET_WAIT_UNTIL_EVERY(count(r, offsetof(struct side, done)) == r->n, watchdog_ns, 50000)) {
		if (say)
			printf("  %s: every cancel returned %.3f ms after the arms\n", name,
		       (double)(tmo_now_ns() - t0) / 1e6);
		return;
	}
	printf("WATCHDOG: %s: %d callbacks started, %d finished after %lld s: the cancels "
	       "deadlocked\n",
	       name, count(r, offsetof(struct side, started)), count(r, offsetof(struct side, done)),
	       (long long)(watchdog_ns / TMO_NSEC_PER_SEC));
	fflush(stdout);
	_exit(1);
}

/* Arm every side at once (timeout 0) and wait for the outcome. */
static int run_ring(struct ring *r, const char *name, int say)
{
	for (int i = 0; i < r->n; i++) {
		r->s[i].ring = r;
		tmo_timer_init(&r->s[i].t);
	}
	for (int i = 0; i < r->n; i++) {
		int rc = et_arm_or_skip(r->s[i].e, &r->s[i].t, 0, side_cb, &r->s[i], name);
		CHECK_EQ(rc, 0);
		if (rc != 0)
			return -1;
	}
	await_ring(r, name, say);
	CHECK_EQ(atomic_load(&r->bad), 0);
	return 0;
}

/* Nothing lost: every timer fired once and is settled, per engine
 * instance (a shared one counts each of its timers). */
static void check_conserved(struct ring *r)
{
	for (int i = 0; i < r->n; i++)
		CHECK_EQ(et_cancel_settled(r->s[i].e, &r->s[i].t), TMO_CANCEL_FIRED);
	for (int i = 0; i < r->n; i++) {
		int armed = 0;
		for (int j = 0; j < r->n; j++)
			armed += r->s[j].e == r->s[i].e;
		struct tmo_stats st;
		CHECK_EQ(tmo_stats(r->s[i].e, &st), 0);
		CHECK_EQ(st.fired, armed);
		CHECK_EQ(st.cancelled, 0);
		CHECK_EQ(st.fired + st.cancelled, armed);
		CHECK_EQ(st.pending, 0);
	}
}

/* With re-arms: a refused cancel left its victim's re-arm pending (nothing
 * changed), so it is cancelled now; every other re-arm was prevented by the
 * callback's cancel.  Per engine: one fire and one cancel per timer. */
static void check_rearmed(struct ring *r)
{
	for (int i = 0; i < r->n; i++) {
		int by = r->s[(i + r->n - 1) % r->n].rc; /* the cancel that aimed at i */
		if (by == TMO_EDEADLK)
			CHECK_EQ(tmo_cancel(r->s[i].e, &r->s[i].t), TMO_CANCEL_PREVENTED);
	}
	for (int i = 0; i < r->n; i++) {
		int timers = 0;
		for (int j = 0; j < r->n; j++)
			timers += r->s[j].e == r->s[i].e;
		struct tmo_stats st;
		CHECK_EQ(tmo_stats(r->s[i].e, &st), 0);
		CHECK_EQ(st.pending, 0);
		CHECK_EQ(st.fired, timers);
		CHECK_EQ(st.fired + st.cancelled, 2 * timers);
	}
	CHECK_EQ(atomic_load(&late), 0);
}

enum { TIGHT = 1, REARM = 2 };

/* A cycle of n sides: at least one refusal, every other cancel WAITED (with
 * REARM: PREVENTED, the re-arm made by the callback it waited for).
 * Returns how many were refused. */
static int cycle_case(const char *name, struct tmo **engines, int n, int how)
{
	struct ring r;
	memset(&r, 0, sizeof r);
	r.n = n;
	r.wait_for_others = 1;
	int tight = r.tight = (how & TIGHT) != 0;
	r.rearm = (how & REARM) != 0;
	int waited = r.rearm ? TMO_CANCEL_PREVENTED : TMO_CANCEL_WAITED;
	for (int i = 0; i < n; i++) {
		r.s[i].e = engines[i];
		r.s[i].victim = &r.s[(i + 1) % n];
	}
	if (run_ring(&r, name, !tight) != 0)
		return 0;
	int refused = 0;
	for (int i = 0; i < n; i++) {
		int rc = r.s[i].rc;
		if (!tight || (rc != TMO_EDEADLK && rc != waited))
			printf("  %s: side %d (%s) cancel: %s\n", name, i, tmo_ops(r.s[i].e)->name,
			       et_result_name(rc));
		refused += rc == TMO_EDEADLK;
		CHECK(rc == TMO_EDEADLK || rc == waited);
	}
	CHECK(refused >= 1);
	if (r.rearm)
		check_rearmed(&r);
	else
		check_conserved(&r);
	return refused;
}

/* No cycle: a cancel that waits for a callback waiting for nothing. */
static void nocycle_case(const char *name, struct tmo *a, struct tmo *b)
{
	struct ring r;
	memset(&r, 0, sizeof r);
	r.n = 2;
	r.nocycle = 1;
	r.s[0].e = a, r.s[0].victim = &r.s[1];
	r.s[1].e = b;
	r.wait_for_others = 1;
	if (run_ring(&r, name, 1) != 0)
		return;
	printf("  %s: cancel: %s\n", name, et_result_name(r.s[0].rc));
	CHECK(r.s[0].rc == TMO_CANCEL_WAITED || r.s[0].rc == TMO_CANCEL_FIRED);
	check_conserved(&r);
}

static const struct tmo_engine_ops *nth_engine(int i)
{
	const struct tmo_engine_ops *const *all = tmo_engines();
	int n = 0;
	while (all[n] != NULL)
		n++;
	return all[i % n];
}

static int index_of(const struct tmo_engine_ops *ops)
{
	int i = 0;
	while (tmo_engines()[i] != ops)
		i++;
	return i;
}

static void destroy_all(struct tmo **e, int n)
{
	for (int i = 0; i < n; i++)
		if (e[i] != NULL)
			CHECK_EQ(tmo_destroy(&e[i]), 0);
}

/* A partner engine for a pair, or NULL where its kernel facility is
 * unavailable here (TMO_EUNAVAIL: io_uring under qemu-user or a container's
 * seccomp profile): that pair is left out, saying so.  ENGINE itself was
 * probed by et_init, which skips the whole test in that case. */
static struct tmo *partner(const struct tmo_engine_ops *ops, const char *name)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(ops, NULL, &e);
	if (rc == TMO_EUNAVAIL) {
		printf("  %s: left out: engine '%s' is unavailable here (TMO_EUNAVAIL)\n", name,
		       ops->name);
		return NULL;
	}
	et_skip_if_shortage(ops, rc, name);
	CHECK_EQ(rc, 0);
	return e;
}

/* ENGINE with every engine of the registry, two instances. */
static void test_pairs(void)
{
	for (const struct tmo_engine_ops *const *o = tmo_engines(); *o != NULL; o++) {
		char name[96];
		snprintf(name, sizeof name, "pair %s/%s", et_name, (*o)->name);
		struct tmo *e[2] = {et_create_or_skip(et_ops, name), partner(*o, name)};
		if (e[0] != NULL && e[1] != NULL)
			cycle_case(name, e, 2, 0);
		destroy_all(e, 2);
	}
}

/* The plant's pair: ENGINE with a second instance of itself. */
static void test_pairs_one(void)
{
	char name[96];
	snprintf(name, sizeof name, "pair %s/%s, check off", et_name, et_name);
	struct tmo *e[2] = {et_create_or_skip(et_ops, name), et_create_or_skip(et_ops, name)};
	if (e[0] != NULL && e[1] != NULL)
		cycle_case(name, e, 2, 0);
	destroy_all(e, 2);
}

/* ENGINE with every engine, each callback re-arming its own timer first:
 * the refused cancel leaves that re-arm pending. */
static void test_rearm(void)
{
	for (const struct tmo_engine_ops *const *o = tmo_engines(); *o != NULL; o++) {
		char name[96];
		snprintf(name, sizeof name, "rearm %s/%s", et_name, (*o)->name);
		struct tmo *e[2] = {et_create_or_skip(et_ops, name), partner(*o, name)};
		if (e[0] != NULL && e[1] != NULL)
			cycle_case(name, e, 2, REARM);
		destroy_all(e, 2);
	}
}

static void test_cycle3(void)
{
	int k = index_of(et_ops);
	const struct tmo_engine_ops *ops[3] = {et_ops, nth_engine(k + 1), nth_engine(k + 2)};
	char name[128];
	snprintf(name, sizeof name, "cycle %s/%s/%s", ops[0]->name, ops[1]->name, ops[2]->name);
	struct tmo *e[3];
	for (int i = 0; i < 3; i++)
		e[i] = partner(ops[i], name);
	if (e[0] != NULL && e[1] != NULL && e[2] != NULL)
		cycle_case(name, e, 3, 0);
	destroy_all(e, 3);
}

/* Two concurrent callbacks of one engine cancelling each other's timers. */
static void test_shared(void)
{
	if (!(et_ops->caps & TMO_CAP_CONCURRENT_CALLBACKS)) {
		printf("  shared: %s runs one callback at a time (no two of its own can wait "
		       "for each other)\n",
		       et_name);
		return;
	}
	struct tmo *e = et_create_or_skip(et_ops, "shared");
	if (e == NULL)
		return;
	struct tmo *both[2] = {e, e};
	cycle_case("shared (one engine, two timers)", both, 2, 0);
	destroy_all(&e, 1);
}

/* Both cancels at the same moment (each callback spins until both started),
 * many times: every round at least one refusal (the Dekker argument in
 * src/core/waitfor.c), sometimes both. */
static void test_race(void)
{
	long rounds = et_scaled(200, 20);
	long both = 0, one = 0;
	struct tmo *e[2] = {et_create_or_skip(et_ops, "race"), et_create_or_skip(et_ops, "race")};
	for (long i = 0; i < rounds && e[0] != NULL && e[1] != NULL; i++) {
		int failures = tmo_test_failures;
		int refused = cycle_case("race", e, 2, TIGHT);
		both += refused == 2, one += refused == 1;
		destroy_all(e, 2);
		if (tmo_test_failures != failures)
			break;
		e[0] = et_create_or_skip(et_ops, "race"), e[1] = et_create_or_skip(et_ops, "race");
	}
	printf("  race %s/%s: %ld rounds, one cancel refused in %ld, both in %ld\n", et_name,
	       et_name, rounds, one, both);
	CHECK_EQ(one + both, rounds);
	destroy_all(e, 2);
}

static void test_nocycle(void)
{
	for (const struct tmo_engine_ops *const *o = tmo_engines(); *o != NULL; o++) {
		char name[96];
		snprintf(name, sizeof name, "nocycle %s->%s", et_name, (*o)->name);
		struct tmo *e[2] = {et_create_or_skip(et_ops, name), partner(*o, name)};
		if (e[0] != NULL && e[1] != NULL)
			nocycle_case(name, e[0], e[1]);
		destroy_all(e, 2);
	}
}

int main(int argc, char **argv)
{
	int unchecked = argc > 1 && strcmp(argv[1], "--no-check") == 0;
	if (unchecked) {
		argv[1] = argv[0];
		argc--, argv++;
	}
	et_init(argc, argv, "deadlock");
	et_raise_sigpending();
	if (unchecked) {
		/* the plant: the same pair with the check off must hang */
		tmo_testing_deadlock_check(0);
		watchdog_ns = 2 * TMO_NSEC_PER_SEC;
		test_pairs_one(); /* never returns: the watchdog exits */
		printf("the pair did not hang with the check off\n");
		return 1;
	}
	RUN(test_pairs);
	RUN(test_rearm);
	RUN(test_cycle3);
	RUN(test_shared);
	RUN(test_race);
	RUN(test_nocycle);
	return TEST_EXIT();
}
