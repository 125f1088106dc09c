/*
 * libuv 1.44 behind the peer core (src/peer/peer.h), shared by the two
 * libuv engines (impls/libuv.c: the design and what each face measures).
 *
 * The loop: a uv_loop_t embedded the way libuv documents for running it
 * from another event loop: the loop thread runs uv_run(UV_RUN_NOWAIT)
 * (due timers, the async handle) and then polls libuv's backend descriptor
 * (uv_backend_fd) itself for uv_backend_timeout() milliseconds, with the
 * engine mutex released: that is the loop lock (libuv has no hook around
 * its own poll).  The wake-up is a uv_async_t (uv_async_send, libuv's one
 * thread-safe call), whose eventfd is in libuv's epoll set.
 *
 * A record's uv_timer_t is initialised on the loop thread when the record
 * is first started (uv_timer_init links it into the loop's handle queue)
 * and closed (uv_close, freed in its close callback) when the record is
 * freed; idle records keep their handle on the free list.  The timeout is
 * whole milliseconds from the loop's clock after uv_update_time() (the
 * loop time is stale after a long callback) to the deadline rounded up;
 * libuv's loop clock is milliseconds of CLOCK_MONOTONIC
 * (CLOCK_MONOTONIC_COARSE where that is fine enough), behind ours, so the
 * timer fires after the deadline; should it come early all the same, the
 * core's deadline check starts it again for the remainder.
 */
#include <poll.h>
#include <time.h>
#include <uv.h>

#include "libuv.h"

struct luv {
	uv_loop_t loop;
	uv_async_t wake;
};

#define LIB(e) ((struct luv *)(e)->lib)

static void luv_async(uv_async_t *h) { (void)h; /* the loop thread drains after this turn */ }

static void luv_timer(uv_timer_t *h)
{
	struct peer_rec *r = h->data;
	tmo__peer_fire(r->eng, r);
}

static int luv_init(struct peer *e)
{
	struct luv *l = tmo__calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	if (uv_loop_init(&l->loop) != 0) {
		tmo__free(l);
		return TMO_EAGAIN; /* descriptors */
	}
	if (uv_async_init(&l->loop, &l->wake, luv_async) != 0) {
		uv_loop_close(&l->loop);
		tmo__free(l);
		return TMO_EAGAIN;
	}
	l->loop.data = e;
	e->lib = l;
	/* The lag (peer.h): a timer is due in libuv at its deadline rounded up
	 * to the loop clock's millisecond, and a turn runs those at or before
	 * its floored reading, so one unreported after a turn that read the
	 * clock at C is due after C - 1 ms; libuv reads CLOCK_MONOTONIC_COARSE
	 * instead where its resolution is 1 ms or finer (uv__hrtime's
	 * UV_CLOCK_FAST), which lags by up to that resolution more. */
	struct timespec cr;
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &cr) == 0 && cr.tv_sec == 0 &&
	    cr.tv_nsec <= TMO_NSEC_PER_MSEC)
		e->lag_ns += cr.tv_nsec;
	return 0;
}

/* Close every record handle still open (they are all listed in `dead`
 * by now) and the async handle, let libuv finish closing them, close the
 * loop. */
static void luv_close_all(struct peer *e)
{
	struct luv *l = LIB(e);
	tmo_list_for_each(r, &e->dead, struct peer_rec, link)
		if (r->lib_init)
			uv_close(peer_area(e, r), NULL);
	uv_close((uv_handle_t *)&l->wake, NULL);
	while (uv_run(&l->loop, UV_RUN_NOWAIT) != 0)
		;
	uv_loop_close(&l->loop);
	tmo__free(l);
}

static void luv_fini(struct peer *e) { luv_close_all(e); }

/* In the child: uv_loop_fork first gives the loop its own epoll set and
 * async eventfd (closing the child's copies of the parent's), so closing
 * the handles afterwards makes no epoll_ctl on the set the parent uses. */
