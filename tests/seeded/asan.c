/*
 * Seeded memory and UB bugs: proof that the ASan / UBSan / LSan checks CAN
 * fail.  tests/seeded/sanitizers.cmake registers each kind in the asan build only,
 * with WILL_FAIL (the sanitizer must make it exit non-zero) and again
 * requiring the sanitizer's own report.
 *
 *   seeded_asan leak        a heap block made unreachable (LeakSanitizer)
 *   seeded_asan uaf         a read after free (AddressSanitizer)
 *   seeded_asan overflow    signed integer overflow (UBSan, -fno-sanitize-recover)
 *
 * Without the sanitizer each kind runs to completion and exits 0: only the
 * sanitizer sees the bug.  Bad usage exits 2.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* volatile: the compiler may neither drop the allocation nor fold the
 * arithmetic, so the bug survives -O1. */
static void *volatile sink;
static volatile int one = 1;

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "";

	if (strcmp(kind, "leak") == 0) {
		sink = malloc(64);
		sink = NULL; /* the only pointer to the block is gone */
		printf("seeded_asan: leaked 64 bytes\n");
		return 0;
	}
	if (strcmp(kind, "uaf") == 0) {
		char *p = malloc(16);
		if (p == NULL)
			return 1;
		memset(p, 7, 16);
		sink = p;
		free(p);
		int v = ((volatile char *)sink)[one]; /* read after free */
		printf("seeded_asan: read %d after free\n", v);
		return 0;
	}
	if (strcmp(kind, "overflow") == 0) {
		volatile int x = INT_MAX;
		int y = x + one; /* signed overflow: undefined */
		printf("seeded_asan: INT_MAX + 1 = %d\n", y);
		return 0;
	}
	fprintf(stderr, "usage: %s leak|uaf|overflow\n", argv[0]);
	return 2;
}
