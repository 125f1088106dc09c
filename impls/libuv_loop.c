/*
 * libuv_loop: libuv on its own loop thread — the libuv engine
 * (impls/libuv.c: the adapter, costs, fork, resolution) with a hook that
 * runs a function on the loop thread (tmo_testing_run_on_loop,
 * TMO_CAP_RUN_ON_LOOP).  There, as in a callback, arm and cancel go
 * straight to uv_timer_start and uv_timer_stop (under the uncontended
 * engine mutex, with a free-list record and uv_update_time): a benchmark
 * loop run inside that function measures libuv's own cost with the
 * adapter's bookkeeping, no queue and no wake-up.  No timer of the engine
 * fires while the function runs.  From any other thread it is the libuv
 * engine, queue and wake-up included.
 */
#include "peer/peer.h"

/* impls/libuv/backend.c */
extern const struct peer_backend tmo__peer_libuv_loop;

static int luvl_create(const struct tmo_config *cfg, struct tmo **out)
{
	(void)cfg;
	return tmo__peer_create(&tmo__peer_libuv_loop, out);
}

static const struct tmo_testing_ops luvl_testing = {.run_on_loop = tmo__peer_run_on_loop};

const struct tmo_engine_ops tmo__engine_libuv_loop = {
	.name = "libuv_loop",
	.summary = "libuv 1.44 uv_timer driven from its own loop thread "
	           "(tmo_testing_run_on_loop: arm/cancel call uv_timer_start/stop directly); "
	           "from other threads the libuv adapter",
	.caps = TMO_CAP_NO_ALLOC | TMO_CAP_RUN_ON_LOOP,
	.resolution_ns = TMO_NSEC_PER_MSEC,
	PEER_ENGINE_OPS(luvl_create),
	.testing = &luvl_testing,
};
