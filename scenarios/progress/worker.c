/* The progress scenario's workers: see pg.h. */
#include "pg.h"

#include <sys/resource.h>

static void pg_cb(struct tmo_timer *t, void *arg) { (void)t, (void)arg; }

void pg_block_cb(struct tmo_timer *t, void *arg)
{
	struct pg_ctx *c = arg;
	(void)t;
	atomic_store(&c->blocker_in, 1);
	while (!atomic_load(&c->blocker_release))
		sk_sleep_ns(100 * TMO_NSEC_PER_USEC);
}

/* The callback phase's op: cancel the oldest of the worker's held timers
 * (armed CB_HELD ops ago, 60 s: still pending), arm it again. */
static void pg_held_op(struct pg_ctx *c, struct pg_worker *w, int *rc, int *rc2)
{
	struct tmo_timer *t = &w->held[w->next_held++ % w->nheld];
	*rc2 = t->cb != NULL ? tmo_cancel(c->e, t) : TMO_CANCEL_PREVENTED;
	*rc = tmo_arm(c->e, t, 60 * TMO_NSEC_PER_SEC, pg_cb, NULL);
	if (*rc != 0)
		t->cb = NULL; /* not armed: nothing to cancel next time */
}

/* Read this thread's context-switch counts after a pair of d ns in phase
 * ph; a slow pair is judged against the reading before it. */
static void pg_switches(struct pg_worker *w, int ph, int64_t d)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return; /* the pair stays unjudged: in neither max */
	if (d >= SLOW_NS) {
		if (ru.ru_nvcsw != w->snap_vol)
			w->slept[ph]++;
		else if (ru.ru_nivcsw != w->snap_inv)
			w->preempted[ph]++;
		else if (d > w->max_quiet[ph])
			w->max_quiet[ph] = d;
	}
	w->snap_inv = ru.ru_nivcsw;
	w->snap_vol = ru.ru_nvcsw;
	w->since_snap = 0;
}

void *pg_worker_main(void *arg)
{
	struct pg_worker *w = arg;
	struct pg_ctx *c = w->c;
	pg_switches(w, 0, 0);
	for (;;) {
		int phase = atomic_load(&c->phase);
		if (phase == PH_STOP)
			break;
		int64_t t0 = sk_now_ns();
		atomic_store(&w->op_start, t0);
		int rc, rc2;
		if (phase == PH_CALLBACK) {
			pg_held_op(c, w, &rc, &rc2);
		} else {
			rc = tmo_arm(c->e, &w->t, TMO_NSEC_PER_SEC, pg_cb, NULL);
			rc2 = rc == 0 ? tmo_cancel(c->e, &w->t) : TMO_CANCEL_PREVENTED;
		}
		int64_t t1 = sk_now_ns();
		atomic_store(&w->op_start, 0);
		/* An op belongs to the parked phase if it ended after park(1) was
		 * called: an op the park caught midway counts there too. */
		int ph = phase == PH_CALLBACK                        ? PH_CALLBACK
		         : t1 >= atomic_load(&c->parked_at) ? PH_PARKED
		                                            : PH_RUNNING;
		if (rc == TMO_EAGAIN && rc2 == TMO_CANCEL_PREVENTED) {
			/* refused at once (a timer thread behind, a capped pool):
			 * the engine's capacity, counted; never a wait */
			w->refused[ph]++;
		} else if (rc != 0 || rc2 != TMO_CANCEL_PREVENTED) {
			if (w->errors++ == 0)
				w->first_error = rc != 0 ? rc : rc2;
			continue;
		}
		int64_t d = t1 - t0;
		if (w->nlat[ph] < MAX_SAMPLES)
			w->lat[ph][w->nlat[ph]++] = d;
		if (d > w->max[ph])
			w->max[ph] = d;
		if (d >= SLOW_NS || ++w->since_snap >= SNAP_EVERY)
			pg_switches(w, ph, d);
		else if (d > w->max_quiet[ph])
			w->max_quiet[ph] = d;
		atomic_fetch_add_explicit(&w->ops[ph], 1, memory_order_relaxed);
	}
	return NULL;
}
