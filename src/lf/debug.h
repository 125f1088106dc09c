/*
 * The lock-free core's test view: counters tests/unit/lf.c and the lf
 * fuzzer read (engine.c fills it).  Not for the engines themselves.
 */
#ifndef TMO_LF_DEBUG_H
#define TMO_LF_DEBUG_H

#include <stdint.h>

struct tmo;

/* Test view (tests/unit/lf.c). */
struct lf_debug {
	uint64_t filed;       /* nodes in bases (as of the timer thread's last look) */
	uint64_t stolen;      /* ring nodes the timer thread took */
	uint64_t spilled;     /* ring nodes their owners spilled */
	uint64_t direct;      /* arms filed at once: their ring slot's arm lived */
	uint64_t inbox;       /* nodes that went through the inbox */
	uint64_t trims;       /* pages given back */
	uint64_t trim_runs;   /* trims the timer thread finished */
	uint64_t cache_count; /* free nodes in the calling thread's cache */
	uint64_t home_count;  /* and on its record's home list (depot.c, Homes) */
	uint64_t fence;       /* 1: arms fence before reading the tick word */
	uint64_t clock;       /* 1: arms stamp with the clock, not the TSC */
};
void tmo__lf_debug(struct tmo *e, struct lf_debug *out);
/* Its trim_runs alone: what tests that wait for a finished trim read. */
static inline uint64_t tmo__lf_trim_runs(struct tmo *e)
{
	struct lf_debug d;
	tmo__lf_debug(e, &d);
	return d.trim_runs;
}
/* Free nodes in every list of e's pool: the records' caches, spares and
 * homes, the timer thread's cache, the depot, loose nodes.  Exact only
 * while nothing moves the pool (the timer thread parked, tmo_testing_park,
 * and no other thread arming or cancelling): then the pool's nodes less
 * these are the nodes in use, pending or in transit. */
uint64_t tmo__lf_free_nodes(struct tmo *e);
/* Free nodes in the calling thread's cache for e (tests). */
uint64_t tmo__lf_my_cache_count(struct tmo *e);

#endif
