/* The callback gate (gate.h states its rule). */
#include "core/gate.h"

#include "core/internal.h"

int tmo__gate_init(struct tmo__gate *g)
{
	g->running = NULL;
	g->ref = 0;
	g->gen = 0;
	g->waiters = 0;
	/* glibc's init cannot fail: a failure leaves nothing to undo there */
	bool ok = pthread_cond_init(&g->done_cv, NULL) == 0 &&
	          pthread_cond_init(&g->drain_cv, NULL) == 0;
	return ok ? 0 : TMO_ESYS;
}

void tmo__gate_fini(struct tmo__gate *g)
{
	pthread_cond_destroy(&g->drain_cv);
	pthread_cond_destroy(&g->done_cv);
}

void tmo__gate_end(struct tmo__gate *g, pthread_mutex_t *m)
{
	tmo__cb_end();
	g->running = NULL;
	g->gen++;
	if (g->waiters == 0)
		return;
	pthread_cond_broadcast(&g->done_cv);
	while (g->waiters > 0)
		pthread_cond_wait(&g->drain_cv, m);
}

int tmo__gate_wait_running(struct tmo__gate *g, pthread_mutex_t *m)
{
	if (tmo__wait_begin(g->ref) != 0)
		return TMO_EDEADLK;
	uint64_t gen = g->gen;
	g->waiters++;
	while (g->gen == gen)
		pthread_cond_wait(&g->done_cv, m);
	if (--g->waiters == 0)
		pthread_cond_signal(&g->drain_cv);
	tmo__wait_end();
	return 1;
}
