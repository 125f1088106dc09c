/*
 * libFuzzer target for the timing wheel (src/ds/wheel.h).
 *
 * The input is a program on a virtual clock: a header picks the resolution,
 * the origin and the bound of each advance (none, or 1, 2, 7 nodes), then each op byte arms a timer at now + delta (with
 * tmo__wheel_add, or tmo__wheel_add_near and a near time a second delta
 * before or after its deadline), cancels
 * one, or advances the clock (by a delta, to next_expiry(), or to the next
 * due time of the model, or one before it).  The reference model
 * (wheel_model.h, which unit/wheel.c drives too) says what must fire at
 * each advance, and when; after each op the wheel's state must agree with
 * it.  Any mismatch aborts.
 */
#include "input.h"
#include "wheel_model.h"

#define NODES 64

/* Resolutions: tiny and odd, powers of two, the engines' 1 ms, a large
 * prime, 2^40 + 1 (a deadline spans few ticks).  Origins: around zero, far
 * negative (INT64_MIN: tick arithmetic spans all 64 bits), near the end. */
static const int64_t resolutions[8] = {
	1, 3, 7, 64, 4096, 1000000, 999999937, (INT64_C(1) << 40) + 1,
};
/* advance() or advance_max() with these bounds (the header's top bits). */
static const size_t maxes[4] = {SIZE_MAX, 1, 2, 7};
static const int64_t origins[8] = {
	0, 1, -1, -123456789, INT64_C(1000000000000), INT64_MIN, INT64_MAX / 2,
	INT64_MAX - (INT64_C(1) << 50),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wheel_model f;
	struct fuzz_in in = {data, size, 0};
	uint8_t cfg = fuzz_u8(&in);

	FUZZ_CHECK(wm_init(&f, resolutions[cfg & 7], origins[(cfg >> 3) & 7], NODES,
	                   fuzz_model_mismatch) == 0,
	           "init failed");
	f.max = maxes[cfg >> 6];

	while (fuzz_more(&in)) {
		uint8_t op = fuzz_u8(&in);
		int idx = op % NODES; /* low bits: which timer; high bits: what */
		switch (op >> 6) {
		case 0:
			wm_arm(&f, idx, fuzz_sat_add(f.now, fuzz_delta(&in, f.r)));
			break;
		case 1: {
			int64_t d = fuzz_sat_add(f.now, fuzz_delta(&in, f.r));
			wm_arm_with(&f, idx, d, 1, fuzz_sat_add(d, fuzz_delta(&in, f.r)));
			break;
		}
		case 2:
			wm_cancel(&f, idx);
			break;
		default:
			switch (idx & 3) {
			case 0: {
				int64_t d = fuzz_delta(&in, f.r);
				wm_advance(&f, fuzz_sat_add(f.now, d < 0 ? -d : d));
				break;
			}
			case 1:
				wm_advance(&f, tmo__wheel_next_expiry(&f.w));
				break;
			case 2: /* exactly the next due time, or one before it */
				if (f.m.n > 0 && !f.m.sorted[0].never)
					wm_advance(&f, fuzz_sat_add(f.m.sorted[0].due, -((idx >> 2) & 1)));
				break;
			default:
				wm_advance(&f, f.now);
				break;
			}
		}
		wm_check_state(&f);
	}
	/* Drain: at the end of time every timer but the unreachable ones fires. */
	while (wm_advance(&f, INT64_MAX) == f.max)
		;
	wm_check_state(&f);
	for (int i = 0; i < f.m.n; i++)
		FUZZ_CHECK(f.m.sorted[i].never, "node %d never fired", f.m.sorted[i].idx);
	return 0;
}
