/*
 * libev: a peer adapter over libev 4.33's ev_timer (a 4-ary heap of
 * doubles), the cross-thread face: what a multi-threaded program writes
 * around a loop whose timers belong to one thread.  One loop thread runs
 * ev_run; an arm or cancel from another thread goes into a queue under the
 * engine mutex and the loop thread is woken with ev_async_send (coalesced
 * while a wake-up is owed; libev writes its eventfd only while the loop
 * sleeps); the loop thread starts and stops the ev_timers.  An arm or
 * cancel made on the loop thread (a callback re-arming) calls
 * ev_timer_start/stop at once.  libev_loop (impls/libev_loop.c) is the same
 * adapter measured from inside its loop thread.
 *
 * The shared design (records, the loop lock, exactly once, cancel's wait,
 * destroy, fork) is the peer core's: src/peer/peer.h.  libev itself
 * gives neither cross-thread calls nor a wait for a running callback nor
 * never-early against CLOCK_MONOTONIC (ev_timer counts from the loop's
 * cached time); the adapter adds all three (impls/libev/backend.c).
 *
 * Costs: arm from another thread = the engine mutex, a free-list record,
 * a queue insert and, when none is owed, ev_async_send (a write to
 * libev's eventfd when the loop sleeps); the loop thread then pays
 * ev_now_update + ev_timer_start.  Cancel of a started timer queues its
 * stop the same way; of a timer still queued, unlinks it.  No allocation
 * in the steady state (up to PEER_FREE_MAX idle records are kept; libev's
 * heap array grows and never shrinks, outside tmo's allocator).
 *
 * fork(): every call in the child is refused (TMO_EFORKED, the core);
 * tmo_destroy there frees the child's copy: ev_loop_destroy closes the
 * child's copies of libev's epoll and eventfd descriptors without
 * epoll_ctl, so the parent's loop is untouched (src/peer/peer.h).
 *
 * Resolution: 1 ms.  libev sleeps in epoll_wait, whose timeout is whole
 * milliseconds (rounded up), so a timer is late by up to about a
 * millisecond plus the wake-up; libev fires the due timers of one turn in
 * deadline order.
 */
#include "libev/libev.h"

static int lev_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own */
	return tmo__peer_create(&tmo__peer_libev, out);
}

const struct tmo_engine_ops tmo__engine_libev = {
	.name = "libev",
	.summary = "libev 4.33 ev_timer (4-ary heap) on one loop thread; other threads' arms "
	           "and cancels queue + ev_async_send, the loop thread starts/stops them; "
	           "adapter adds cancel's wait and never-early",
	.caps = TMO_CAP_NO_ALLOC,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(lev_create),
};
