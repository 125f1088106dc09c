/*
 * The lock-free core's fuzz target (tests/fuzz/lf.c): the model's
 * transitions (an arm decided, prevented, fired and followed to its
 * re-arm, a cancel that raced a fire resolved by the callback counters),
 * the timer thread run, parked and settled, and the checks after each op
 * (tmo_stats and every arm's callback count against the model).
 */
#include "lf_fuzz.h"

static void nap(void)
{
	struct timespec ts = {0, 20000};
	nanosleep(&ts, NULL);
}

/* ---- model transitions ------------------------------------------------------------- */

void decide(struct arm *a, int v)
{
	atomic_store(&a->expect, v);
	if (v == 0 && a->next >= 0)
		atomic_store(&fz.arms[a->next].expect, 0);
	if (v == 1)
		fz.fired++;
}

void prevent(struct tmodel *m, struct arm *a)
{
	decide(a, 0);
	m->st = T_IDLE;
	m->out = LF_CANCELLED_OUT;
	m->uncertain = 0;
	fz.prevented++;
	fz.prevents_since_settle++;
	if (a->due) {
		int64_t until = tmo_now_ns() + a->timeout + 2 * fz.res + 200 * US;
		if (until > fz.transit_until)
			fz.transit_until = until;
	}
}

static void set_fired(struct tmodel *m, struct arm *a)
{
	m->st = T_FIRED;
	m->out = LF_FIRED;
	m->cur = (int)(a - fz.arms);
	m->uncertain = 0;
}

/* Timer i's current arm has fired and its callback returned: follow its
 * re-arm.  A due re-arm that has not fired yet leaves the timer armed due. */
static void resolve_fired(int i)
{
	struct tmodel *m = &fz.m[i];
	struct arm *a = &fz.arms[m->cur];
	FUZZ_CHECK(atomic_load(&a->fired) == 1, "timer %d: fired %d times, model once", i,
	           atomic_load(&a->fired));
	decide(a, 1);
	if (a->next < 0) {
		set_fired(m, a);
		return;
	}
	struct arm *r = &fz.arms[a->next];
	int rc = atomic_load(&a->rearm_rc);
	if (rc != 0) { /* TMO_EAGAIN: the callback checked the rule */
		decide(r, 0);
		set_fired(m, a);
		return;
	}
	m->cur = a->next;
	m->uncertain = 0;
	m->st = r->due ? T_DUE : T_LONG;
	if (r->due && atomic_load(&r->fired) == 1) {
		decide(r, 1);
		set_fired(m, r);
	}
}

/* A cancel of a due timer that may have fired meanwhile returned rc: the
 * callback counters say what happened (cancel returns only after a running
 * callback has returned). */
void cancel_raced(int i, int rc)
{
	struct tmodel *m = &fz.m[i];
	struct arm *a = &fz.arms[m->cur];
	fz.n_raced++;
	fz.n_waited += rc == TMO_CANCEL_WAITED;
	if (atomic_load(&a->fired) == 0) {
		FUZZ_CHECK(rc == TMO_CANCEL_PREVENTED,
		           "timer %d: cancel returned %s, but its callback has not run", i,
		           tmo_errname(rc));
		prevent(m, a);
		return;
	}
	resolve_fired(i);
	if (m->st == T_FIRED) {
		FUZZ_CHECK(rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED,
		           "timer %d: its callback ran, cancel returned %s", i, tmo_errname(rc));
		return;
	}
	/* it fired and re-armed: the cancel prevented the re-arm */
	FUZZ_CHECK(rc == TMO_CANCEL_PREVENTED,
	           "timer %d: fired and re-armed, cancel returned %s (the re-arm %s)", i,
	           tmo_errname(rc), state_name[m->st]);
	prevent(m, &fz.arms[m->cur]);
}

void run_start(void)
{
	if (fz.running)
		return;
	for (int i = 0; i <= TIMERS; i++)
		fz.m[i].uncertain = fz.m[i].st == T_DUE;
	fz.running = 1;
	FUZZ_CHECK(tmo_testing_park(fz.e, 0) == 0, "unpark failed");
}

/* Park; every due timer that fired meanwhile is resolved by its counter. */
void run_stop(void)
{
	if (!fz.running)
		return;
	FUZZ_CHECK(tmo_testing_park(fz.e, 1) == 0, "park failed");
	fz.running = 0;
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		if (!m->uncertain)
			continue;
		m->uncertain = 0;
		if (atomic_load(&fz.arms[m->cur].fired) != 0)
			resolve_fired(i);
	}
	check_arms();
}

