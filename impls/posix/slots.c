/* The posix engine's control channel and kernel timers (impls/posix.c: the
 * design). */
#include <errno.h>
#include <string.h>

#include "posix.h"

/* ---- control channel ------------------------------------------------------ */

/* Ask the engine thread to look at stop and park.req.  The control timer (its
 * sigqueue entry is preallocated: this cannot fail for lack of signal queue)
 * is re-armed only when no control signal is outstanding, i.e. after the
 * engine thread dequeued the previous one: a one-shot timer is never re-armed
 * while its own signal is still queued.  Dekker pair with tmo__px_main: the
 * requester writes its flag then ctl_out; the engine thread clears ctl_out
 * then reads the flags, so one of them sees the other (seq_cst). */
void tmo__px_ctl_kick(struct tmo *e)
{
	if (atomic_exchange(&e->ctl_out, 1) != 0)
		return;
	struct itimerspec its = {.it_value = {.tv_sec = 0, .tv_nsec = 1}};
	timer_settime(e->ctl, 0, &its, NULL);
}

int tmo__px_make_ktimer(struct tmo *e, uint64_t sival, timer_t *out)
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
