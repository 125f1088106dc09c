/*
 * The lock-free core's fuzz target (tests/fuzz/lf.c): the callback every
 * arm runs, and the helper threads T1 and T2.  The callback checks it runs
 * on its own timer, never early, only for an arm the model has not refused
 * or prevented, and at most once; its cancel of its own timer answers
 * TMO_CANCEL_SELF and its re-arm follows the TMO_EAGAIN rule.  A helper
 * runs one arm or cancel at a time, handed over and waited for, so the
 * order stays the program's.
 */
#include "lf_fuzz.h"

/* ---- the callback ------------------------------------------------------------------ */

/* A callback that takes a while, so that a racing cancel finds it running. */
static void linger(const struct arm *a)
{
	int64_t until = tmo_now_ns() + 150 * US;
	while (a->slow && tmo_now_ns() < until)
		;
}

void on_fire(struct tmo_timer *t, void *arg)
{
	struct arm *a = arg;
	int64_t now = tmo_now_ns();
	FUZZ_CHECK(t == &fz.t[a->timer], "an arm of timer %d fired with another timer", a->timer);
	FUZZ_CHECK(now >= a->t_arm + a->timeout, "timer %d fired early: %lld ns before its deadline",
	           a->timer, (long long)(a->t_arm + a->timeout - now));
	FUZZ_CHECK(atomic_load(&a->expect) != 0,
	           "timer %d: a callback ran for an arm that was refused or whose cancel reported "
	           "TMO_CANCEL_PREVENTED",
	           a->timer);
	if (a->self_cancel) {
		int rc = tmo_cancel(fz.e, t);
		FUZZ_CHECK(rc == TMO_CANCEL_SELF, "timer %d: its callback's cancel returned %s",
		           a->timer, tmo_errname(rc));
	}
	linger(a);
	if (a->next >= 0) {
		struct arm *r = &fz.arms[a->next];
		int quiet = atomic_load(&fz.quiet);
		int64_t avail = quiet ? pool_avail(fz.e->tt_rec->cache_n) : 1;
		r->t_arm = tmo_now_ns();
		int rc = tmo_arm(fz.e, t, r->timeout, on_fire, r);
		int want = avail > 0 ? 0 : TMO_EAGAIN;
		FUZZ_CHECK(rc == want || (!quiet && fz.cap != 0 && rc == TMO_EAGAIN),
		           "timer %d: its callback's re-arm returned %s, model %s (%lld free nodes)",
		           a->timer, tmo_errname(rc), tmo_errname(want), (long long)avail);
		if (rc != 0)
			atomic_fetch_add(&fz.n_rearm_refused, 1);
		atomic_store(&a->rearm_rc, rc);
		linger(a); /* running and re-armed: a cancel waits, then prevents */
	}
	FUZZ_CHECK(atomic_fetch_add(&a->fired, 1) == 0, "timer %d: one arm fired twice", a->timer);
}

/* ---- threads -------------------------------------------------------------------------- */

static void do_call(struct call *c)
{
	if (c->op == CALL_ARM) {
		c->avail = pool_avail(tmo__lf_my_cache_count(fz.e));
		c->a->t_arm = tmo_now_ns();
		c->rc = tmo_arm(fz.e, &fz.t[c->idx], c->a->timeout, on_fire, c->a);
	} else {
		c->rc = tmo_cancel(fz.e, &fz.t[c->idx]);
	}
}

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->busy)
			pthread_cond_wait(&h->cv, &h->mu);
		if (h->c.op == CALL_EXIT)
			break;
		pthread_mutex_unlock(&h->mu);
		do_call(&h->c);
		pthread_mutex_lock(&h->mu);
		h->busy = 0;
		pthread_cond_broadcast(&h->cv);
	}
	h->busy = 0;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	return NULL; /* the library's exit hook detaches our record */
}

/* Runs c on helper h and waits for it.  Returns -1 when no thread could be
 * made (a shortage of threads: the caller runs it itself). */
static int helper_call(struct helper *h, struct call *c)
{
	if (!h->live) {
		if (c->op == CALL_EXIT)
			return 0;
		pthread_mutex_init(&h->mu, NULL);
		pthread_cond_init(&h->cv, NULL);
		h->busy = 0;
		if (pthread_create(&h->th, NULL, helper_main, h) != 0) {
			pthread_cond_destroy(&h->cv);
			pthread_mutex_destroy(&h->mu);
			return -1;
		}
		h->live = 1;
	}
	pthread_mutex_lock(&h->mu);
	h->c = *c;
	h->busy = 1;
	pthread_cond_broadcast(&h->cv);
	while (h->busy)
		pthread_cond_wait(&h->cv, &h->mu);
	*c = h->c;
	pthread_mutex_unlock(&h->mu);
	if (c->op == CALL_EXIT) {
		pthread_join(h->th, NULL);
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
		h->live = 0;
	}
	return 0;
}

void call_on(int thread, struct call *c)
{
	fz.n_helper += thread != 0;
	if (thread == 0 || helper_call(&fz.h[thread - 1], c) != 0)
		do_call(c);
}

void helper_exit(int k)
{
	struct call c = {.op = CALL_EXIT};
	fz.n_exits += fz.h[k].live;
	helper_call(&fz.h[k], &c);
}
