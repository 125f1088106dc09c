/*
 * Shared by the libFuzzer targets (tests/fuzz_*.c): a byte reader that
 * decodes a fuzzer's input into operations, and the failure report.
 *
 * Every read past the end returns 0, so any byte string is a valid program;
 * the op loop stops when the input is used up.
 */
#ifndef TMO_FUZZ_INPUT_H
#define TMO_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fuzz_in {
	const uint8_t *p;
	size_t n, pos;
};

static inline int fuzz_more(const struct fuzz_in *in) { return in->pos < in->n; }

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	return in->pos < in->n ? in->p[in->pos++] : 0;
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
	uint16_t lo = fuzz_u8(in);
	return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

static inline int64_t fuzz_sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static inline int64_t fuzz_sat_mul(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

/* A signed distance in ns, shaped for timer structures of resolution r:
 * tiny raw values, exact multiples of r and their neighbours (tick
 * boundaries), values spread over 2^0 .. 2^61 ticks (every wheel level and
 * beyond the top), and negative values (deadlines in the past). */
static inline int64_t fuzz_delta(struct fuzz_in *in, int64_t r)
{
	uint8_t s = fuzz_u8(in);
	unsigned low = s & 63;
	switch (s >> 6) {
	case 0:
		return (int64_t)low;
	case 1: {
		int64_t off = (int64_t)(fuzz_u8(in) % 3) - 1;
		return fuzz_sat_add(fuzz_sat_mul((int64_t)low, r), off);
	}
	case 2: {
		int64_t ticks = (int64_t)(((uint64_t)fuzz_u16(in) + 1) << (low % 46));
		return fuzz_sat_add(fuzz_sat_mul(ticks, r), (int64_t)fuzz_u8(in) - 128);
	}
	default:
		return -fuzz_sat_add(fuzz_sat_mul((int64_t)low, r), (int64_t)fuzz_u8(in));
	}
}

/* A mismatch with the model: say what, then abort() so libFuzzer (and the
 * replay runner) records the input. */
#define FUZZ_FAIL(...)                                                          \
	do {                                                                        \
		fprintf(stderr, "fuzz mismatch (%s:%d): ", __FILE__, __LINE__);         \
		fprintf(stderr, __VA_ARGS__);                                           \
		fputc('\n', stderr);                                                    \
		abort();                                                                \
	} while (0)

#define FUZZ_CHECK(cond, ...)                                                   \
	do {                                                                        \
		if (!(cond))                                                            \
			FUZZ_FAIL(__VA_ARGS__);                                             \
	} while (0)

/* A model's on_mismatch (model.h) in a fuzz target: FUZZ_FAIL's report,
 * from where the model's check stands, then abort(). */
struct model;
static inline void fuzz_model_mismatch(const struct model *m, const char *file, int line,
                                       const char *msg)
{
	(void)m;
	fprintf(stderr, "fuzz mismatch (%s:%d): %s\n", file, line, msg);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
