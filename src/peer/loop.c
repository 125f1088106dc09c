/*
 * The peer core's loop thread, create and destroy, the function run on the
 * loop thread, and fork (src/peer/peer.h: the design).
 */
#include <string.h>
#include <time.h>

#include "core/forkset.h"
#include "peer/peer.h"

void tmo__peer_drain(struct peer *e);
void tmo__peer_run_due(struct peer *e);
void tmo__peer_drop_all(struct peer *e, bool library);

#define P(self) ((struct peer *)(void *)(self))

/* ---- the loop thread --------------------------------------------------------- */

/* Under m: run the function handed to the loop, without m (its arms and
 * cancels take it). */
static void run_work(struct peer *e)
{
	void (*fn)(void *) = e->work_fn;
	if (fn == NULL)
		return;
	e->work_fn = NULL;
	peer_unlock(e);
	fn(e->work_arg);
	tmo__end_if_forked((struct tmo *)(void *)e);
	peer_lock(e);
	e->work_done = true;
	pthread_cond_broadcast(&e->work_cv);
}

static void *loop_main(void *arg)
{
	struct peer *e = arg;
	tmo__thread_enter((struct tmo *)(void *)e, e->be->name);
	peer_lock(e);
	for (;;) {
		tmo__peer_drain(e);
		tmo__peer_run_due(e);
		run_work(e);
		if (e->stop)
			break;
		if (!e->woken && (tmo_list_empty(&e->due) || e->held)) {
			/* nothing owed since the drain, nothing due (or the first
			 * due record waits for the library to report an earlier
			 * one): wait for events */
			e->collected_at = tmo_now_ns();
			e->be->iterate(e);
		} else if (e->be->collect != NULL && !tmo_list_empty(&e->started)) {
			/* other threads keep the loop woken: the library's own
			 * expiries still get a turn */
			int64_t now = tmo_now_ns();
			if (now - e->collected_at >= PEER_COLLECT_NS) {
				e->collected_at = now;
				e->be->collect(e);
			}
		}
	}
	peer_unlock(e);
	return NULL;
}

/* ---- fork ------------------------------------------------------------------- */

TMO__FORK_SET(static, peer_forks, fork_prepare, fork_release, fork_release);

static void fork_prepare(void)
{
	pthread_mutex_lock(&peer_forks.mu);
	/* pthread_mutex_timedlock takes CLOCK_REALTIME; a clock step only
	 * moves the bound. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += PEER_FORK_LOCK_NS / TMO_NSEC_PER_SEC;
	tmo_list_for_each(e, &peer_forks.engines, struct peer, fork_link)
		e->fork_locked = pthread_mutex_timedlock(&e->m, &ts) == 0;
}

static void fork_release(void)
{
	tmo_list_for_each(e, &peer_forks.engines, struct peer, fork_link)
		if (e->fork_locked)
			pthread_mutex_unlock(&e->m);
	pthread_mutex_unlock(&peer_forks.mu);
}

/* In a child: see peer.h.  Never waits (the loop thread is not here); the
 * mutexes and condition variables are left alone (glibc's
 * pthread_cond_destroy waits for waiters the parent's threads were). */
void tmo__peer_destroy_forked(struct tmo *self)
{
	struct peer *e = P(self);
	tmo__fork_set_leave(&peer_forks, &e->fork_link);
	if (e->fork_locked && pthread_mutex_trylock(&e->m) == 0) {
		tmo__peer_drop_all(e, false);
		e->be->fini_forked(e);
		tmo_list_for_each_safe(r, &e->dead, struct peer_rec, link)
			tmo__free(r);
		pthread_mutex_unlock(&e->m);
	}
	tmo__free(e);
}

/* ---- create / destroy ----------------------------------------------------- */

static void destroy_sync(struct peer *e)
{
	pthread_cond_destroy(&e->work_cv);
	pthread_mutex_destroy(&e->work_mu);
	tmo__gate_fini(&e->gate);
	pthread_mutex_destroy(&e->m);
}

int tmo__peer_create(const struct peer_backend *be, struct tmo **out)
{
	struct peer *e = tmo__calloc(1, sizeof *e);
	if (e == NULL)
		return TMO_ENOMEM;
	e->be = be;
	size_t a = _Alignof(max_align_t);
	e->area_off = (sizeof(struct peer_rec) + a - 1) / a * a;
	e->rec_size = e->area_off + be->area;
	tmo_list_init(&e->queue);
	tmo_list_init(&e->stopping);
	tmo_list_init(&e->started);
	tmo_list_init(&e->due);
	e->fired_max = INT64_MIN;
	e->lag_ns = be->lag_ns;
	tmo_list_init(&e->dead);
	tmo_list_init(&e->free);
	if (pthread_mutex_init(&e->m, NULL) != 0 || tmo__gate_init(&e->gate) != 0 ||
	    pthread_mutex_init(&e->work_mu, NULL) != 0 ||
	    tmo__cond_init_monotonic(&e->work_cv) != 0) {
		tmo__free(e);
		return TMO_ESYS; /* glibc's inits cannot fail */
	}
	int rc = tmo__fault(TMO_FAULT_SYSRES) ? TMO_EAGAIN : be->init(e);
	if (rc != 0)
		goto fail;
	rc = tmo__thread_create(&e->thread, NULL, loop_main, e);
	if (rc != 0) {
		be->fini(e);
		goto fail;
	}
	tmo__fork_set_join(&peer_forks, &e->fork_link);
	*out = (struct tmo *)(void *)e;
	return 0;
fail:
	destroy_sync(e);
	tmo__free(e);
	return rc;
}

void tmo__peer_destroy(struct tmo *self)
{
	struct peer *e = P(self);
	tmo__fork_set_leave(&peer_forks, &e->fork_link);
	peer_lock(e);
	e->stop = true;
	e->woken = true;
	e->be->wake(e);
	peer_unlock(e);
	pthread_join(e->thread, NULL);
	/* The loop is gone: what is listed never ran its callback. */
	tmo__peer_drop_all(e, true);
	e->pending = 0;
	e->be->fini(e);
	tmo_list_for_each_safe(r, &e->dead, struct peer_rec, link)
		tmo__free(r);
	destroy_sync(e);
	tmo__free(e);
}

/* ---- a function on the loop thread ---------------------------------------- */

/* tmo_testing_run_on_loop: fn(arg) runs on the loop thread, between two
 * turns of the loop; no timer of this engine fires while it runs. */
int tmo__peer_run_on_loop(struct tmo *self, void (*fn)(void *), void *arg)
{
	struct peer *e = P(self);
	if (peer_on_loop(e)) {
		fn(arg);
		return 0;
	}
	pthread_mutex_lock(&e->work_mu); /* one function at a time */
	peer_lock(e);
	e->work_fn = fn;
	e->work_arg = arg;
	e->work_done = false;
	if (!e->woken) {
		e->woken = true;
		e->be->wake(e);
	}
	while (!e->work_done)
		pthread_cond_wait(&e->work_cv, &e->m);
	peer_unlock(e);
	pthread_mutex_unlock(&e->work_mu);
	return 0;
}
