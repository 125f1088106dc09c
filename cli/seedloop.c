/*
 * tmo-seedloop ENGINE|structure:KIND PAIRS [--timely] [--held[=N]]: the seed
 * loop and nothing else, for instruction counts (scripts/instructions runs
 * it under callgrind).  --timely: tmo_testing_timely_timer(1), see
 * include/tmo/testing.h.  ENGINE "-" runs the same loop around the empty
 * block alone: the loop's own instructions, which the counts leave out.
 *
 * --held: the held loop instead (throughput's held case, counted rather
 * than timed): N timers (default HELD) stay outstanding, and each pair arms
 * one and cancels the oldest (armed N pairs earlier); an engine with a cap
 * on pending timers (glib: 4,096) runs it with N under its cap.  Warm-up
 * fills the FIFO and runs WARMUP pairs; the end cancels what is outstanding, so PAIRS = 0
 * and PAIRS = N differ by N steady-state pairs.  The timeout is HELD_NS
 * (60 s): under callgrind on a loaded machine a hold of HELD pairs has
 * lasted over a second, and a held timeout must not fire.  A held arm
 * refused for now (TMO_EAGAIN) is asked again, and the refusals are said
 * on stderr: their retries are in the count.
 *
 * ENGINE "structure:wheel", "structure:heap" or "structure:near_far": the
 * same loops on the structure alone that the engine wheel, condvar or
 * mpsc files its timers in (the throughput scenario's "x structure" rows,
 * scenarios/throughput/structure.c): unlocked, on this thread, timers at
 * that engine's resolution; a clock read and (wheel, near_far) an advance
 * to it once every BATCH pairs, as the scenario drives them.  What an
 * engine's pair costs beyond it is what the engine adds to the structure.
 *
 * Creates the engine, runs WARMUP arm+cancel pairs (a 1 s timeout around
 * an empty block, as the throughput scenario's seed), then PAIRS more,
 * then destroys the engine.  Run once with PAIRS = 0 and once with PAIRS =
 * N: per thread, the difference divided by N is what one steady-state pair
 * costs there (creation, warm-up, destroy and the first growth cancel
 * out).  Exit status 1 when an arm or a cancel returns what the seed loop
 * does not expect.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"
#include "ds/heap.h"
#include "ds/wheel.h"
#include "lf/node.h"
#include "lf/schedule.h"

#include "tmo/testing.h"
#include "tmo/tmo.h"

#define WARMUP 1000
#define HELD 10000
#define HELD_MAX 1000000
#define HELD_NS (60 * TMO_NSEC_PER_SEC)

static long held_n = HELD; /* timers outstanding in the held loop */
static long refused;       /* held arms refused for now, asked again */

static void never(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* a 1 s timeout cancelled at once never fires */
}

static long fired;

/* ---- the structure alone (ENGINE "structure:KIND") ------------------------ */

#define BATCH 100 /* pairs a clock read (and an advance) serves */

enum ds_kind { DS_NONE, DS_WHEEL, DS_HEAP, DS_NEAR_FAR };
static const char *const ds_names[] = {"", "wheel", "heap", "near_far"};
static const char *const ds_engines[] = {"", "wheel", "condvar", "mpsc"};

static struct {
	enum ds_kind kind;
	int64_t now;
	long adds; /* since the start: every BATCH-th reads the clock */
	long due;  /* nodes handed out as due (none should be) */
	struct tmo_wheel wheel;
	struct tmo_wheel_node *wn;
	struct tmo_heap heap;
	struct tmo_heap_node *hn;
	const struct lf_sched *sc;
	void *nf;
	struct lf_node *ln;
} ds;

static void ds_due(void *ctx, struct lf_node *n)
{
	(void)ctx;
	(void)n;
	ds.due++;
}

