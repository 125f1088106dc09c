/*
 * timerfd: a timerfd per timer (timerfd_create CLOCK_MONOTONIC,
 * TFD_NONBLOCK | TFD_CLOEXEC) in one epoll set, waited on by one loop
 * thread.  Arm and cancel make the system calls themselves, from any
 * thread: arm sets the record's timerfd to the absolute deadline
 * (TFD_TIMER_ABSTIME: the clock read at arm entry, so arms keep their
 * order however long the calls take, and the kernel never fires early);
 * cancel disarms it.  A record keeps its timerfd, registered in the epoll
 * set, while it is idle on the free list, so a re-arm is one
 * timerfd_settime; a record freed beyond the free list closes its fd.
 *
 * The shared design (records, the loop lock, exactly once, cancel's wait,
 * destroy, fork) is the peer core's: src/peer/peer.h.  Here the loop
 * lock is the engine mutex released around epoll_wait.  An event
 * collected by epoll_wait may be for a timer that a cancel disarmed (and
 * whose record an arm reused) before the loop thread took the mutex: the
 * core fires only a STARTED record whose deadline has passed, so such an
 * event is dropped, or starts the reused record's timerfd again.  A
 * record freed beyond the free list waits in `limbo` until the loop
 * thread is about to wait again (every event collected before then has
 * been looked at); the loop is woken to free them once TFD_LIMBO_MAX wait
 * (memory only: its descriptor was closed at once).
 *
 * RLIMIT_NOFILE bounds the armed timers (one descriptor each): past it
 * arm answers TMO_EAGAIN (EMFILE, ENFILE; an epoll set past
 * max_user_watches likewise), TMO_ENOMEM for the kernel's ENOMEM; the
 * timer is not armed, and no armed timer is ever lost.
 *
 * Costs: the first arm of a record = timerfd_create + epoll_ctl + settime;
 * a re-arm and a cancel = one timerfd_settime each (after the expiry the
 * loop thread disarms the fired timerfd, which is level-triggered, with
 * another).  No allocation in the steady state (the kernel's timerfd
 * stays with the record).
 *
 * fork(): every call in the child is refused (TMO_EFORKED, the core);
 * tmo_destroy there closes the child's copies of the timerfds, the epoll
 * descriptor and the eventfd, with no epoll_ctl on the set the parent
 * uses (a copy closed in the child leaves the parent's registration).
 *
 * Resolution: 1 ms.  Expiry is exact (hrtimers), lateness is the loop
 * thread's wake-up, but timerfds expire on different CPUs' hrtimer bases
 * and reach the ready list in the order they expired there, as the posix
 * engine's signals do (impls/posix/loop.c): order is promised at 1 ms, and
 * an expiry that arrives after a callback of a deadline more than 1 ms
 * later already ran is guarantee 4's named limit (tmo.h), counted in
 * tmo_stats' `skewed` (PEER_KERNEL_EXPIRY).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "peer/peer.h"

#define TFD_BATCH 512
/* Records waiting in limbo before the loop is woken to free them: what a
 * cancelled timer leaves behind is bounded, a wake-up per cancel is not
 * paid. */
#define TFD_LIMBO_MAX 64

struct ltf {
	int ep, evfd;
	struct tmo_list limbo; /* freed records whose events may be collected */
	unsigned nlimbo;
	bool limbo_wake;       /* the loop owes the limbo a wake-up */
};

#define LIB(e) ((struct ltf *)(e)->lib)
#define FD(e, r) ((int *)peer_area(e, r))

static void ltf_kick(struct ltf *l)
{
	uint64_t one = 1;
	(void)!write(l->evfd, &one, sizeof one);
}

static int ltf_init(struct peer *e)
{
	struct ltf *l = tmo__calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	tmo_list_init(&l->limbo);
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (l->ep < 0 || l->evfd < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, l->evfd, &ev) != 0) {
		if (l->ep >= 0)
			close(l->ep);
		if (l->evfd >= 0)
			close(l->evfd);
		tmo__free(l);
		return TMO_EAGAIN; /* descriptors */
	}
	e->lib = l;
	return 0;
}

/* Closing a timerfd takes it out of the epoll set unless a forked child
 * still holds a copy; it is disarmed first (stop or done), so even then it
 * never reports again. */
static void ltf_close_rec(struct peer *e, struct peer_rec *r)
{
	if (!r->lib_init)
		return;
	close(*FD(e, r));
	r->lib_init = false;
}

static void ltf_free_limbo(struct peer *e)
{
	tmo_list_for_each_safe(r, &LIB(e)->limbo, struct peer_rec, link) {
		tmo_list_del(&r->link);
		tmo__free(r);
	}
	LIB(e)->limbo_wake = false;
	LIB(e)->nlimbo = 0;
}

/* Destroy and, in a fork child, destroy_forked: closes (never epoll_ctl). */
static void ltf_fini(struct peer *e)
{
	struct ltf *l = LIB(e);
	tmo_list_for_each(r, &e->dead, struct peer_rec, link)
		ltf_close_rec(e, r);
	ltf_free_limbo(e);
	close(l->evfd);
	close(l->ep);
	tmo__free(l);
}


