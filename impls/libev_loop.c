/*
 * libev_loop: libev on its own loop thread — the libev engine (impls/libev.c:
 * the adapter, costs, fork, resolution) with a hook that runs a function on
 * the loop thread (tmo_testing_run_on_loop, TMO_CAP_RUN_ON_LOOP).  There,
 * as in a callback, arm and cancel go straight to ev_timer_start and
 * ev_timer_stop (under the uncontended engine mutex, with a free-list
 * record and ev_now_update): a benchmark loop run inside that function
 * measures libev's own cost with the adapter's bookkeeping, no queue and
 * no wake-up.  No timer of the engine fires while the function runs.  From
 * any other thread it is the libev engine, queue and wake-up included.
 */
#include "peer/peer.h"

/* impls/libev/backend.c */
extern const struct peer_backend tmo__peer_libev_loop;

static int levl_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg;
	return tmo__peer_create(&tmo__peer_libev_loop, out);
}

static const struct tmo_testing_ops levl_testing = {.run_on_loop = tmo__peer_run_on_loop};

const struct tmo_engine_ops tmo__engine_libev_loop = {
	.name = "libev_loop",
	.summary = "libev 4.33 ev_timer driven from its own loop thread "
	           "(tmo_testing_run_on_loop: arm/cancel call ev_timer_start/stop directly); "
	           "from other threads the libev adapter",
	.caps = TMO_CAP_NO_ALLOC | TMO_CAP_RUN_ON_LOOP,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(levl_create),
	.testing = &levl_testing,
};
