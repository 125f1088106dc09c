/*
 * libFuzzer target for the timing wheel (src/ds/wheel.h).
 *
 * The input is a program on a virtual clock: a header picks the resolution
 * and the origin, then each op byte arms a timer at now + delta, cancels
 * one, or advances the clock (by a delta, to next_expiry(), or to the next
 * due time of the model, or one before it).  A reference model -- a list
 * of the armed timers sorted by due time -- says what must fire at each
 * advance, and when:
 *
 *   due(d) = origin + ceil((d - origin) / r) * r   (origin when d <= origin)
 *
 * advance(now) must return exactly the armed timers with due <= now (so
 * none early, since d <= due, and none more than r - 1 late), in
 * non-decreasing due order (a timer armed after its tick was processed
 * counts as due at the start of the last processed tick); count() and
 * contains() must agree with the model; next_expiry() must never be later
 * than the next due time.  Any mismatch aborts.
 */
#include <string.h>

#include "input.h"
#include "ds/wheel.h"

#define NODES 64

struct entry {
	int idx;
	int never;   /* due beyond INT64_MAX: no advance can reach it */
	int64_t due; /* INT64_MAX when never */
	int64_t key; /* order key, see the top of the file */
};

struct fuzz_wheel {
	struct tmo_wheel w;
	struct tmo_wheel_node node[NODES];
	int live[NODES];
	struct entry sorted[NODES]; /* live timers by (never, due) */
	int n;
	int64_t origin, r, now;
};

static int64_t due_of(const struct fuzz_wheel *f, int64_t d, int *never)
{
	*never = 0;
	if (d <= f->origin)
		return f->origin;
	uint64_t diff = (uint64_t)d - (uint64_t)f->origin, r = (uint64_t)f->r;
	uint64_t ticks = diff / r + (diff % r != 0), span;
	if (__builtin_mul_overflow(ticks, r, &span) ||
	    span > (uint64_t)INT64_MAX - (uint64_t)f->origin) {
		*never = 1;
		return INT64_MAX;
	}
	return (int64_t)((uint64_t)f->origin + span);
}

static int entry_before(const struct entry *a, const struct entry *b)
{
	return a->never != b->never ? b->never : a->due < b->due;
}

static void model_insert(struct fuzz_wheel *f, struct entry e)
{
	int i = f->n;
	while (i > 0 && entry_before(&e, &f->sorted[i - 1])) {
		f->sorted[i] = f->sorted[i - 1];
		i--;
	}
	f->sorted[i] = e;
	f->n++;
}

static int model_find(const struct fuzz_wheel *f, int idx)
{
	for (int i = 0; i < f->n; i++)
		if (f->sorted[i].idx == idx)
			return i;
	return -1;
}

static void model_remove_at(struct fuzz_wheel *f, int i)
{
	memmove(&f->sorted[i], &f->sorted[i + 1], (size_t)(f->n - i - 1) * sizeof f->sorted[0]);
	f->n--;
}

static void cancel(struct fuzz_wheel *f, int idx)
{
	FUZZ_CHECK(!!tmo_wheel_contains(&f->node[idx]) == f->live[idx],
	           "node %d: contains %d, model live %d", idx,
	           tmo_wheel_contains(&f->node[idx]), f->live[idx]);
	if (!f->live[idx])
		return;
	tmo_wheel_del(&f->w, &f->node[idx]);
	f->live[idx] = 0;
	model_remove_at(f, model_find(f, idx));
}

static void arm(struct fuzz_wheel *f, int idx, int64_t deadline)
{
	cancel(f, idx); /* re-arm: like an engine's reschedule */
	struct entry e = {.idx = idx};
	e.due = due_of(f, deadline, &e.never);
	/* Due already: the wheel hands it out at the next advance, counted as
	 * due at the start of the tick f->now lies in (the last processed). */
	e.key = e.due <= f->now
	            ? f->now - (int64_t)(((uint64_t)f->now - (uint64_t)f->origin) % (uint64_t)f->r)
	            : e.due;
	tmo_wheel_add(&f->w, &f->node[idx], deadline);
	f->live[idx] = 1;
	model_insert(f, e);
}