static uint64_t tick_now(void) { return atomic_load(&fz.e->tickw) >> LF_TW_SHIFT; }

static int due_done(void)
{
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		if (m->st != T_DUE)
			continue;
		struct arm *a = &fz.arms[m->cur];
		if (atomic_load(&a->fired) == 0)
			return 0;
		if (a->next >= 0 && fz.arms[a->next].due && atomic_load(&a->rearm_rc) == 0 &&
		    atomic_load(&fz.arms[a->next].fired) == 0)
			return 0;
	}
	return 1;
}

static void wait_until(int (*cond)(void), const char *what)
{
	int64_t limit = tmo_now_ns() + LIVENESS_NS;
	while (!cond())
		FUZZ_CHECK(tmo_now_ns() < limit, "settle: %s after %lld s", what,
		           (long long)(LIVENESS_NS / TMO_NSEC_PER_SEC));
}

static uint64_t tick_goal;
static int tick_reached(void)
{
	uint64_t tw = atomic_load(&fz.e->tickw);
	if (tw >> LF_TW_SHIFT >= tick_goal)
		return 1;
	/* asleep until a far deadline: a spurious wake-up costs one round */
	if (tw & LF_TW_SLEEPING)
		tmo__lf_ec_wake(&fz.e->wake_ec);
	nap();
	return 0;
}
static int due_done_nap(void)
{
	if (due_done() && tmo_now_ns() >= fz.transit_until)
		return 1;
	nap();
	return 0;
}

/* Run the timer thread until every due timer (and a due re-arm) has fired
 * and one full round has looked at everything, then park it again. */
void settle(void)
{
	run_stop();
	atomic_store(&fz.quiet, 1);
	FUZZ_CHECK(tmo_testing_park(fz.e, 0) == 0, "unpark failed");
	wait_until(due_done_nap, "due timers have not fired");
	/* a round starts with a tick and ends with one (or the next round's):
	 * two ticks on, a round ran wholly after the last due timer fired */
	tick_goal = tick_now() + 2;
	wait_until(tick_reached, "the timer thread made no round");
	FUZZ_CHECK(tmo_testing_park(fz.e, 1) == 0, "park failed");
	atomic_store(&fz.quiet, 0);
	for (int i = 0; i <= TIMERS; i++)
		if (fz.m[i].st == T_DUE)
			resolve_fired(i);
	for (int i = 0; i <= TIMERS; i++)
		FUZZ_CHECK(fz.m[i].st != T_DUE, "timer %d: still due after a settle", i);
	check_arms();
	fz.prevents_since_settle = 0;
	fz.transit_until = 0;
}

/* ---- checks after each op ---------------------------------------------------------------- */

void check_stats(void)
{
	struct tmo_stats st;
	FUZZ_CHECK(tmo_stats(fz.e, &st) == 0, "stats failed");
	uint64_t pending = 0, racing = 0;
	for (int i = 0; i <= TIMERS; i++) {
		racing += fz.m[i].uncertain;
		pending += is_pending(&fz.m[i]) && !fz.m[i].uncertain;
	}
	FUZZ_CHECK(st.cancelled == fz.prevented, "stats: %llu cancelled, model %llu",
	           (unsigned long long)st.cancelled, (unsigned long long)fz.prevented);
	/* A racing timer's share is 0 or 1.  The counters are summed one by one
	 * while callbacks fire and re-arm (the fire counter last): a callback
	 * that fires, re-arms due and fires again between those reads counts
	 * two fires and hides its re-arm, one below its share. */
	FUZZ_CHECK(st.pending + racing >= pending && st.pending <= pending + racing,
	           "stats: %llu pending, model %llu (racing: %llu either way)",
	           (unsigned long long)st.pending, (unsigned long long)pending,
	           (unsigned long long)racing);
	FUZZ_CHECK(racing ? st.fired >= fz.fired : st.fired == fz.fired,
	           "stats: %llu fired, model %llu", (unsigned long long)st.fired,
	           (unsigned long long)fz.fired);
}

/* Every arm's callback count against the model (callbacks done: parked). */
void check_arms(void)
{
	for (int k = 0; k < fz.n_arms; k++) {
		struct arm *a = &fz.arms[k];
		int f = atomic_load(&a->fired), x = atomic_load(&a->expect);
		FUZZ_CHECK(f == (x == 1), "timer %d: an arm fired %d times, model %s", a->timer, f,
		           x == 1 ? "once" : x == 0 ? "never (prevented or refused)" : "not yet");
	}
}

void check_parked(void)
{
	check_stats();
	audit(0);
}
