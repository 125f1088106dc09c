/*
 * For unit tests of the lock-free core's sleeps and wake-ups (lf_dating,
 * lf_wakeup, lf_lazy): where arms fence (LF_TW_FENCE: no membarrier, TSan,
 * TMO_LF_FENCE=1) the timer thread never sleeps longer than a tick, and
 * what they look for cannot be seen.
 */
#ifndef TMO_TEST_LF_TEST_H
#define TMO_TEST_LF_TEST_H

#include <stdatomic.h>
#include <stdio.h>

#include "check.h"
#include "lf/lf.h"

/* 1 (having said so, with `why` it cannot be seen) where arms fence: the
 * test then exits 77, skipped. */
static inline int lf_test_skip_if_fence(const char *why)
{
	struct tmo *probe = NULL;
	CHECK_EQ(tmo_create("mpsc", NULL, &probe), 0);
	int fence = probe != NULL && (atomic_load(&probe->tickw) & LF_TW_FENCE) != 0;
	if (probe != NULL)
		tmo_destroy(&probe);
	if (fence)
		printf("SKIPPED: arms fence here (LF_TW_FENCE: no membarrier, TSan or "
		       "TMO_LF_FENCE=1): %s\n",
		       why);
	return fence;
}

#endif /* TMO_TEST_LF_TEST_H */