static void advance(struct fuzz_wheel *f, int64_t now)
{
	if (now < f->now)
		now = f->now; /* the virtual clock never goes back */
	f->now = now;
	struct tmo_wheel_list due = {NULL};
	size_t k = tmo_wheel_advance(&f->w, now, &due), seen = 0;
	int64_t prev_key = INT64_MIN;
	for (struct tmo_wheel_node *n = due.head; n; n = n->next) {
		int idx = (int)(n - f->node);
		FUZZ_CHECK(idx >= 0 && idx < NODES, "a node that is not ours came back");
		FUZZ_CHECK(f->live[idx], "node %d fired but was not armed", idx);
		FUZZ_CHECK(!tmo_wheel_contains(n), "node %d fired but is still in the wheel", idx);
		int i = model_find(f, idx);
		struct entry e = f->sorted[i];
		FUZZ_CHECK(n->deadline <= now, "early: deadline %lld fired at now %lld",
		           (long long)n->deadline, (long long)now);
		FUZZ_CHECK(!e.never && e.due <= now, "node %d fired before its tick %lld at now %lld",
		           idx, (long long)e.due, (long long)now);
		FUZZ_CHECK(e.key >= prev_key, "order: key %lld after %lld", (long long)e.key,
		           (long long)prev_key);
		prev_key = e.key;
		f->live[idx] = 0;
		model_remove_at(f, i);
		seen++;
	}
	FUZZ_CHECK(seen == k, "advance returned %zu, listed %zu", k, seen);
	/* The model is sorted: anything still due would be at its head. */
	FUZZ_CHECK(f->n == 0 || f->sorted[0].never || f->sorted[0].due > now,
	           "late: node %d due %lld (deadline %lld) not fired at now %lld (r %lld)",
	           f->sorted[0].idx, (long long)f->sorted[0].due,
	           (long long)f->node[f->sorted[0].idx].deadline, (long long)now, (long long)f->r);
}

static void check_state(struct fuzz_wheel *f)
{
	FUZZ_CHECK(tmo_wheel_count(&f->w) == (uint64_t)f->n, "count %llu, model %d",
	           (unsigned long long)tmo_wheel_count(&f->w), f->n);
	int64_t ne = tmo_wheel_next_expiry(&f->w);
	if (f->n == 0) {
		FUZZ_CHECK(ne == INT64_MAX, "empty wheel, next_expiry %lld", (long long)ne);
		return;
	}
	int64_t next = f->sorted[0].due; /* INT64_MAX when never */
	if (next <= f->now)
		FUZZ_CHECK(ne <= f->now, "a timer is due, next_expiry %lld > now %lld",
		           (long long)ne, (long long)f->now);
	else
		FUZZ_CHECK(ne <= next, "next_expiry %lld later than next due %lld", (long long)ne,
		           (long long)next);
}

/* Resolutions: tiny and odd, powers of two, the engines' 1 ms, a large
 * prime, 2^40 + 1 (a deadline spans few ticks).  Origins: around zero, far
 * negative (INT64_MIN: tick arithmetic spans all 64 bits), near the end. */
static const int64_t resolutions[8] = {
	1, 3, 7, 64, 4096, 1000000, 999999937, (INT64_C(1) << 40) + 1,
};
static const int64_t origins[8] = {
	0, 1, -1, -123456789, INT64_C(1000000000000), INT64_MIN, INT64_MAX / 2,
	INT64_MAX - (INT64_C(1) << 50),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fuzz_wheel f;
	struct fuzz_in in = {data, size, 0};
	uint8_t cfg = fuzz_u8(&in);

	memset(&f, 0, sizeof f);
	f.r = resolutions[cfg & 7];
	f.origin = origins[(cfg >> 3) & 7];
	f.now = f.origin;
	FUZZ_CHECK(tmo_wheel_init(&f.w, f.r, f.origin) == 0, "init failed");
	for (int i = 0; i < NODES; i++)
		tmo_wheel_node_init(&f.node[i]);

	while (fuzz_more(&in)) {
		uint8_t op = fuzz_u8(&in);
		int idx = op % NODES; /* low bits: which timer; high bits: what */
		switch (op >> 6) {
		case 0:
		case 1:
			arm(&f, idx, fuzz_sat_add(f.now, fuzz_delta(&in, f.r)));
			break;
		case 2:
			cancel(&f, idx);
			break;
		default:
			switch (idx & 3) {
			case 0: {
				int64_t d = fuzz_delta(&in, f.r);
				advance(&f, fuzz_sat_add(f.now, d < 0 ? -d : d));
				break;
			}
			case 1:
				advance(&f, tmo_wheel_next_expiry(&f.w));
				break;
			case 2: /* exactly the next due time, or one before it */
				if (f.n > 0 && !f.sorted[0].never)
					advance(&f, fuzz_sat_add(f.sorted[0].due, -((idx >> 2) & 1)));
				break;
			default:
				advance(&f, f.now);
				break;
			}
		}
		check_state(&f);
	}
	/* Drain: at the end of time every timer but the unreachable ones fires. */
	advance(&f, INT64_MAX);
	check_state(&f);
	for (int i = 0; i < f.n; i++)
		FUZZ_CHECK(f.sorted[i].never, "node %d never fired", f.sorted[i].idx);
	return 0;
}
