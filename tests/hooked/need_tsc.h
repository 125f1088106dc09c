/*
 * The hooked tests that judge how arms are dated from the counter (the
 * TSC: src/lf/clock.c, Dating) and have nothing to judge where arms read
 * the clock instead, or, for need_fast_way, where no arm goes the fast
 * way.  One place decides: the process's first lock-free engine
 * (clock.c, once_init).
 */
#ifndef TMO_TEST_HOOKED_NEED_TSC_H
#define TMO_TEST_HOOKED_NEED_TSC_H

#include <stdatomic.h>
#include <stdio.h>

#include "lf/clock.h"
#include "lf/lf.h"
#include "tmo/tmo.h"

/* Make and destroy a first `engine`: it decides counter or clock, and
 * *fence is 1 where its timer thread polls every tick (LF_TW_FENCE: no
 * membarrier, or TSan), so that no arm goes the fast way (src/lf/arm.c,
 * tmo__lf_arm).  Returns -1 where arms stamp the counter (the test goes
 * on); else the test's exit status: 77 after a "SKIPPED:" line that says
 * why (`why`: what `test` then lacks), 1 when no engine could be made. */
static inline int need_tsc_fence(const char *test, const char *engine, const char *why,
                                 int *fence)
{
	struct tmo *probe = NULL;
	if (tmo_create(engine, NULL, &probe) != 0) {
		fprintf(stderr, "%s: cannot create the %s engine\n", test, engine);
		return 1;
	}
	*fence = (atomic_load(&probe->tickw) & LF_TW_FENCE) != 0;
	if (tmo_destroy(&probe) != 0) {
		fprintf(stderr, "%s: cannot destroy the %s engine\n", test, engine);
		return 1;
	}
	if (!tmo__lf_use_tsc) {
		printf("SKIPPED: arms stamp with the clock here (no usable counter, or "
		       "TMO_LF_CLOCK=1): %s\n", why);
		return 77;
	}
	return -1;
}

/* need_tsc_fence for the tests that judge only the dating. */
static inline int need_tsc(const char *test, const char *engine, const char *why)
{
	int fence;
	return need_tsc_fence(test, engine, why, &fence);
}

/* need_tsc, and the fast way open: skipped too where LF_TW_FENCE. */
static inline int need_fast_way(const char *test, const char *engine, const char *why)
{
	int fence, rc = need_tsc_fence(test, engine, why, &fence);
	if (rc < 0 && fence) {
		printf("SKIPPED: LF_TW_FENCE (no membarrier, or TSan): %s\n", why);
		return 77;
	}
	return rc;
}

#endif
