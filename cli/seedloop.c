/*
 * tmo-seedloop ENGINE PAIRS [--timely]: the seed loop and nothing else, for
 * instruction counts (scripts/instructions runs it under callgrind).
 * --timely: tmo_testing_timely_timer(1), see include/tmo/testing.h.
 * ENGINE "-" runs the same loop around the empty block alone: the loop's
 * own instructions, which the counts leave out.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digits.h"

#include "tmo/testing.h"
#include "tmo/tmo.h"

#define WARMUP 1000

static void never(struct tmo_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	abort(); /* a 1 s timeout cancelled at once never fires */
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
	int timely = argc == 4 && strcmp(argv[3], "--timely") == 0;
	if (argc != 3 && !timely) {
		fprintf(stderr, "usage: tmo-seedloop ENGINE PAIRS [--timely]\n");
		return 2;
	}
	uint64_t n = 0;
	enum cli_num r = cli_parse_u64(argv[2], 0, LONG_MAX - WARMUP, &n);
	if (r != CLI_NUM_OK) {
		fprintf(stderr, "tmo-seedloop: PAIRS '%s': %s: want an integer 0..%ld\n", argv[2],
		        cli_num_words(r), LONG_MAX - WARMUP);
		return 2;
	}
	long pairs = (long)n;
	if (timely)
		tmo_testing_timely_timer(1);
	if (strcmp(argv[1], "-") == 0) {
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
	long bad = loop(e, &t, WARMUP) + loop(e, &t, pairs);
	tmo_destroy(&e);
	if (bad != 0)
		fprintf(stderr, "tmo-seedloop: %ld unexpected results\n", bad);
	return bad != 0;
}
