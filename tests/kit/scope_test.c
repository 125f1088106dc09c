#include "scope_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine_test.h"
#include "tmo/testing.h"

int64_t sc_since(int64_t t0) { return tmo_now_ns() - t0; }

intptr_t sc_sleep_then(void *arg)
{
	tmo_sleep(*(int64_t *)arg);
	return 7;
}

static int64_t allocs0; /* the library's allocations before sc_begin's create */

void sc_begin(int argc, char **argv, const char *test, struct tmo **eng)
{
	et_init(argc, argv, test);
	et_cases_from_args(argc, argv);
	allocs0 = tmo_testing_live_allocs();
	int rc = tmo_create_ops(et_ops, NULL, eng); /* a loaded engine has no registry name */
	if (rc != 0) {
		fprintf(stderr, "engine %s: %s\n", et_name, tmo_strerror(rc));
		exit(1);
	}
}

int sc_end(struct tmo **eng)
{
	tmo_destroy(eng);
	return et_main_end(allocs0);
}
