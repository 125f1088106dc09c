#include "contract_test.h"

#include <stdatomic.h>
#include <stdio.h>

#include "check.h"

static atomic_llong eagain_retries; /* ct_arm's second asks, for ct_end's note */

struct tmo *ct_new_engine(void)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	CHECK_EQ(rc, 0);
	CHECK(e != NULL);
	return e;
}

void ct_destroy_engine(struct tmo **e)
{
	CHECK_EQ(tmo_destroy(e), 0);
	CHECK(*e == NULL);
}

int ct_is_resolved(int rc)
{
	return rc == TMO_CANCEL_FIRED || rc == TMO_CANCEL_WAITED;
}

int ct_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb, void *arg)
{
	int rc = tmo_arm(e, t, timeout_ns, cb, arg);
	int64_t end = rc == TMO_EAGAIN ? tmo_now_ns() + LIVENESS : 0;
	while (rc == TMO_EAGAIN && tmo_now_ns() < end) {
		atomic_fetch_add(&eagain_retries, 1);
		et_sleep_ns(100 * US);
		rc = tmo_arm(e, t, timeout_ns, cb, arg);
	}
	return rc;
}

void ct_begin(int argc, char **argv, const char *test)
{
	et_init(argc, argv, test);
	et_cases_from_args(argc, argv);
}

int ct_end(void)
{
	if (atomic_load(&eagain_retries))
		printf("note: arms refused with TMO_EAGAIN (the engine's flow control) were asked "
		       "again %lld times\n",
		       (long long)atomic_load(&eagain_retries));
	return TEST_EXIT();
}
