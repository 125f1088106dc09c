/* The callback gate (gate.h states its rule). */
#include "core/gate.h"

#include "core/internal.h"

int tmo__gate_init(struct tmo__gate *g)
{
	g->running = NULL;
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
	g->running = NULL;
	g->gen++;
	if (g->waiters == 0)
		return;
	pthread_cond_broadcast(&g->done_cv);
	while (g->waiters > 0)
		pthread_cond_wait(&g->drain_cv, m);
}

bool tmo__gate_wait(struct tmo__gate *g, pthread_mutex_t *m, const struct tmo *e,
                    const struct tmo_timer *t)
{
	if (g->running != t || tmo__thread_engine == e)
		return false;
	uint64_t gen = g->gen;
	g->waiters++;
	while (g->gen == gen)
		pthread_cond_wait(&g->done_cv, m);
	if (--g->waiters == 0)
		pthread_cond_signal(&g->drain_cv);
	return true;
}

int tmo__gate_result(const struct tmo__gate *g, const struct tmo_timer *t, bool fired,
                     bool waited)
{
	if (waited)
		return TMO_CANCEL_WAITED;
	if (!fired) /* never armed, prevented by another cancel, or a re-arm
	             * the callback cancelled itself */
		return TMO_ENOTARMED;
	return g->running == t ? TMO_CANCEL_SELF : TMO_CANCEL_FIRED;
}
