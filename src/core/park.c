/* The park hook (park.h states its rule). */
#include "core/park.h"

#include "core/internal.h"

int tmo__park_init(struct tmo__park *p)
{
	atomic_init(&p->req, 0);
	p->parked = false;
	if (pthread_mutex_init(&p->mu, NULL) != 0)
		return TMO_ESYS;
	if (tmo__cond_init_monotonic(&p->cv) != 0) {
		pthread_mutex_destroy(&p->mu);
		return TMO_ESYS;
	}
	return 0;
}

void tmo__park_fini(struct tmo__park *p)
{
	pthread_cond_destroy(&p->cv);
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

bool tmo__park_request(struct tmo__park *p, const atomic_int *hold_off)
{
	pthread_mutex_lock(&p->mu);
	while (hold_off != NULL && atomic_load(hold_off))
		pthread_cond_wait(&p->cv, &p->mu);
	bool already = atomic_load_explicit(&p->req, memory_order_relaxed) || p->parked;
	atomic_store_explicit(&p->req, 1, memory_order_release);
	pthread_mutex_unlock(&p->mu);
	return already;
}

void tmo__park_wait(struct tmo__park *p)
{
	pthread_mutex_lock(&p->mu);
	while (!p->parked)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void tmo__park_release(struct tmo__park *p)
{
	pthread_mutex_lock(&p->mu);
	atomic_store_explicit(&p->req, 0, memory_order_relaxed);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}
