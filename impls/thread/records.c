/*
 * thread engine: its record sets (impls/thread.c has the design).
 *
 * Threads and memory
 * ------------------
 * A cancelled record's thread is joined by its canceller.  A fired record is
 * on the `running` list while its callback runs; then it is DONE and moves to
 * the `done` list (or, when cancels wait on it, the last of them moves it),
 * and any later arm, cancel or destroy takes that whole list and joins the
 * threads (finished or about to) and frees them: destroy joins every thread
 * the engine ever started.  Every record is also on `all` from arm to free,
 * which is how a forked child finds the copies to free.
 */
#include "thread.h"

atomic_int tmo__thr_process_threads;

void tmo__thr_done_add(struct tmo *e, struct rec *r)
{
	r->next = e->done;
	e->done = r;
}

struct rec *tmo__thr_running_of(struct tmo *e, const struct tmo_timer *t)
{
	tmo_list_for_each(r, &e->running, struct rec, run_link)
		if (r->timer == t)
			return r;
	return NULL;
}

void tmo__thr_unwait(struct tmo *e, struct rec *r)
{
	if (--r->waiters == 0 && r->state == R_DONE)
		tmo__thr_done_add(e, r);
}

static void thr_rec_free(struct tmo *e, struct rec *r)
{
	pthread_cond_destroy(&r->cv);
	tmo__free(r);
	atomic_fetch_sub_explicit(&e->records, 1, memory_order_relaxed);
}

struct rec *tmo__thr_take_done(struct tmo *e)
{
	struct rec *out = e->done;
	e->done = NULL;
	return out;
}

/* Outside the mutex: join the threads of a list of records (cancelled or
 * DONE: each has left its loop or is leaving it), then free the records. */
void tmo__thr_reap(struct tmo *e, struct rec *list)
{
	if (list == NULL)
		return;
	for (struct rec *r = list; r != NULL; r = r->next) {
		pthread_join(r->th, NULL);
		atomic_fetch_sub_explicit(&e->threads, 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&tmo__thr_process_threads, 1, memory_order_relaxed);
	}
	pthread_mutex_lock(&e->m);
	for (struct rec *r = list; r != NULL; r = r->next)
		tmo_list_del(&r->all_link);
	pthread_mutex_unlock(&e->m);
	while (list != NULL) {
		struct rec *nx = list->next;
		thr_rec_free(e, list);
		list = nx;
	}
}
