/* The park hook (park.h states its rule). */
#include "core/park.h"

#include "core/internal.h"

int tmo__park_init(struct tmo__park *p)
{
	atomic_init(&p->req, 0);
	p->parked = false;
	/* glibc's init cannot fail: a failure leaves nothing to undo there */
	bool ok = pthread_mutex_init(&p->mu, NULL) == 0 && pthread_mutex_init(&p->set_mu, NULL) == 0 &&
	          tmo__cond_init_monotonic(&p->cv) == 0;
	return ok ? 0 : TMO_ESYS;
}

void tmo__park_fini(struct tmo__park *p)
{
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->set_mu);
	pthread_mutex_destroy(&p->mu);
}

void tmo__park_point(struct tmo__park *p)
{
	if (!tmo__park_requested(p))
		return;
	pthread_mutex_lock(&p->mu);
	if (atomic_load_explicit(&p->req, memory_order_relaxed)) {
		p->parked = true;
		pthread_cond_broadcast(&p->cv);
		while (atomic_load_explicit(&p->req, memory_order_relaxed))
			pthread_cond_wait(&p->cv, &p->mu);
		p->parked = false;
	}
	pthread_mutex_unlock(&p->mu);
}

/* Whether a request is recorded or the thread is still parked (then no
 * wake-up is needed); with `record`, record one. */
static bool request(struct tmo__park *p, const atomic_int *hold_off, bool record)
{
	pthread_mutex_lock(&p->mu);
	while (hold_off != NULL && atomic_load(hold_off))
		pthread_cond_wait(&p->cv, &p->mu);
	bool already = atomic_load_explicit(&p->req, memory_order_relaxed) || p->parked;
	if (record || already)
		atomic_store_explicit(&p->req, 1, memory_order_release);
	pthread_mutex_unlock(&p->mu);
	return already;
}

int tmo__park_set(struct tmo__park *p, int on, const atomic_int *hold_off,
                  pthread_mutex_t *wake_lock, void (*wake)(struct tmo *e), struct tmo *e)
{
	if (!on) {
		tmo__park_release(p);
		return 0;
	}
	pthread_mutex_lock(&p->set_mu);
	if (wake_lock == NULL) {
		if (!request(p, hold_off, true))
			wake(e);
	} else if (!request(p, hold_off, false)) {
		/* No request: the thread is not parked, and none can be made
		 * before ours (set_mu), so wake_lock is free of it. */
		pthread_mutex_lock(wake_lock);
		request(p, NULL, true);
		wake(e);
		pthread_mutex_unlock(wake_lock);
	}
	pthread_mutex_unlock(&p->set_mu);
	pthread_mutex_lock(&p->mu);
	while (!p->parked)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

void tmo__park_release(struct tmo__park *p)
{
	pthread_mutex_lock(&p->mu);
	atomic_store_explicit(&p->req, 0, memory_order_relaxed);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}