/* The structure of kind `name` with n nodes; 0, or 2 (said on stderr). */
static int ds_open(const char *name, long n)
{
	int k = DS_WHEEL;
	while (k <= DS_NEAR_FAR && strcmp(ds_names[k], name) != 0)
		k++;
	if (k > DS_NEAR_FAR) {
		fprintf(stderr, "tmo-seedloop: structure '%s': want wheel, heap or near_far\n",
		        name);
		return 2;
	}
	const struct tmo_engine_ops *ops = tmo_engine_find(ds_engines[k]);
	int64_t res = ops != NULL ? ops->resolution_ns : TMO_NSEC_PER_MSEC;
	int rc = TMO_ENOMEM;
	ds.kind = (enum ds_kind)k;
	ds.now = tmo_now_ns();
	if (k == DS_WHEEL && (ds.wn = calloc((size_t)n, sizeof *ds.wn)) != NULL) {
		rc = tmo__wheel_init(&ds.wheel, res, ds.now);
		for (long i = 0; i < n; i++)
			tmo__wheel_node_init(&ds.wn[i]);
	} else if (k == DS_HEAP && (ds.hn = calloc((size_t)n, sizeof *ds.hn)) != NULL) {
		rc = tmo__heap_init(&ds.heap, TMO_HEAP_DEFAULT_ARITY, 64); /* condvar's */
		for (long i = 0; i < n; i++)
			tmo__heap_node_init(&ds.hn[i]);
	} else if (k == DS_NEAR_FAR) {
		ds.sc = &tmo__lf_sched_near_far;
		ds.ln = aligned_alloc(64, (size_t)n * sizeof *ds.ln);
		ds.nf = aligned_alloc(64, (ds.sc->size + 63) & ~(size_t)63);
		if (ds.ln != NULL && ds.nf != NULL) {
			memset(ds.ln, 0, (size_t)n * sizeof *ds.ln);
			for (long i = 0; i < n; i++)
				tmo__heap_node_init(&ds.ln[i].s.heap);
			rc = ds.sc->init(ds.nf, res, ds.now);
		}
	}
	if (rc != 0) {
		fprintf(stderr, "tmo-seedloop: structure %s: %s\n", name, tmo_strerror(rc));
		return 2;
	}
	return 0;
}

/* Node k filed timeout from the latest clock read; 0, or 1. */
static int ds_add(long k, int64_t timeout)
{
	if (ds.adds++ % BATCH == 0) {
		ds.now = tmo_now_ns();
		if (ds.kind == DS_WHEEL) {
			struct tmo_wheel_list due = {NULL};
			ds.due += (long)tmo__wheel_advance(&ds.wheel, ds.now, &due);
		} else if (ds.kind == DS_NEAR_FAR && ds.sc->next_deadline(ds.nf) <= ds.now)
			ds.due += (long)ds.sc->collect(ds.nf, ds.now, SIZE_MAX, ds_due, NULL);
	}
	if (ds.kind == DS_WHEEL) {
		tmo__wheel_add(&ds.wheel, &ds.wn[k], ds.now + timeout);
		return 0;
	}
	if (ds.kind == DS_HEAP)
		return tmo__heap_push(&ds.heap, &ds.hn[k], ds.now + timeout) != 0;
	/* as mpsc's timer thread files (take.c, file_tt) */
	atomic_store_explicit(&ds.ln[k].aux, LF_IN_TT, memory_order_relaxed);
	return ds.sc->insert(ds.nf, &ds.ln[k], ds.now + timeout) != 0;
}

/* Node k taken out; 0, or 1 when it was not in (handed out as due). */
static int ds_del(long k)
{
	if (ds.kind == DS_WHEEL) {
		if (!tmo__wheel_contains(&ds.wn[k]))
			return 1;
		tmo__wheel_del(&ds.wheel, &ds.wn[k]);
	} else if (ds.kind == DS_HEAP) {
		if (!tmo__heap_contains(&ds.hn[k]))
			return 1;
		tmo__heap_remove(&ds.heap, &ds.hn[k]);
	} else {
		if (!ds.sc->contains(&ds.ln[k]))
			return 1;
		ds.sc->remove(ds.nf, &ds.ln[k]);
	}
	return 0;
}

static void ds_close(void)
{
	if (ds.kind == DS_HEAP)
		tmo__heap_fini(&ds.heap);
	if (ds.kind == DS_NEAR_FAR)
		ds.sc->fini(ds.nf);
	free(ds.wn);
	free(ds.hn);
	free(ds.ln);
	free(ds.nf);
}

static void counted(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	__atomic_fetch_add(&fired, 1, __ATOMIC_RELAXED); /* a held timeout should not fire */
}

/* The held loop: pairs [from, to) of a FIFO of held_n timers (e NULL: the
 * structure alone, or with none the FIFO alone). */
static long held(struct tmo *e, struct tmo_timer *ts, long from, long to)
{
	long bad = 0;
	for (long i = from; i < to; i++) {
		struct tmo_timer *t = &ts[i % held_n];
		if (i >= held_n) { /* the slot's previous arm, held_n pairs old */
			if (e != NULL)
				bad += tmo_cancel(e, t) != TMO_CANCEL_PREVENTED;
			else if (ds.kind != DS_NONE)
				bad += ds_del(i % held_n);
			else
				__asm__ volatile("" : : "r"(t) : "memory");
		}
		if (e != NULL) {
			int rc;
			/* refused for now (TMO_EAGAIN: mpsc's timer thread, which
			 * valgrind runs one thread at a time, is behind): asked
			 * again, as an application would, and counted */
			while ((rc = tmo_arm(e, t, HELD_NS, counted, NULL)) == TMO_EAGAIN) {
				refused++;
				sched_yield();
			}
			bad += rc != 0;
		} else if (ds.kind != DS_NONE)
			bad += ds_add(i % held_n, HELD_NS);
		else
			__asm__ volatile("" : : "r"(t) : "memory");
	}
	return bad;
}

