/* A test's cases as a table, run in order: each reported as check.h's RUN
 * does ("PASS name" or "FAIL name"), and argv[2], when given, a filter:
 * only the cases whose names contain it run. */
#ifndef TMO_TEST_CASES_H
#define TMO_TEST_CASES_H

/* One case: a test function and its name. */
struct et_case {
	const char *name;
	void (*fn)(void);
};

/* The table entry of test function fn. */
#define ET_CASE(fn) {#fn, fn}

/* How many entries a table (an array, not a pointer) has. */
#define ET_NCASES(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* Run the n cases of the table in order, argv[2] (if argc > 2) filtering. */
void et_run_cases(int argc, char **argv, const struct et_case *cases, int n);

#endif
