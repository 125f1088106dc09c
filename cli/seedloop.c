/*
 * tmo-seedloop ENGINE PAIRS [--timely] [--held[=N]]: the seed loop and nothing
 * else, for instruction counts (scripts/instructions runs it under
 * callgrind).  --timely: tmo_testing_timely_timer(1), see
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

static void counted(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	__atomic_fetch_add(&fired, 1, __ATOMIC_RELAXED); /* a held timeout should not fire */
}

/* The held loop: pairs [from, to) of a FIFO of held_n timers (e NULL: the
 * FIFO alone). */
static long held(struct tmo *e, struct tmo_timer *ts, long from, long to)
{
	long bad = 0;
	for (long i = from; i < to; i++) {
		struct tmo_timer *t = &ts[i % held_n];
		if (i >= held_n) { /* the slot's previous arm, held_n pairs old */
			if (e != NULL)
				bad += tmo_cancel(e, t) != TMO_CANCEL_PREVENTED;
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
		} else
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
	for (long i = n - held_n; e != NULL && i < n; i++)
		bad += tmo_cancel(e, &ts[i % held_n]) != TMO_CANCEL_PREVENTED;
	free(ts);
	return bad;
}

static long loop(struct tmo *e, struct tmo_timer *t, long pairs)
{
	long bad = 0;
	for (long i = 0; i < pairs; i++) {
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
		fprintf(stderr, "usage: tmo-seedloop ENGINE PAIRS [--timely] [--held[=N]]\n");
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
