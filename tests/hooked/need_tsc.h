/*
 * The hooked tests that judge how arms are dated from the counter (the
 * TSC: src/lf/clock.c, Dating) and have nothing to judge where arms read
 * the clock instead.  One place decides: the process's first lock-free
 * engine (clock.c, once_init).
 */
#ifndef TMO_TEST_HOOKED_NEED_TSC_H
#define TMO_TEST_HOOKED_NEED_TSC_H

#include <stdio.h>

#include "lf/clock.h"
#include "tmo/tmo.h"

/* Make and destroy a first `engine` (it decides counter or clock).
 * Returns -1 where arms stamp the counter (the test goes on); else the
 * test's exit status: 77 after a "SKIPPED:" line that says why (`why`:
 * what `test` then lacks), 1 when no engine could be made. */
static inline int need_tsc(const char *test, const char *engine, const char *why)
{
	struct tmo *probe = NULL;
	if (tmo_create(engine, NULL, &probe) != 0 || tmo_destroy(&probe) != 0) {
		fprintf(stderr, "%s: cannot create the %s engine\n", test, engine);
		return 1;
	}
	if (!tmo__lf_use_tsc) {
		printf("SKIPPED: arms stamp with the clock here (no usable counter, or "
		       "TMO_LF_CLOCK=1): %s\n", why);
		return 77;
	}
	return -1;
}

#endif
