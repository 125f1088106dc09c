/*
 * What the scenario kit and the test kit (tests/kit/engine_test.h) share:
 * the one PRNG and the one TMO_TEST_SCALE reader.  Header-only and free of
 * the library's headers, so every program can include it: the scenarios
 * (through util.h), the tests, and the fuzz replays, which are built
 * without either kit (tests/fuzz/replay.c).  The tests reach it by its
 * path from tests/; the scenarios are the lower folder of the two (the
 * tests run them), so it lives here.
 */
#ifndef SK_SHARED_H
#define SK_SHARED_H

#include <stdint.h>
#include <stdlib.h>

/* ---- the PRNG ------------------------------------------------------------- */

/* splitmix64 (Steele, Lea, Flood): deterministic from its seed, so a run
 * or a failure replays from the seed it printed (a scenario's --seed, a
 * test's TMO_TEST_SEED).  Recorded seeds and the fuzz replays' random
 * inputs (this sequence from seed 1) depend on it: changing the generator
 * changes what every seed means. */
struct sk_rng {
	uint64_t s;
};

static inline void sk_rng_init(struct sk_rng *r, uint64_t seed) { r->s = seed; }

static inline uint64_t sk_rand(struct sk_rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Uniform in [0, n), 0 when n is 0; the modulo bias is below 2^-40 for the
 * n used (under 2^24). */
static inline uint64_t sk_below(struct sk_rng *r, uint64_t n) { return n ? sk_rand(r) % n : 0; }

/* Fisher-Yates shuffle of idx[0..n). */
static inline void sk_shuffle(struct sk_rng *r, int *idx, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)sk_below(r, (uint64_t)i + 1);
		int t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
}

/* ---- the size scale ------------------------------------------------------- */

/* TMO_TEST_SCALE, a factor in (0, 1]: 1 when unset, empty, unparsable or
 * out of range.  The sanitizer steps of scripts/check set it (a sanitized
 * run is 5-15x slower); scenarios and tests shrink their sizes by it, and
 * report the scaled sizes, never the nominal ones. */
static inline double sk_scale(void)
{
	const char *s = getenv("TMO_TEST_SCALE");
	double v = s != NULL && *s != '\0' ? strtod(s, NULL) : 1.0;
	return v > 0 && v <= 1 ? v : 1.0;
}

/* n scaled by TMO_TEST_SCALE, at least 1 (the tests' et_scaled takes its
 * own floor). */
static inline uint64_t sk_scaled(uint64_t n)
{
	double v = (double)n * sk_scale();
	return v < 1 ? 1 : (uint64_t)v;
}

#endif