static int errno_error(int err)
{
	return err == ENOMEM ? TMO_ENOMEM : TMO_EAGAIN; /* EMFILE, ENFILE, ENOSPC */
}

static int ltf_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	(void)now; /* absolute: the deadline itself */
	int *fd = FD(e, r);
	if (!r->lib_init) {
		if (tmo__fault(TMO_FAULT_SYSRES))
			return TMO_EAGAIN;
		*fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (*fd < 0)
			return errno_error(errno);
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = r};
		if (epoll_ctl(LIB(e)->ep, EPOLL_CTL_ADD, *fd, &ev) != 0) {
			int err = errno;
			close(*fd);
			return errno_error(err);
		}
		r->lib_init = true;
	}
	struct itimerspec its = {.it_value = tmo__ts_from_ns(r->deadline)};
	return timerfd_settime(*fd, TFD_TIMER_ABSTIME, &its, NULL) == 0 ? 0 : TMO_ESYS;
}

/* Disarm (and clear an expiry a level-triggered fd would report again). */
static void ltf_stop(struct peer *e, struct peer_rec *r)
{
	if (!r->lib_init)
		return;
	struct itimerspec off = {0};
	timerfd_settime(*FD(e, r), 0, &off, NULL);
}

static void ltf_rec_free(struct peer *e, struct peer_rec *r)
{
	struct ltf *l = LIB(e);
	ltf_close_rec(e, r);
	tmo_list_add(&l->limbo, &r->link);
	if (++l->nlimbo >= TFD_LIMBO_MAX && !l->limbo_wake && !peer_on_loop(e)) {
		l->limbo_wake = true;
		ltf_kick(l);
	}
}

static void ltf_wake(struct peer *e) { ltf_kick(LIB(e)); }

/* Returns how many records it passed to tmo__peer_fire. */
static int ltf_collect(struct peer *e, const struct epoll_event *evs, int n)
{
	struct ltf *l = LIB(e);
	int fired = 0;
	for (int i = 0; i < n; i++) {
		struct peer_rec *r = evs[i].data.ptr;
		if (r == NULL) {
			uint64_t v;
			(void)!read(l->evfd, &v, sizeof v);
			continue;
		}
		if (r->state != PR_STARTED)
			continue; /* cancelled (disarmed) since it was collected */
		tmo__peer_fire(e, r);
		fired++;
	}
	return fired;
}

/* Collect from epoll_wait(timeout) and, after a full batch, every ready
 * timerfd without blocking. */
static void ltf_gather(struct peer *e, int timeout)
{
	struct ltf *l = LIB(e);
	struct epoll_event evs[TFD_BATCH];
	if (timeout != 0)
		peer_unlock(e);
	int n = epoll_wait(l->ep, evs, TFD_BATCH, timeout);
	if (timeout != 0)
		peer_lock(e);
	int fired = ltf_collect(e, evs, n);
	/* A full batch: collect every ready timer (without blocking, under m)
	 * before the core fires any, or one due earlier than the batch's would
	 * wait behind its callbacks (expiry n=1e5: inversions of 1.5 ms).  The
	 * timerfds are level-triggered and stay ready until their callbacks
	 * ran, and epoll returns ready ones round-robin: a batch with nothing
	 * new ends it. */
	while (n == TFD_BATCH && fired > 0) {
		n = epoll_wait(l->ep, evs, TFD_BATCH, 0);
		fired = ltf_collect(e, evs, n);
	}
}

static void ltf_iterate(struct peer *e)
{
	ltf_free_limbo(e);
	ltf_gather(e, -1);
}

/* Between callbacks (peer.h): limbo is not freed here, an event collected
 * earlier in this turn may still name a record in it. */
static void ltf_poll(struct peer *e) { ltf_gather(e, 0); }

static const struct peer_backend ltf_backend = {
	.name = "timerfd",
	.area = sizeof(int),
	.flags = PEER_ANY_THREAD | PEER_KERNEL_EXPIRY,
	.init = ltf_init,
	.fini = ltf_fini,
	.start = ltf_start,
	.stop = ltf_stop,
	.done = ltf_stop,
	.rec_free = ltf_rec_free,
	.wake = ltf_wake,
	.iterate = ltf_iterate,
	.collect = ltf_poll,
	.fini_forked = ltf_fini,
};

static int ltf_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* deadlines are exact */
	return tmo__peer_create(&ltf_backend, out);
}

const struct tmo_engine_ops tmo__engine_timerfd = {
	.name = "timerfd",
	.summary = "a timerfd per timer (CLOCK_MONOTONIC, absolute) in one epoll set, one loop "
	           "thread; arm = timerfd_settime from any thread (create + epoll_ctl on a "
	           "record's first use), cancel = settime 0; RLIMIT_NOFILE -> TMO_EAGAIN",
	.caps = TMO_CAP_NO_ALLOC,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(ltf_create),
};
