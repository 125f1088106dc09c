#include "engine_test.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *et_name;
const struct tmo_engine_ops *et_ops;
const struct tmo_engine_ops *const *et_extra_engines;
static uint64_t et_seed = 0x7107c0ffee5eedULL;
static double et_scale = 1.0;

void et_init(int argc, char **argv, const char *test)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s ENGINE\nengines:", argv[0]);
		for (const struct tmo_engine_ops *const *e = tmo_engines(); *e; e++)
			fprintf(stderr, " %s", (*e)->name);
		fprintf(stderr, "\n");
		exit(2);
	}
	et_name = argv[1];
	et_ops = tmo_engine_find(et_name);
	for (const struct tmo_engine_ops *const *x = et_extra_engines; et_ops == NULL && x && *x;
	     x++)
		if (strcmp((*x)->name, et_name) == 0)
			et_ops = *x;
	if (et_ops == NULL) {
		fprintf(stderr, "%s: no engine named '%s' in the registry\n", test, et_name);
		exit(2);
	}
	const char *s = getenv("TMO_TEST_SCALE");
	if (s && *s) {
		double v = strtod(s, NULL);
		if (v > 0 && v <= 1)
			et_scale = v;
	}
	s = getenv("TMO_TEST_SEED");
	if (s && *s)
		et_seed = strtoull(s, NULL, 0);
	printf("%s on engine '%s': caps 0x%x, resolution %lld ns, scale %.3g, seed 0x%llx\n", test,
	       et_name, et_ops->caps, (long long)et_ops->resolution_ns, et_scale,
	       (unsigned long long)et_seed);
	fflush(stdout);
}

long et_scaled(long n, long min)
{
	long v = (long)((double)n * et_scale);
	return v < min ? min : v;
}

int et_thread_per_timer(void) { return (et_ops->caps & TMO_CAP_THREAD_PER_TIMER) != 0; }

void et_sleep_ns(int64_t ns)
{
	if (ns <= 0)
		return;
	struct timespec ts = {(time_t)(ns / TMO_NSEC_PER_SEC), (long)(ns % TMO_NSEC_PER_SEC)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int et_wait_ge(atomic_llong *v, long long target, int64_t timeout_ns)
{
	int64_t end = tmo_now_ns() + timeout_ns;
	for (;;) {
		if (atomic_load(v) >= target)
			return 1;
		if (tmo_now_ns() > end)
			return atomic_load(v) >= target;
		et_sleep_ns(100 * TMO_NSEC_PER_USEC);
	}
}

static atomic_llong warm_fired;
static void warm_cb(struct tmo_timer *t, void *arg) { atomic_fetch_add(&warm_fired, 1); }

int et_warm_up(void)
{
	struct tmo *e = NULL;
	int rc = tmo_create_ops(et_ops, NULL, &e);
	if (rc != 0)
		return rc;
	struct tmo_timer t = TMO_TIMER_INIT;
	if (tmo_arm(e, &t, 0, warm_cb, NULL) == 0) {
		et_wait_ge(&warm_fired, 1, TMO_NSEC_PER_SEC);
		tmo_cancel(e, &t);
	}
	tmo_destroy(&e);
	et_sleep_ns(20 * TMO_NSEC_PER_MSEC);
	return 0;
}

int et_thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int et_wait_thread_count(int want, int64_t timeout_ns)
{
	int64_t end = tmo_now_ns() + timeout_ns;
	int n;
	while ((n = et_thread_count()) != want && tmo_now_ns() < end)
		et_sleep_ns(TMO_NSEC_PER_MSEC);
	return n;
}

int et_kernel_timer_count(void)
{
	FILE *f = fopen("/proc/self/timers", "r");
	if (!f)
		return -1;
	char line[256];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strncmp(line, "ID:", 3) == 0;
	fclose(f);
	return n;
}

int et_sigq_full(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	long used = 0, limit = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "SigQ: %ld/%ld", &used, &limit) == 2)
			break;
	fclose(f);
	/* a 1% margin: other processes' usage moves while we look */
	return limit > 0 && used >= limit - limit / 100;
}

void et_rng_seed(struct et_rng *r, uint64_t stream)
{
	r->s = et_seed ^ (stream * 0x9e3779b97f4a7c15ULL);
	if (r->s == 0)
		r->s = 1;
	for (int i = 0; i < 4; i++)
		et_rand(r);
}

uint64_t et_rand(struct et_rng *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

uint64_t et_below(struct et_rng *r, uint64_t n) { return n ? et_rand(r) % n : 0; }

void et_shuffle(struct et_rng *r, int *idx, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)et_below(r, (uint64_t)i + 1);
		int t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
}

const char *et_result_name(int rc)
{
	switch (rc) {
	case TMO_CANCEL_PREVENTED:
		return "PREVENTED";
	case TMO_CANCEL_FIRED:
		return "FIRED";
	case TMO_CANCEL_WAITED:
		return "WAITED";
	case TMO_CANCEL_SELF:
		return "SELF";
	default:
		return tmo_errname(rc);
	}
}
