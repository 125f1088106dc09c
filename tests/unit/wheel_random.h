/*
 * unit/wheel's random programs: deadlines, clock moves and near times
 * (tmo__wheel_add_near) over every distance that matters, on the kit's
 * seeded RNG.  Included by tests/unit/wheel.c only.
 */
#ifndef TMO_TEST_WHEEL_RANDOM_H
#define TMO_TEST_WHEEL_RANDOM_H

#include <stdint.h>

#include "../fuzz/wheel_model.h"

static struct sk_rng rng;
static uint64_t below(uint64_t n) { return sk_below(&rng, n); }

static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* A deadline spread over every distance that matters: the past, exact tick
 * boundaries and their neighbours, each level, beyond the top level. */
static int64_t random_deadline(const struct wheel_model *m)
{
	int64_t r = m->r, now = m->now;
	switch (below(8)) {
	case 0: return sat_add(now, -(int64_t)below((uint64_t)r * 200)); /* past */
	case 1: return sat_add(now, (int64_t)below((uint64_t)r * 4));
	case 2: { /* a tick boundary, or one either side */
		int never;
		int64_t b = wm_due(m, sat_add(now, (int64_t)below(300) * r), &never);
		return sat_add(b, (int64_t)below(3) - 1);
	}
	case 3: /* within some level: up to 64^L ticks */
		return sat_add(now, (int64_t)below((uint64_t)r << (6 * (1 + below(4)))));
	default: {
		/* log-uniform up to 2^52 ticks: beyond the top level (2^48) */
		unsigned bits = (unsigned)below(53);
		uint64_t ticks = bits ? (UINT64_C(1) << bits) + below(UINT64_C(1) << bits) : 0;
		int64_t span;
		if (__builtin_mul_overflow((int64_t)ticks, r, &span))
			span = INT64_MAX;
		return sat_add(now, span);
	}
	}
}

static int64_t random_now(struct wheel_model *m)
{
	int64_t r = m->r, now = m->now;
	switch (below(7)) {
	case 0: return now;
	case 1: return sat_add(now, (int64_t)below((uint64_t)r * 3));
	case 2: { /* exactly the next due time, or one before */
		int64_t d = wm_next_due(m);
		return d == INT64_MAX ? now : sat_add(d, -(int64_t)below(2));
	}
	case 3: return tmo__wheel_next_expiry(&m->w);
	case 4: { /* a big jump */
		unsigned bits = (unsigned)below(52);
		int64_t span;
		if (__builtin_mul_overflow((int64_t)(UINT64_C(1) << bits), r, &span))
			span = INT64_MAX;
		return sat_add(now, span);
	}
	default: return sat_add(now, (int64_t)below((uint64_t)r * 5000));
	}
}

/* A near time for tmo__wheel_add_near: the deadline, a little before it
 * (the engines' case: most often the same slot), before it by up to a
 * few levels' slots, or after it (a wrong one: placed again). */
static int64_t random_near(const struct wheel_model *m, int64_t d)
{
	uint64_t r = (uint64_t)m->r;
	switch (below(4)) {
	case 0: return d;
	case 1: return sat_add(d, -(int64_t)below(r * 64));
	case 2: return sat_add(d, -(int64_t)below(r << (6 * (1 + below(3)))));
	default: return sat_add(d, (int64_t)below(r * 4096));
	}
}

#endif
