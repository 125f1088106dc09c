/* tests/kit/qemu.h. */
#include "qemu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int et_under_qemu(void)
{
	const char *v = getenv("TMO_UNDER_QEMU");
	return v != NULL && strcmp(v, "1") == 0;
}

void et_skip_under_qemu(const char *why)
{
	if (!et_under_qemu())
		return;
	printf("SKIPPED: under qemu-user: %s\n", why);
	fflush(stdout);
	exit(77);
}
