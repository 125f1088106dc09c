/*
 * The timer thread's own state, shared by the three files it runs:
 * fire.c (collecting what is due, ordering it, running the callbacks),
 * take.c (stealing, draining, filing) and timer.c (the loop: ticks,
 * sleeping);
 * engine.c allocates it.  Only the timer thread touches it, besides the
 * counters stats and debug read.  Its place in src/lf/'s order is fire.c's,
 * the first file that uses it.
 */
#ifndef TMO_LF_TT_H
#define TMO_LF_TT_H

#include "lf.h"

/* The due array's first size. */
#define DUE_FIRST 1024u

struct due {
	struct lf_node *n;
	uint64_t gen;
	int64_t deadline;
	/* n's timer, read while the node could not be reused (in a base the
	 * timer thread holds, or handed over): only to fetch ahead (timer.c,
	 * fire_due); a cancel may free and reuse n before it fires */
	struct tmo_timer *timer;
	int handed; /* from a soon list: QUEUED, the timer thread frees it if dropped */
};

/* Timer-thread state (timer thread only, besides the debug counters). */
struct lf_tt {
	struct due *due, *tmp;
	size_t due_n, due_cap;
	size_t sorted; /* due[0..sorted) is in deadline order */
	struct lf_node *unfiled; /* QUEUED nodes its base could not take yet */
	int64_t last_cal;
	int idle;
	/* How long before a wheel's tick the round that collects it runs
	 * (timer.c, Lead): ns, 0 for a heap; what the last round that
	 * collected took */
	int64_t lead, took;
	/* when the trim a spill asked for is due (0: none waiting): timer.c,
	 * announce_sleep */
	int64_t trim_at;
	/* bytes it holds beyond its fixed size (stats) */
	_Atomic uint64_t bytes;
	_Atomic uint64_t stolen, via_inbox, filed;
};

#endif /* TMO_LF_TT_H */
