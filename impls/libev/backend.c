/*
 * libev 4.33 behind the peer core (src/peer/peer.h), shared by the two
 * libev engines (impls/libev.c: the design and what each face measures).
 *
 * The loop: ev_loop_new(EVBACKEND_EPOLL) (never the default loop, which
 * owns SIGCHLD), run by the loop thread one turn at a time (ev_run
 * EVRUN_ONCE).  libev's loop release/acquire callbacks drop and re-take
 * the engine mutex around its backend poll: that is the loop lock.  The
 * wake-up is an ev_async (ev_async_send, the one libev call another thread
 * may make; it writes libev's eventfd only while the loop sleeps).
 *
 * A record's ev_timer: after = (deadline - now) seconds + 1 us, where `now`
 * was read before ev_now_update(): ev_timer_start counts from the loop's
 * cached time, which is stale after a long callback (an arm made there
 * would fire early by as long), so the cache is refreshed first and the
 * timer can only expire after the deadline.  ev_tstamp is a double of
 * seconds; the microsecond covers its rounding.
 */
#include <ev.h>

#include "libev.h"

/* lev_start dates a timer by two clock readings around ev_now_update at
 * most LEV_SLACK_NS apart (it reads again, up to LEV_SLACK_TRIES times,
 * when it was preempted between them), so libev's expiry is at most that
 * and its microsecond after the deadline: the lag a turn allows for
 * (peer.h).  Past the tries a timer may be later than that: the lag is
 * then not a bound (a thread preempted 64 times running). */
#define LEV_SLACK_NS (20 * TMO_NSEC_PER_USEC)
#define LEV_SLACK_TRIES 64
#define LEV_LAG_NS (LEV_SLACK_NS + 2 * TMO_NSEC_PER_USEC)

struct lev {
	struct ev_loop *loop;
	ev_async wake;
	bool collecting; /* in lev_collect: keep m around libev's zero-timeout poll */
};

#define LIB(e) ((struct lev *)(e)->lib)

static void lev_release(struct ev_loop *loop)
{
	struct peer *e = ev_userdata(loop);
	if (!LIB(e)->collecting)
		peer_unlock(e);
}
static void lev_acquire(struct ev_loop *loop)
{
	struct peer *e = ev_userdata(loop);
	if (!LIB(e)->collecting)
		peer_lock(e);
}

static void lev_async(struct ev_loop *loop, ev_async *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents; /* the loop thread drains its queue after this turn */
}

static void lev_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)revents;
	tmo__peer_fire(ev_userdata(loop), w->data);
}

static int lev_init(struct peer *e)
{
	struct lev *l = tmo__calloc(1, sizeof *l);
	if (l == NULL)
		return TMO_ENOMEM;
	l->loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV | EVFLAG_NOSIGMASK);
	if (l->loop == NULL) {
		tmo__free(l);
		return TMO_EAGAIN; /* descriptors */
	}
	ev_set_userdata(l->loop, e);
	ev_set_loop_release_cb(l->loop, lev_release, lev_acquire);
	ev_async_init(&l->wake, lev_async);
	ev_async_start(l->loop, &l->wake);
	e->lib = l;
	return 0;
}

static void lev_fini(struct peer *e)
{
	struct lev *l = LIB(e);
	ev_async_stop(l->loop, &l->wake);
	ev_loop_destroy(l->loop);
	tmo__free(l);
}

/* ev_loop_destroy closes the loop's epoll and eventfd descriptors (the
 * child's copies) and makes no epoll_ctl: the parent's set is untouched. */
static void lev_fini_forked(struct peer *e)
{
	ev_loop_destroy(LIB(e)->loop);
	tmo__free(LIB(e));
}

static int lev_start(struct peer *e, struct peer_rec *r, int64_t now)
{
	struct lev *l = LIB(e);
	ev_timer *w = peer_area(e, r);
	/* The clock is read here, just before ev_now_update, not taken from
	 * `now`: the loop thread starts a whole queue after one reading, and
	 * counting each timer from that reading made the last ones late by the
	 * drain's length (33 ms for 1e5 queued arms), out of deadline order. */
	(void)now;
	/* ...and again after it: a thread preempted between the two readings
	 * would start the timer late by as long, after later deadlines (the
	 * lag the core allows for, LEV_LAG_NS, bounds it). */
	int64_t t = tmo_now_ns(), after;
	for (int tries = 0;; tries++) {
		ev_now_update(l->loop); /* after the clock was read: the timer only gets later */
		after = tmo_now_ns();
		if (after - t <= LEV_SLACK_NS || tries == LEV_SLACK_TRIES)
			break;
		t = after;
	}
	int64_t left = r->deadline - t;
	ev_timer_init(w, lev_timer, (ev_tstamp)(left > 0 ? left : 0) * 1e-9 + 1e-6, 0.);
	w->data = r;
	ev_timer_start(l->loop, w);
	return 0;
}

static void lev_stop(struct peer *e, struct peer_rec *r)
{
	ev_timer_stop(LIB(e)->loop, peer_area(e, r));
}

static void lev_wake(struct peer *e) { ev_async_send(LIB(e)->loop, &LIB(e)->wake); }

static void lev_iterate(struct peer *e) { ev_run(LIB(e)->loop, EVRUN_ONCE); }

/* One turn that does not block: libev updates its clock and runs the
 * timers it finds due (lev_timer: into the core's due list).  Its poll
 * does not wait, so m stays held: released there, the loop thread would
 * queue for it behind every arm of a busy thread, once a turn. */
static void lev_collect(struct peer *e)
{
	LIB(e)->collecting = true;
	ev_run(LIB(e)->loop, EVRUN_NOWAIT);
	LIB(e)->collecting = false;
}

/* The two libev engines share the backend; only the name differs (as
 * libuv's LUV_BACKEND). */
#define LEV_BACKEND(nm)                                                                    \
	{                                                                                  \
		.name = nm, .area = sizeof(ev_timer), .flags = 0, .init = lev_init,        \
		.fini = lev_fini, .start = lev_start, .stop = lev_stop, .wake = lev_wake,  \
		.iterate = lev_iterate, .collect = lev_collect, .lag_ns = LEV_LAG_NS,     \
		.fini_forked = lev_fini_forked,                                            \
	}
const struct peer_backend tmo__peer_libev = LEV_BACKEND("libev");
const struct peer_backend tmo__peer_libev_loop = LEV_BACKEND("libev_loop");
