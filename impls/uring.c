/*
 * uring: a peer adapter over io_uring (liburing 2.3): an arm submits an
 * IORING_OP_TIMEOUT (io_uring_prep_timeout, relative, user_data = its
 * record), a cancel an IORING_OP_TIMEOUT_REMOVE of that user_data; one
 * ring, whose completion thread waits for completions and runs the
 * callbacks of the timeouts that expired (-ETIME).
 *
 * Capacity: at most URING_MAX_PENDING (16,384, the completion queue's
 * size) timers pending; arm answers TMO_EAGAIN beyond (a declared limit:
 * the throughput scenario reports it as the engine's capacity, expiry asks
 * again).  Timeouts are absolute (IORING_TIMEOUT_ABS, CLOCK_MONOTONIC).
 *
 * The ring has one submitter at a time: the engine mutex, under which
 * every thread that arms or cancels submits at once (io_uring_submit, one
 * io_uring_enter each), is the submission lock; the completion thread
 * reads and retires completions under it and waits (io_uring_wait_cqe)
 * without it, which is the loop lock of the peer core (src/peer/peer.h:
 * records, exactly once, cancel's wait, destroy, fork).  The timeout
 * is the record's absolute deadline, so it never expires early and a
 * delay before its submission does not reorder it.
 * A cancelled record stays in `dead` until its timeout's own completion
 * (-ECANCELED, or -ETIME when it expired first) arrives: the kernel holds
 * its user_data until then.  A submission that fails (-EBUSY while the
 * completion queue overflows) is left in the submission ring, and the
 * completion thread submits it again before it waits: an accepted arm is
 * never lost; an arm that finds the submission ring full answers
 * TMO_EAGAIN.
 *
 * io_uring unavailable (kernel.io_uring_disabled, seccomp's EPERM in a
 * container, ENOSYS under qemu-user or an old kernel): create answers
 * TMO_EUNAVAIL; the harness's scenarios skip the engine with that reason,
 * and so do the engine tests (exit 77, ctest's SKIP).
 *
 * Costs: arm = the engine mutex + one io_uring_enter; cancel = the same
 * for the remove (its completion and the timeout's are read by the
 * completion thread).  The kernel allocates a request per submission (no
 * TMO_CAP_NO_ALLOC); the records come from the free list.
 *
 * fork(): every call in the child is refused (TMO_EFORKED, the core);
 * tmo_destroy there unmaps the child's copies of the rings and closes its
 * copy of the ring descriptor, submitting nothing (the ring is the
 * parent's: a submission from the child would run in the parent's ring).
 *
 * Resolution: 1 ms.  Expiry is an hrtimer per timeout, lateness the
 * completion thread's wake-up; timeouts expire on the submitting CPUs'
 * hrtimer bases, so completions of close deadlines can arrive out of
 * order, as the posix engine's signals do: order is promised at 1 ms, and
 * a completion that arrives after a callback of a deadline more than
 * 1 ms later already ran is guarantee 4's named limit (tmo.h): counted in
 * tmo_stats' `skewed` (PEER_KERNEL_EXPIRY).  A loaded machine shows it:
 * 11 completions 1.01-1.07 ms out of order in 1e5 (expiry --quick beside
 * CI's other runs).
 */
#include <errno.h>
#include <liburing.h>

#include "peer/peer.h"

#define URING_ENTRIES 256
#define URING_CQ_ENTRIES 16384
/* The declared capacity: arm answers TMO_EAGAIN with this many pending.
 * Beyond it the kernel's costs are not a timer engine's: TIMEOUT_REMOVE
 * finds its timeout by a linear search of the ring's timeout list (~73 ms
 * a cancel with 1e5 pending here), and each arm is an io_uring_enter
 * (1e6 arms took ~160 s), so timers meant to be cancelled came due. */
#define URING_MAX_PENDING URING_CQ_ENTRIES

struct lur {
	struct io_uring ring;
	char remove_tag; /* the user_data of removes: its address */
};

#define LIB(e) ((struct lur *)(e)->lib)
#define TS(e, r) ((struct __kernel_timespec *)peer_area(e, r))

static int lur_init(struct peer *e)
{
	struct lur *l = tmo__calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	/* A completion queue far larger than the submission queue: every
	 * timeout and every remove completes there, and while it overflows
	 * the kernel refuses submissions (-EBUSY). */
	struct io_uring_params params = {.flags = IORING_SETUP_CQSIZE,
	                                 .cq_entries = URING_CQ_ENTRIES};
	int rc = io_uring_queue_init_params(URING_ENTRIES, &l->ring, &params);
	if (rc < 0) {
		tmo__free(l);
		if (rc == -ENOMEM)
			return TMO_ENOMEM;
		if (rc == -EMFILE || rc == -ENFILE)
			return TMO_EAGAIN;
		/* io_uring_disabled, seccomp (EPERM), no io_uring (ENOSYS) */
		return rc == -EPERM || rc == -ENOSYS || rc == -EACCES ? TMO_EUNAVAIL : TMO_ESYS;
	}
	e->lib = l;
	return 0;
}

