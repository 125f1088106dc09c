/* Shared objects that are no engine, one per -DBAD=: each must be refused
 * by the loader (tmo/engine.h) with its own named error, by the harness
 * (exit 3) and by the engine tests (exit 3): tests/examples/examples.cmake.
 *   1 exports no tmo_engine_abi             TMO_LOAD_ENOSYM
 *   2 built for another ABI version          TMO_LOAD_EABI
 *   3 a NULL slot (cancel)                    TMO_LOAD_ETABLE
 *   4 no name                                 TMO_LOAD_ETABLE
 *   5 a caps bit no enum tmo_cap names        TMO_LOAD_ETABLE
 *   6 a built-in engine's name                TMO_LOAD_ETABLE
 *   7 TMO_CAP_PARK without a park hook        TMO_LOAD_ETABLE
 * The slots never run: the loader refuses the table first.  But for one:
 *   8 a good table whose create answers TMO_EUNAVAIL (its kernel facility
 *     missing, as uring's without io_uring): every scenario must skip it,
 *     naming the error (unavail.sh), never fail it.
 *   9 a good table whose create aborts the process: an instance of a
 *     --repeat run (each in a process of its own) that dies must be a
 *     violation naming the signal (tests/harness/instances.sh). */
#include <stdlib.h>

#include <tmo/engine.h>

static int bad_create(const struct tmo_config *cfg, struct tmo **out)
{
	if (BAD == 9)
		abort();
	return BAD == 8 ? TMO_EUNAVAIL : TMO_ENOMEM;
}
static void bad_destroy(struct tmo *e) {}
static int bad_arm(struct tmo *e, struct tmo_timer *t, int64_t ns, tmo_callback *cb, void *a)
{
	return TMO_ENOMEM;
}
__attribute__((unused)) static int bad_cancel(struct tmo *e, struct tmo_timer *t)
{
	return TMO_ENOTARMED;
}
static int bad_stats(struct tmo *e, struct tmo_stats *s) { return 0; }

static const struct tmo_engine_ops bad_ops = {
#if BAD == 4
	.name = NULL,
#elif BAD == 6
	.name = "wheel",
#else
	.name = "bad",
#endif
	.summary = "refused by the loader",
#if BAD == 5
	.caps = 1u << 3,
#elif BAD == 7
	.caps = TMO_CAP_PARK,
#endif
	.resolution_ns = 1000,
	.create = bad_create,
	.destroy = bad_destroy,
	.arm = bad_arm,
#if BAD != 3
	.cancel = bad_cancel,
#endif
	.stats = bad_stats,
};

#if BAD == 1
const struct tmo_engine_ops *not_the_symbol = &bad_ops;
#elif BAD == 2
static const struct tmo_engine_host *host;
__attribute__((visibility("default"))) const struct tmo_engine_abi tmo_engine_abi = {
	TMO_ENGINE_ABI_VERSION + 1, sizeof(struct tmo_engine_ops), &bad_ops, &host};
#else
TMO_ENGINE_EXPORT(bad_ops);
#endif