static void luv_fini_forked(struct peer *e)
{
	uv_loop_fork(&LIB(e)->loop);
	luv_close_all(e);
}

static int luv_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	struct luv *l = LIB(e);
	uv_timer_t *h = peer_area(e, r);
	if (!r->lib_init) {
		uv_timer_init(&l->loop, h); /* cannot fail */
		r->lib_init = true;
	}
	h->data = r;
	/* Read here, not taken from `now` (one reading for a whole drained
	 * queue, which made the last of a long queue late, out of order). */
	(void)now;
	int64_t t = tmo_now_ns();
	uv_update_time(&l->loop);
	/* Counted on the loop's own clock (ms of CLOCK_MONOTONIC, coarse where
	 * fine enough, floored): libuv fires when its clock reaches the
	 * deadline rounded up, which CLOCK_MONOTONIC has then passed; counted
	 * from our clock, a timer came early by the loop clock's lag, and its
	 * restart cost a turn, out of order.  A loop clock far from ours (not
	 * the same clock) falls back to the relative count. */
	uint64_t at = ((uint64_t)r->deadline + TMO_NSEC_PER_MSEC - 1) / TMO_NSEC_PER_MSEC;
	uint64_t lnow = uv_now(&l->loop), ours = (uint64_t)t / TMO_NSEC_PER_MSEC;
	uint64_t ms = at > lnow ? at - lnow : 0;
	if (lnow + 1000 < ours || lnow > ours + 1000) {
		int64_t left = r->deadline - t;
		ms = left > 0 ? ((uint64_t)left + TMO_NSEC_PER_MSEC - 1) / TMO_NSEC_PER_MSEC : 0;
	}
	return uv_timer_start(h, luv_timer, ms, 0) == 0 ? 0 : TMO_ESYS;
}

static void luv_stop(struct peer *e, struct peer_rec *r)
{
	if (r->lib_init)
		uv_timer_stop(peer_area(e, r));
}

static void luv_closed(uv_handle_t *h) { tmo__free(h->data); }

/* On the loop thread for a record whose handle is open (peer core:
 * rec_put keeps such records when called elsewhere). */
static void luv_rec_free(struct peer *e, struct peer_rec *r)
{
	if (!r->lib_init) {
		tmo__free(r);
		return;
	}
	uv_handle_t *h = peer_area(e, r);
	h->data = r;
	uv_close(h, luv_closed);
}

static void luv_wake(struct peer *e) { uv_async_send(&LIB(e)->wake); }

/* One turn that does not block: libuv updates its loop clock, runs the
 * timers it finds due (luv_timer: into the core's due list) and polls with
 * a zero timeout. */
static void luv_collect(struct peer *e) { uv_run(&LIB(e)->loop, UV_RUN_NOWAIT); }

static void luv_iterate(struct peer *e)
{
	struct luv *l = LIB(e);
	uv_run(&l->loop, UV_RUN_NOWAIT);
	if (e->woken || e->stop || !tmo_list_empty(&e->due))
		return; /* expiries to run, or work owed: no sleep */
	struct pollfd pfd = {.fd = uv_backend_fd(&l->loop), .events = POLLIN};
	int timeout = uv_backend_timeout(&l->loop);
	peer_unlock(e);
	(void)poll(&pfd, 1, timeout);
	peer_lock(e);
}

#define LUV_BACKEND(nm)                                                                    \
	{                                                                                  \
		.name = nm, .area = sizeof(uv_timer_t), .flags = 0, .init = luv_init,      \
		.fini = luv_fini, .start = luv_start, .stop = luv_stop,                    \
		.rec_free = luv_rec_free, .wake = luv_wake, .iterate = luv_iterate,        \
		.collect = luv_collect, .lag_ns = TMO_NSEC_PER_MSEC,                       \
		.fini_forked = luv_fini_forked,                                            \
	}
const struct peer_backend tmo__peer_libuv = LUV_BACKEND("libuv");
const struct peer_backend tmo__peer_libuv_loop = LUV_BACKEND("libuv_loop");
