/*
 * The reference model of the timing wheel (src/ds/wheel.h) on a virtual
 * clock, shared by the fuzz target (tests/fuzz/wheel.c: ops from bytes,
 * the first mismatch aborts) and the unit test (tests/unit/wheel.c: ops
 * from a seeded PRNG, mismatches counted).
 *
 * With r = resolution and origin = the init time, a timer with deadline d
 * is due at
 *
 *   due(d) = origin + ceil((d - origin) / r) * r   (origin when d <= origin)
 *
 * the first tick boundary at or after d.  With a clock that never goes
 * back, advance(now) must return exactly the armed timers with due <= now
 * (so none early, since d <= due, and none more than r - 1 late), in
 * non-decreasing order of their key: due, or for a timer armed after its
 * tick was processed, the start of the last processed tick.  count() and
 * contains() must agree with the model; next_expiry() must be INT64_MAX
 * when empty, and never later than the next due time.  With a bound
 * (max), advance_max(now, max) returns at most max of them, the same way;
 * one that returns fewer leaves none due.
 */
#ifndef TMO_FUZZ_WHEEL_MODEL_H
#define TMO_FUZZ_WHEEL_MODEL_H

#include <string.h>

#include "ds/wheel.h"
#include "model.h"

/* The timers' nodes lie in TMO_WHEEL_WAYS regions of memory, node i in
 * region i % TMO_WHEEL_WAYS, so that a slot's nodes fill all its ways
 * (src/ds/wheel.c, Ways: a node's way is the region it lies in).  Only the
 * nodes' lines are touched. */
#define WM_REGION ((uintptr_t)1 << TMO_WHEEL_WAY_SHIFT)
static unsigned char wm_spread[(TMO_WHEEL_WAYS + 1) * WM_REGION];

static inline struct tmo_wheel_node *wm_slot_of(int i)
{
	uintptr_t base = ((uintptr_t)wm_spread + WM_REGION - 1) & ~(WM_REGION - 1);
	return (struct tmo_wheel_node *)(base + (uintptr_t)(i % TMO_WHEEL_WAYS) * WM_REGION) +
	       i / TMO_WHEEL_WAYS;
}

/* node i's index, -1 for a node that is not one of them */
static inline int wm_idx_of(const struct tmo_wheel_node *n)
{
	for (int j = 0; j < TMO_WHEEL_WAYS; j++) {
		const struct tmo_wheel_node *first = wm_slot_of(j);
		if (n >= first && n < first + (MODEL_MAX + TMO_WHEEL_WAYS - 1) / TMO_WHEEL_WAYS)
			return (int)(n - first) * TMO_WHEEL_WAYS + j;
	}
	return -1;
}

struct wheel_model {
	struct model m; /* the armed timers by due time */
	struct tmo_wheel w;
	struct tmo_wheel_node *node[MODEL_MAX]; /* wm_slot_of(i) */
	int nodes; /* node[0 .. nodes-1] are the driver's timers */
	int64_t origin, r, now;
	/* advances hand out at most max nodes (SIZE_MAX: advance(), else
	 * advance_max()); an advance that returns max may leave due ones */
	size_t max;
};

/* A fresh wheel of resolution r at `origin`, `nodes` timers, mismatches
 * to `on_mismatch` (model.h).  Returns tmo__wheel_init's answer. */
static inline int wm_init(struct wheel_model *f, int64_t r, int64_t origin, int nodes,
                          void (*on_mismatch)(const struct model *, const char *, int,
                                              const char *))
{
	memset(f, 0, sizeof *f);
	f->m.on_mismatch = on_mismatch;
	f->nodes = nodes;
	f->r = r;
	f->origin = origin;
	f->now = origin;
	f->max = SIZE_MAX;
	for (int i = 0; i < nodes; i++) {
		f->node[i] = wm_slot_of(i);
		tmo__wheel_node_init(f->node[i]);
	}
	return tmo__wheel_init(&f->w, r, origin);
}

/* due(d), see the top; *never when it lies beyond INT64_MAX. */
static inline int64_t wm_due(const struct wheel_model *f, int64_t d, int *never)
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

/* The earliest due time of an armed timer; INT64_MAX when none can come. */
static inline int64_t wm_next_due(const struct wheel_model *f)
{
	return f->m.n > 0 ? f->m.sorted[0].due : INT64_MAX;
}

static inline void wm_cancel(struct wheel_model *f, int idx)
{
	if (!model_armed(&f->m, idx, tmo__wheel_contains(f->node[idx])))
		return;
	tmo__wheel_del(&f->w, f->node[idx]);
	model_drop(&f->m, idx);
}

/* Arm idx: with tmo__wheel_add, or with tmo__wheel_add_near and `near`
 * when use_near (any near gives the same wheel). */