static void lur_fini(struct peer *e)
{
	io_uring_queue_exit(&LIB(e)->ring); /* the kernel drops what is pending */
	tmo__free(LIB(e));
}

/* A submission queue entry, submitting what is queued when the ring is
 * full (it never is for long: every entry is submitted at once). */
static struct io_uring_sqe *lur_sqe(struct lur *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
	if (sqe == NULL) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

static int lur_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	struct lur *l = LIB(e);
	struct io_uring_sqe *sqe = lur_sqe(l);
	if (sqe == NULL)
		return TMO_EAGAIN;
	(void)now;
	/* Absolute (CLOCK_MONOTONIC, the kernel's default for ABS): a delay
	 * before the submission (the lock, a preemption) does not make the
	 * timeout later than its deadline, out of order with later arms. */
	struct __kernel_timespec *ts = TS(e, r);
	ts->tv_sec = r->deadline / TMO_NSEC_PER_SEC;
	ts->tv_nsec = r->deadline % TMO_NSEC_PER_SEC;
	io_uring_prep_timeout(sqe, ts, 0, IORING_TIMEOUT_ABS);
	io_uring_sqe_set_data(sqe, r);
	/* On failure the entry stays queued: the completion thread submits it
	 * before it waits (lur_iterate). */
	io_uring_submit(&l->ring);
	return 0;
}

static void lur_stop(struct peer *e, struct peer_rec *r)
{
	struct lur *l = LIB(e);
	struct io_uring_sqe *sqe = lur_sqe(l);
	if (sqe == NULL)
		return; /* the timeout expires and its completion frees the record */
	io_uring_prep_timeout_remove(sqe, (__u64)(uintptr_t)r, 0);
	io_uring_sqe_set_data(sqe, &l->remove_tag);
	io_uring_submit(&l->ring);
}

static void lur_wake(struct peer *e)
{
	struct lur *l = LIB(e);
	struct io_uring_sqe *sqe = lur_sqe(l);
	if (sqe == NULL)
		return; /* the ring is full of submissions: the thread wakes anyway */
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	io_uring_submit(&l->ring);
}

static void lur_complete(struct peer *e, struct io_uring_cqe *cqe)
{
	void *data = io_uring_cqe_get_data(cqe);
	if (data == NULL || data == &LIB(e)->remove_tag)
		return; /* a wake-up, or a remove's own completion */
	struct peer_rec *r = data;
	if (r->state == PR_DEAD)
		tmo__peer_release(e, r); /* cancelled: the kernel is done with it */
	else if (r->state == PR_STARTED)
		tmo__peer_fire(e, r);    /* -ETIME; tmo__peer_fire checks the deadline */
}

static void lur_collect(struct peer *e);

static void lur_iterate(struct peer *e)
{
	struct lur *l = LIB(e);
	if (io_uring_sq_ready(&l->ring) > 0)
		io_uring_submit(&l->ring);
	struct io_uring_cqe *cqe;
	peer_unlock(e);
	int rc = io_uring_wait_cqe(&l->ring, &cqe);
	peer_lock(e);
	if (rc < 0)
		return; /* EINTR */
	lur_collect(e);
}

/* What completed already (no system call): from iterate, and between
 * callbacks (peer.h). */
static void lur_collect(struct peer *e)
{
	struct lur *l = LIB(e);
	struct io_uring_cqe *cqe;
	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		/* Retire it first: tmo__peer_fire releases the lock for the callback. */
		struct io_uring_cqe c = *cqe;
		io_uring_cqe_seen(&l->ring, cqe);
		lur_complete(e, &c);
	}
}

static const struct peer_backend lur_backend = {
	.name = "uring",
	.area = sizeof(struct __kernel_timespec),
	.flags = PEER_ANY_THREAD | PEER_ASYNC_STOP | PEER_KERNEL_EXPIRY,
	.max_pending = URING_MAX_PENDING,
	.init = lur_init,
	.fini = lur_fini,
	.start = lur_start,
	.stop = lur_stop,
	.wake = lur_wake,
	.iterate = lur_iterate,
	.collect = lur_collect,
	.fini_forked = lur_fini,
};

static int lur_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* deadlines are exact */
	return tmo__peer_create(&lur_backend, out);
}

const struct tmo_engine_ops tmo__engine_uring = {
	.name = "uring",
	.summary = "io_uring (liburing 2.3): IORING_OP_TIMEOUT per arm, TIMEOUT_REMOVE by "
	           "user_data per cancel, submitted under the engine mutex from any thread; one "
	           "ring, one completion thread",
	.caps = 0,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(lur_create),
};
