/* Not built: tests/harness/sizes_declared.py must refuse this scenario (the
 * ctest harness/sizes_declared_catches): it reads "count", declares "counts". */
static const struct sk_size bad_sizes[] = {
	{"counts", 10, 1, ""}, {NULL, 0, 0, NULL},
};

static int bad_run(const struct sk_run *run) { return (int)sk_size(run, "count"); }
