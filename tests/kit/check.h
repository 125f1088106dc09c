/* Minimal test assertions: print where and what, count failures. */
#ifndef TMO_TEST_CHECK_H
#define TMO_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "cases.h" /* RUN: how a test declares a case */

extern int tmo_test_failures;

#define CHECK(cond)                                                              \
	do {                                                                         \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			tmo_test_failures++;                                                 \
		}                                                                        \
	} while (0)

#define CHECK_EQ(a, b)                                                           \
	do {                                                                         \
		long long va_ = (long long)(a), vb_ = (long long)(b);                     \
		if (va_ != vb_) {                                                        \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n",   \
			        __FILE__, __LINE__, #a, #b, va_, vb_);                       \
			tmo_test_failures++;                                                 \
		}                                                                        \
	} while (0)

/* Exit status for main(): 0 when no check failed. */
#define TEST_EXIT() (tmo_test_failures == 0 ? 0 : 1)

#endif