static inline void wm_arm_with(struct wheel_model *f, int idx, int64_t deadline, int use_near,
                               int64_t near)
{
	wm_cancel(f, idx); /* re-arm: like an engine's reschedule */
	struct model_entry e = {.idx = idx};
	e.due = wm_due(f, deadline, &e.never);
	/* Due already: the wheel hands it out at the next advance, counted as
	 * due at the start of the tick f->now lies in (the last processed). */
	e.key = e.due <= f->now
	            ? f->now - (int64_t)(((uint64_t)f->now - (uint64_t)f->origin) % (uint64_t)f->r)
	            : e.due;
	if (use_near)
		tmo__wheel_add_near(&f->w, f->node[idx], deadline, near);
	else
		tmo__wheel_add(&f->w, f->node[idx], deadline);
	model_insert(&f->m, e);
}

static inline void wm_arm(struct wheel_model *f, int idx, int64_t deadline)
{
	wm_arm_with(f, idx, deadline, 0, 0);
}

/* Advance the wheel and the model to `now` and compare what came back.
 * Returns how many the wheel said it returned. */
static inline size_t wm_advance(struct wheel_model *f, int64_t now)
{
	struct model *m = &f->m;
	if (now < f->now)
		now = f->now; /* the virtual clock never goes back */
	f->now = now;
	struct tmo_wheel_list due = {NULL};
	size_t k = f->max == SIZE_MAX ? tmo__wheel_advance(&f->w, now, &due)
	                              : tmo__wheel_advance_max(&f->w, now, f->max, &due);
	size_t seen = 0;
	int64_t prev_key = INT64_MIN;
	for (struct tmo_wheel_node *n = due.head; n; n = n->next) {
		int idx = wm_idx_of(n);
		seen++;
		if (!MODEL_CHECK(m, idx >= 0 && idx < f->nodes, "a node that is not ours came back") ||
		    !MODEL_CHECK(m, m->live[idx], "node %d fired but was not armed", idx))
			continue;
		MODEL_CHECK(m, !tmo__wheel_contains(n), "node %d fired but is still in the wheel", idx);
		int i = model_find(m, idx);
		struct model_entry e = m->sorted[i];
		MODEL_CHECK(m, n->deadline <= now, "early: deadline %lld fired at now %lld",
		            (long long)n->deadline, (long long)now);
		MODEL_CHECK(m, !e.never && e.due <= now,
		            "node %d fired before its tick %lld at now %lld", idx, (long long)e.due,
		            (long long)now);
		/* A bounded advance leaves the rest of a tick behind what was
		 * added late: the order is kept among timers filed in time. */
		if (f->max == SIZE_MAX || e.key == e.due) {
			MODEL_CHECK(m, e.key >= prev_key, "order: key %lld after %lld",
			            (long long)e.key, (long long)prev_key);
			prev_key = e.key;
		}
		model_remove_at(m, i);
	}
	MODEL_CHECK(m, seen == k, "advance returned %zu, listed %zu", k, seen);
	MODEL_CHECK(m, k <= f->max, "advance returned %zu, more than its max %zu", k, f->max);
	if (k == f->max)
		return k; /* more may be due: the next advance hands it out */
	/* The model is sorted: anything still due would be at its head. */
	MODEL_CHECK(m, m->n == 0 || m->sorted[0].never || m->sorted[0].due > now,
	            "late: node %d due %lld (deadline %lld) not fired at now %lld (r %lld)",
	            m->sorted[0].idx, (long long)m->sorted[0].due,
	            (long long)f->node[m->sorted[0].idx]->deadline, (long long)now, (long long)f->r);
	return k;
}

/* count(), contains() of every timer, next_expiry() against the model. */
static inline void wm_check_state(struct wheel_model *f)
{
	struct model *m = &f->m;
	MODEL_CHECK(m, tmo__wheel_count(&f->w) == (uint64_t)m->n, "count %llu, model %d",
	            (unsigned long long)tmo__wheel_count(&f->w), m->n);
	for (int i = 0; i < f->nodes; i++)
		MODEL_CHECK(m, !!tmo__wheel_contains(f->node[i]) == m->live[i],
		            "node %d: contains %d, model live %d", i, tmo__wheel_contains(f->node[i]),
		            m->live[i]);
	int64_t ne = tmo__wheel_next_expiry(&f->w);
	if (m->n == 0) {
		MODEL_CHECK(m, ne == INT64_MAX, "empty wheel, next_expiry %lld", (long long)ne);
		return;
	}
	int64_t next = wm_next_due(f); /* INT64_MAX when never */
	if (next <= f->now)
		MODEL_CHECK(m, ne <= f->now, "a timer is due, next_expiry %lld > now %lld",
		            (long long)ne, (long long)f->now);
	else
		MODEL_CHECK(m, ne <= next, "next_expiry %lld later than next due %lld", (long long)ne,
		            (long long)next);
}

#endif
