/* The posix engine's slot pool and kernel timers (impls/posix.c: the design). */
#include <errno.h>
#include <string.h>

#include "posix.h"

/* ---- slot pool ----------------------------------------------------------- */

int px_slot_get(struct tmo *e, uint32_t *out)
{
	pthread_mutex_lock(&e->free_mu);
	uint32_t i = e->free_head;
	if (i == PX_NIL)
		i = atomic_exchange_explicit(&e->ret_head, PX_NIL, memory_order_acquire);
	if (i == PX_NIL) {
		uint32_t n = atomic_load_explicit(&e->nslots, memory_order_relaxed);
		if (n / PX_CHUNK >= PX_MAX_CHUNKS) {
			pthread_mutex_unlock(&e->free_mu);
			return TMO_EAGAIN;
		}
		struct px_slot *c = tmo__calloc(PX_CHUNK, sizeof *c);
		if (c == NULL) {
			pthread_mutex_unlock(&e->free_mu);
			return TMO_ENOMEM;
		}
		for (uint32_t k = 0; k < PX_CHUNK; k++)
			atomic_init(&c[k].next, k + 1 < PX_CHUNK ? n + k + 1 : PX_NIL);
		e->dir[n / PX_CHUNK] = c;
		/* Publish after the chunk pointer: the engine thread bounds-checks
		 * a signal's index against nslots before reading dir. */
		atomic_store_explicit(&e->nslots, n + PX_CHUNK, memory_order_release);
		i = n;
	}
	e->free_head = atomic_load_explicit(&slot_at(e, i)->next, memory_order_relaxed);
	pthread_mutex_unlock(&e->free_mu);
	*out = i;
	return 0;
}

/* Any thread, no lock: a push-only Treiber stack (taken whole by slot_get's
 * exchange, so no ABA). */
void px_slot_put(struct tmo *e, uint32_t i)
{
	struct px_slot *s = slot_at(e, i);
	uint32_t h = atomic_load_explicit(&e->ret_head, memory_order_relaxed);
	do
		atomic_store_explicit(&s->next, h, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&e->ret_head, &h, i, memory_order_release,
	                                              memory_order_relaxed));
}

/* ---- control channel ------------------------------------------------------ */

/* Ask the engine thread to look at stop and park.req.  The control timer (its
 * sigqueue entry is preallocated: this cannot fail for lack of signal queue)
 * is re-armed only when no control signal is outstanding, i.e. after the
 * engine thread dequeued the previous one: a one-shot timer is never re-armed
 * while its own signal is still queued.  Dekker pair with px_main: the
 * requester writes its flag then ctl_out; the engine thread clears ctl_out
 * then reads the flags, so one of them sees the other (seq_cst). */
void px_ctl_kick(struct tmo *e)
{
	if (atomic_exchange(&e->ctl_out, 1) != 0)
		return;
	struct itimerspec its = {.it_value = {.tv_sec = 0, .tv_nsec = 1}};
	timer_settime(e->ctl, 0, &its, NULL);
}

int px_make_ktimer(struct tmo *e, uint64_t sival, timer_t *out)
{
	if (tmo__fault(TMO_FAULT_SYSRES))
		return TMO_EAGAIN;
	struct sigevent sev;
	memset(&sev, 0, sizeof sev);
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = e->signo;
	sev.sigev_value.sival_ptr = (void *)(uintptr_t)sival;
	sev._sigev_un._tid = e->tid; /* glibc 2.36 has no sigev_notify_thread_id */
	if (timer_create(CLOCK_MONOTONIC, &sev, out) == 0)
		return 0;
	return errno == EAGAIN ? TMO_EAGAIN : errno == ENOMEM ? TMO_ENOMEM : TMO_ESYS;
}
