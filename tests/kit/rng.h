/* The tests' one PRNG: splitmix64 (Steele, Lea, Flood), deterministic from
 * its seed, so a failure replays from the seed it printed.  Header-only:
 * the fuzz replays, built without the kit library, use it too, and their
 * random inputs are this sequence from seed 1 (changing the generator
 * changes which inputs `--random N` replays). */
#ifndef TMO_TEST_RNG_H
#define TMO_TEST_RNG_H

#include <stdint.h>

struct et_rng {
	uint64_t s;
};

static inline void et_rng_init(struct et_rng *r, uint64_t seed) { r->s = seed; }

static inline uint64_t et_rand(struct et_rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Uniform in [0, n) (modulo bias ignored: n is small); 0 when n is 0. */
static inline uint64_t et_below(struct et_rng *r, uint64_t n) { return n ? et_rand(r) % n : 0; }

/* Fisher-Yates shuffle of idx[0..n). */
static inline void et_shuffle(struct et_rng *r, int *idx, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = (int)et_below(r, (uint64_t)i + 1);
		int t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
}

#endif