/* Warm-up, PAIRS held pairs, then cancel what is outstanding. */
static long held_run(struct tmo *e, long pairs)
{
	struct tmo_timer *ts = calloc((size_t)held_n, sizeof *ts);
	if (ts == NULL)
		return 1;
	long n = held_n + WARMUP + pairs;
	long bad = held(e, ts, 0, held_n + WARMUP) + held(e, ts, held_n + WARMUP, n);
	for (long i = n - held_n; i < n; i++)
		if (e != NULL)
			bad += tmo_cancel(e, &ts[i % held_n]) != TMO_CANCEL_PREVENTED;
		else if (ds.kind != DS_NONE)
			bad += ds_del(i % held_n);
	free(ts);
	return bad;
}

static long loop(struct tmo *e, struct tmo_timer *t, long pairs)
{
	long bad = 0;
	for (long i = 0; i < pairs; i++) {
		if (e == NULL) { /* the structure alone */
			bad += ds_add(0, TMO_NSEC_PER_SEC);
			__asm__ volatile("" ::: "memory");
			bad += ds_del(0);
			continue;
		}
		bad += tmo_arm(e, t, TMO_NSEC_PER_SEC, never, NULL) != 0;
		__asm__ volatile("" ::: "memory"); /* the empty block */
		bad += tmo_cancel(e, t) != TMO_CANCEL_PREVENTED;
	}
	return bad;
}

int main(int argc, char **argv)
{
	int timely = 0, is_held = 0, bad_flag = 0;
	for (int i = 3; i < argc; i++) {
		if (strcmp(argv[i], "--timely") == 0)
			timely = 1;
		else if (strcmp(argv[i], "--held") == 0)
			is_held = 1;
		else if (strncmp(argv[i], "--held=", 7) == 0) {
			uint64_t h = 0;
			enum cli_num r = cli_parse_u64(argv[i] + 7, 1, HELD_MAX, &h);
			if (r != CLI_NUM_OK) {
				fprintf(stderr, "tmo-seedloop: --held '%s': %s: want an integer 1..%d\n",
				        argv[i] + 7, cli_num_words(r), HELD_MAX);
				return 2;
			}
			is_held = 1;
			held_n = (long)h;
		} else
			bad_flag = 1;
	}
	if (argc < 3 || bad_flag) {
		fprintf(stderr,
		        "usage: tmo-seedloop ENGINE|structure:KIND PAIRS [--timely] [--held[=N]]\n");
		return 2;
	}
	uint64_t n = 0;
	enum cli_num r = cli_parse_u64(argv[2], 0, LONG_MAX - WARMUP - HELD_MAX, &n);
	if (r != CLI_NUM_OK) {
		fprintf(stderr, "tmo-seedloop: PAIRS '%s': %s: want an integer 0..%ld\n", argv[2],
		        cli_num_words(r), LONG_MAX - WARMUP - HELD_MAX);
		return 2;
	}
	long pairs = (long)n;
	if (timely)
		tmo_testing_timely_timer(1);
	if (strcmp(argv[1], "-") == 0) {
		if (is_held)
			return held_run(NULL, pairs) != 0;
		for (long i = 0; i < WARMUP + pairs; i++)
			__asm__ volatile("" ::: "memory"); /* the empty block */
		return 0;
	}
	if (strncmp(argv[1], "structure:", 10) == 0) {
		if (ds_open(argv[1] + 10, is_held ? held_n : 1) != 0)
			return 2;
		long bad = is_held ? held_run(NULL, pairs)
		                   : loop(NULL, NULL, WARMUP) + loop(NULL, NULL, pairs);
		ds_close();
		if (bad != 0 || ds.due != 0)
			fprintf(stderr, "tmo-seedloop: %ld unexpected results, %ld nodes handed out as due\n",
			        bad, ds.due);
		return bad != 0 || ds.due != 0;
	}
	struct tmo *e = NULL;
	int rc = tmo_create(argv[1], NULL, &e);
	if (rc != 0) {
		fprintf(stderr, "tmo-seedloop: %s: %s\n", argv[1], tmo_strerror(rc));
		return 2;
	}
	struct tmo_timer t = TMO_TIMER_INIT;
	long bad = is_held ? held_run(e, pairs) : loop(e, &t, WARMUP) + loop(e, &t, pairs);
	tmo_destroy(&e);
	if (refused != 0)
		fprintf(stderr, "tmo-seedloop: %ld held arms refused for now (TMO_EAGAIN), asked again\n",
		        refused);
	if (bad != 0 || fired != 0)
		fprintf(stderr, "tmo-seedloop: %ld unexpected results, %ld held timeouts fired\n", bad,
		        fired);
	return bad != 0 || fired != 0;
}
