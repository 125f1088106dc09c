/*
 * The reference list the data-structure models share (the fuzz targets
 * tests/fuzz/heap.c and wheel.c, and unit/wheel.c through wheel_model.h):
 * the live timers in the order they must fire, and how a mismatch with the
 * structure under test is reported.
 *
 * A model's timers are indexes 0 .. MODEL_MAX-1.  Entries are sorted by
 * (never, due): among equal ones, in insertion order (the heap promises arm
 * order for equal deadlines; the wheel model orders by `due` alone).
 */
#ifndef TMO_FUZZ_MODEL_H
#define TMO_FUZZ_MODEL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MAX 256

struct model_entry {
	int idx;
	int never;   /* due beyond INT64_MAX: no advance can reach it */
	int64_t due; /* INT64_MAX when never */
	int64_t key; /* the order it must come back in (wheel_model.h) */
};

struct model {
	int live[MODEL_MAX];
	struct model_entry sorted[MODEL_MAX]; /* the live ones, see the top */
	int n;
	long mismatches;
	/* Called at each mismatch, after it is counted: a fuzz target aborts
	 * (fuzz_model_mismatch, input.h), a unit test prints and goes on. */
	void (*on_mismatch)(const struct model *m, const char *file, int line, const char *msg);
};

__attribute__((format(printf, 4, 5))) static inline void
model_fail(struct model *m, const char *file, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	m->mismatches++;
	m->on_mismatch(m, file, line, msg);
}

/* An expression: cond, and a mismatch reported (printf-style) when it is 0. */
#define MODEL_CHECK(m, cond, ...)                                               \
	((cond) ? 1 : (model_fail((m), __FILE__, __LINE__, __VA_ARGS__), 0))

static inline int model_before(const struct model_entry *a, const struct model_entry *b)
{
	return a->never != b->never ? b->never : a->due < b->due;
}

/* Timer e.idx is live, after every live one not after it. */
static inline void model_insert(struct model *m, struct model_entry e)
{
	int i = m->n;
	while (i > 0 && model_before(&e, &m->sorted[i - 1])) {
		m->sorted[i] = m->sorted[i - 1];
		i--;
	}
	m->sorted[i] = e;
	m->n++;
	m->live[e.idx] = 1;
}

/* Where live timer idx stands in sorted[], -1 if it is not live. */
static inline int model_find(const struct model *m, int idx)
{
	for (int i = 0; i < m->n; i++)
		if (m->sorted[i].idx == idx)
			return i;
	return -1;
}

/* sorted[i] fired or was cancelled: no longer live. */
static inline void model_remove_at(struct model *m, int i)
{
	m->live[m->sorted[i].idx] = 0;
	memmove(&m->sorted[i], &m->sorted[i + 1], (size_t)(m->n - i - 1) * sizeof m->sorted[0]);
	m->n--;
}

/* Whether timer idx is live, once checked against the structure's own
 * answer (`contains`: its *_contains() of the timer's node). */
static inline int model_armed(struct model *m, int idx, int contains)
{
	MODEL_CHECK(m, !!contains == m->live[idx], "node %d: contains %d, model live %d", idx,
	            contains, m->live[idx]);
	return m->live[idx];
}

/* Live timer idx was cancelled. */
static inline void model_drop(struct model *m, int idx)
{
	model_remove_at(m, model_find(m, idx));
}

#endif
