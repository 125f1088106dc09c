#include "cases.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

void et_run_cases(int argc, char **argv, const struct et_case *cases, int n)
{
	const char *only = argc > 2 ? argv[2] : NULL;
	for (int i = 0; i < n; i++) {
		if (only != NULL && strstr(cases[i].name, only) == NULL)
			continue;
		int before = tmo_test_failures;
		cases[i].fn();
		printf("%s %s\n", tmo_test_failures == before ? "PASS" : "FAIL", cases[i].name);
		fflush(stdout);
	}
}
