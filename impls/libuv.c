/*
 * libuv: a peer adapter over libuv 1.44's uv_timer (a binary min-heap
 * keyed by millisecond deadline and start order), the cross-thread face:
 * what a multi-threaded program writes around a loop whose handles belong
 * to one thread.  One loop thread runs the uv_loop_t; an arm or cancel
 * from another thread goes into a queue under the engine mutex and the
 * loop thread is woken with uv_async_send (coalesced while a wake-up is
 * owed); the loop thread starts and stops the uv_timers.  An arm or cancel
 * made on the loop thread (a callback re-arming) calls uv_timer_start/stop
 * at once.  libuv_loop (impls/libuv_loop.c) is the same adapter measured
 * from inside its loop thread.
 *
 * The shared design (records, the loop lock, exactly once, cancel's wait,
 * destroy, fork) is the peer core's: src/peer/peer.h.  libuv gives
 * neither cross-thread calls nor a wait for a running callback nor
 * never-early against CLOCK_MONOTONIC (its loop clock is milliseconds,
 * possibly the coarse clock); the adapter adds all three
 * (impls/libuv/backend.c).
 *
 * Costs: arm from another thread = the engine mutex, a free-list record, a
 * queue insert and, when none is owed, uv_async_send (an eventfd write);
 * the loop thread then pays uv_update_time + uv_timer_start.  No
 * allocation in the steady state (idle records keep their uv_timer_t).
 * Each loop turn is a poll of libuv's descriptor plus uv_run(NOWAIT)'s own
 * zero-timeout epoll_wait.
 *
 * fork(): every call in the child is refused (TMO_EFORKED, the core);
 * tmo_destroy there frees the child's copy: uv_loop_fork gives it its own
 * epoll set and eventfd, then the handles are closed and the loop closed,
 * so the parent's loop is untouched.
 *
 * Resolution: 1 ms (libuv's timeouts and loop clock are milliseconds).
 */
#include "libuv/libuv.h"

static int luv_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg; /* no granularity of its own */
	return tmo__peer_create(&tmo__peer_libuv, out);
}

const struct tmo_engine_ops tmo__engine_libuv = {
	.name = "libuv",
	.summary = "libuv 1.44 uv_timer (binary heap, ms) on one loop thread; other threads' "
	           "arms and cancels queue + uv_async_send, the loop thread starts/stops them; "
	           "adapter adds cancel's wait and never-early",
	.caps = TMO_CAP_NO_ALLOC,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(luv_create),
};
