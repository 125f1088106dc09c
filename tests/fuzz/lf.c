/*
 * libFuzzer target for the lock-free core (src/lf/) behind the mpsc and
 * wheel engines, against a reference model.
 *
 * The input is a program for one engine and 64 timers.  A header byte picks
 * the engine (mpsc or wheel), its resolution, a node cap
 * (tmo_testing_set_node_cap) and how the program ends; then each op arms or
 * cancels a timer from the fuzzer's own thread (T0) or from one of two
 * helper threads (T1, T2: the op is handed over and waited for, so the
 * order stays the program's while another thread's ring, the cross-thread
 * cancel paths and per-thread bases run), or settles, starts or stops the
 * timer thread, or ends a helper thread (its record is detached: its ring
 * spills, and the next thread on that slot adopts the record and its base).
 *
 * Determinism: the timer thread stays parked (tmo_testing_park) while ops run, so
 * nothing fires and nothing is stolen under them; timeouts are either "due"
 * (0 .. 2 ms) or "long" (an hour and more).  A settle unparks it, waits on
 * state -- every due timer fired, two ticks published after the last
 * transit could be resolved -- and parks it again.  A "run" op unparks it
 * while ops go on: due timers then race with cancels, and the model accepts
 * either outcome of each race but resolves it at once from the callback
 * counters (cancel returns only after a callback has returned).
 *
 * The model, per timer: idle, fired, armed long, armed due.  Checked:
 *  - every arm's result (0, TMO_EARMED, TMO_EBADTIMEOUT, TMO_EAGAIN: rule
 *    below) and every cancel's (PREVENTED, FIRED; WAITED only while running;
 *    TMO_ENOTARMED);
 *  - each arm's callback runs exactly once if it was not prevented, never
 *    if it was (or if the arm was refused), never early, on its own timer;
 *    a callback's cancel of its own timer answers TMO_CANCEL_SELF, its
 *    re-arm (long or due) answers 0;
 *  - tmo_stats: pending, fired and cancelled equal the model's (a range
 *    while due timers race);
 *  - the timer's word (lf.h) says pending, fired, cancelled as the model
 *    does, and a pending timer's node is live (its generation, RING, QUEUED
 *    or IN_STRUCT, pointing back at the timer), distinct from every other
 *    pending timer's node and in no free list;
 *  - the pool, whenever parked: every free node (record caches and
 *    spares, the timer thread's cache, depot chains, loose) is in exactly
 *    one list, each list as long as its count; the nodes in use are at
 *    least the pending arms and at most those plus what may still be in
 *    transit (a ring slot's cancelled arm waits for its owner:
 *    LF_RING_SLOTS per attached record; a prevented arm's node waits for
 *    the next round of the timer thread);
 *    and at the end of a draining program (every timer cancelled, helpers
 *    gone, T0's ring passed over, a settle) exactly none: nothing leaked;
 *  - destroy (parked or not) runs no callback of an armed-long timer, and
 *    leaves pending timers' words cancelled; library allocations return to
 *    where they were before create.
 *
 * The TMO_EAGAIN rule (src/lf/pool.c, src/lf/depot.c): an arm takes a
 * node from its thread's cache, else a chain from its spare, else from the
 * depot, else populates pages of the arena up to the cap (or answers
 * TMO_EAGAIN past a soft limit of 4096 nodes plus twice the pending arms,
 * which 65 timers never reach: the audit asserts the pool stays below
 * it), else takes another record's spare.  Parked, nothing else moves
 * nodes, so an arm answers TMO_EAGAIN if and only if
 *     its thread's cache + every spare + the depot
 *         + (cap pages - populated pages) * 64
 * is 0 just before it; the other free nodes are then in other threads'
 * caches (the audit accounts for all of them).  A callback's re-arm is held
 * to the same rule with the timer thread's cache while a settle runs
 * (nothing else arms then).  While running, only an engine with a cap may
 * answer TMO_EAGAIN (frees race with the arm).
 *
 * A record's cache holds at most LF_CACHE_BOUND free nodes and its spare
 * at most LF_SPARE_MAX (a refill keeps one chain and sends the rest of a
 * growth step to its spare, where another thread takes it when nothing
 * else is left: tests/fuzz/corpus/lf/cache_hoard).
 *
 * Any mismatch aborts with "fuzz mismatch".
 *
 * This file is the program: its ops and how it ends.  The model's
 * transitions, settles and per-op checks are lf_model.c, the pool's audit
 * lf_pool.c, the callback and the helper threads lf_threads.c, what they
 * share lf_fuzz.h (tests/fuzz/fuzz.cmake builds them together).
 */
#include "lf_fuzz.h"

struct fz fz;

const char *const state_name[] = {"idle", "fired", "armed-long", "armed-due"};

/* ---- ops --------------------------------------------------------------------------- */

static struct arm *arm_new(int idx, int64_t timeout, int due)
{
	if (fz.n_arms >= fz.arm_limit)
		return NULL;
	struct arm *a = &fz.arms[fz.n_arms++];
	a->timer = idx;
	a->due = due;
	a->timeout = timeout;
	a->self_cancel = 0;
	a->slow = 0;
	a->next = -1;
	a->t_arm = 0;
	atomic_init(&a->expect, -1);
	atomic_init(&a->fired, 0);
	atomic_init(&a->rearm_rc, RC_UNSET);
	return a;
}

/* Decode an arm: spec bits 0-2 the timeout, 3-4 the callback's re-arm,
 * 5 the callback's cancel of its own timer, 6 a slow callback (T0's arms:
 * a helper's spec has 6 bits). */
static struct arm *arm_decode(int idx, unsigned spec, struct fuzz_in *in)
{
	int64_t timeout = 0;
	int due = 1;
	switch (spec & 7) {
	case 0:
	case 5:
		break;
	case 1:
	case 6:
		timeout = ((int64_t)fuzz_u8(in) + 1) * 8 * US;
		break;
	case 2:
	case 7:
		timeout = INT64_C(1) << (42 + fuzz_u8(in) % 20);
		due = 0;
		break;
	case 3:
		timeout = TMO_TIMEOUT_MAX;
		due = 0;
		break;
	default: /* refused before the engine sees it */
		timeout = spec & 8 ? -1 : TMO_TIMEOUT_MAX + 1;
		due = 0;
		break;
	}
	struct arm *a = arm_new(idx, timeout, due);
	if (a == NULL)
		return NULL;
	a->self_cancel = (spec >> 5) & 1;
	a->slow = (spec >> 6) & 1;
	unsigned re = (spec >> 3) & 3;
	if (re == 1 || re == 2) {
		struct arm *r = arm_new(idx, re == 1 ? LONG_NS : 0, re == 2);
		if (r == NULL)
			return NULL;
		a->next = (int)(r - fz.arms);
	}
	return a;
}

static void op_cancel(int thread, int idx)
{
	struct tmodel *m = &fz.m[idx];
	struct call c = {.op = CALL_CANCEL, .idx = idx};
	call_on(thread, &c);
	if (m->uncertain) {
		cancel_raced(idx, c.rc);
		return;
	}
	int want = m->st == T_IDLE ? TMO_ENOTARMED
	           : m->st == T_FIRED ? TMO_CANCEL_FIRED
	                              : TMO_CANCEL_PREVENTED;
	FUZZ_CHECK(c.rc == want, "cancel of timer %d (%s) on T%d returned %s, model %s", idx,
	           state_name[m->st], thread, tmo_errname(c.rc), tmo_errname(want));
	if (want == TMO_CANCEL_PREVENTED)
		prevent(m, &fz.arms[m->cur]);
}

/* Returns 0 when the arm records ran out (the program ends there). */
static int op_arm(int thread, int idx, struct arm *a)
{
	if (a == NULL)
		return 0;
	struct tmodel *m = &fz.m[idx];
	if (m->uncertain) { /* its fire races with this: an arm would be ambiguous */
		decide(a, 0);
		op_cancel(thread, idx);
		return 1;
	}
	struct call c = {.op = CALL_ARM, .idx = idx, .a = a};
	call_on(thread, &c);
	int want;
	if (a->timeout < 0 || a->timeout > TMO_TIMEOUT_MAX)
		want = TMO_EBADTIMEOUT;
	else if (is_pending(m))
		want = TMO_EARMED;
	else if (fz.running)
		want = fz.cap != 0 && c.rc == TMO_EAGAIN ? TMO_EAGAIN : 0;
	else
		want = c.avail > 0 ? 0 : TMO_EAGAIN;
	FUZZ_CHECK(c.rc == want,
	           "arm of timer %d (%s) on T%d returned %s, model %s (%lld free nodes for it)", idx,
	           state_name[m->st], thread, tmo_errname(c.rc), tmo_errname(want),
	           (long long)c.avail);
	if (c.rc != 0) {
		fz.n_eagain += c.rc == TMO_EAGAIN;
		decide(a, 0);
		return 1;
	}
	m->st = a->due ? T_DUE : T_LONG;
	m->cur = (int)(a - fz.arms);
	m->uncertain = fz.running && a->due;
	return 1;
}

/* T0 arms and cancels one timer LF_RING_SLOTS times: its next arms pass
 * over every slot of its ring, and take back a node another thread's
 * cancel left in one.  Returns 1 if every arm got a node, 0 if not, -1
 * when the arm records ran out. */
static int ring_pass(void)
{
	int ok = 1;
	for (int k = 0; k < LF_RING_SLOTS; k++) {
		struct arm *a = arm_new(SCRATCH, LONG_NS, 0);
		if (!op_arm(0, SCRATCH, a))
			return -1;
		ok &= fz.m[SCRATCH].st == T_LONG;
		op_cancel(0, SCRATCH);
	}
	return ok;
}

/* ---- the program -------------------------------------------------------------------------- */

static const int64_t resolutions[4] = {0, 100 * US, 250 * US, 37 * US};
static const uint64_t caps[4] = {0, 64, 128, 256};

enum { END_DRAIN, END_DRAIN2, END_PARKED, END_RUNNING };

static void finish(int how)
{
	fz.arm_limit = MAX_ARMS;
	if (how == END_DRAIN || how == END_DRAIN2) {
		settle();
		for (int i = 0; i < TIMERS; i++)
			if (is_pending(&fz.m[i]))
				op_cancel(0, i);
		for (int k = 0; k < HELPERS; k++)
			helper_exit(k);
		int passed = ring_pass();
		settle();
		check_stats();
		audit(passed == 1);
	} else if (how == END_PARKED) {
		run_stop();
		check_parked();
	} else {
		run_start();
	}
	/* destroy: callbacks may still use fz.e while it runs */
	struct tmo *e = fz.e;
	FUZZ_CHECK(tmo_destroy(&e) == 0, "destroy failed");
	for (int k = 0; k < fz.n_arms; k++) {
		struct arm *a = &fz.arms[k];
		int f = atomic_load(&a->fired), x = atomic_load(&a->expect);
		if (how == END_RUNNING)
			FUZZ_CHECK(f == (x == 1) || (x == -1 && a->due && f == 1),
			           "timer %d: an arm fired %d times by the end of destroy, model %s",
			           a->timer, f, x == 1 ? "once" : x == 0 ? "never" : "at most once");
		else
			FUZZ_CHECK(f == (x == 1), "timer %d: an arm fired %d times across destroy",
			           a->timer, f);
	}
	if (how == END_PARKED)
		for (int i = 0; i < TIMERS; i++)
			if (is_pending(&fz.m[i]))
				FUZZ_CHECK(lf_word_out(atomic_load(lf_timer_word(&fz.t[i]))) ==
				               LF_CANCELLED_OUT,
				           "timer %d: pending at destroy, its word does not say cancelled", i);
	for (int k = 0; k < HELPERS; k++)
		helper_exit(k); /* after destroy: their exit hooks find no engine */
	fz.e = NULL;
}

/* The encoding (tests/fuzz/corpus/make_seeds.py writes it):
 *   header  bit 0 wheel (else mpsc), bits 1-2 resolution, 3-4 node cap,
 *           5-6 the end (drain twice as often as destroy parked / running);
 *   op      bits 0-5 the timer, bits 6-7: 0 arm on T0 (a spec byte follows),
 *           1 cancel on T0, 2 on a helper (a byte: bit 0 which, bit 1
 *           cancel, else bits 2-7 the spec), 3 control (bits 0-2: settle,
 *           run, park, T1 exits, T2 exits, T0's ring pass, checks only);
 *   spec    see arm_decode (short and pow2 timeouts take one more byte). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = {data, size, 0};
	uint8_t cfg = fuzz_u8(&in);
	memset(&fz, 0, sizeof fz);
	fz.arm_limit = MAX_ARMS - 2 * LF_RING_SLOTS;
	fz.wheel = cfg & 1;
	fz.cap = caps[(cfg >> 3) & 3];
	int end = (cfg >> 5) & 3;
	struct tmo_config conf = {.resolution_ns = resolutions[(cfg >> 1) & 3]};
	const struct tmo_engine_ops *ops = tmo_engine_find(fz.wheel ? "wheel" : "mpsc");
	FUZZ_CHECK(ops != NULL, "no %s engine", fz.wheel ? "wheel" : "mpsc");
	fz.res = conf.resolution_ns ? conf.resolution_ns : ops->resolution_ns;

	int64_t allocs = tmo_testing_live_allocs();
	tmo_testing_set_node_cap(fz.cap);
	int rc = tmo_create_ops(ops, &conf, &fz.e);
	tmo_testing_set_node_cap(0);
	if (rc == TMO_EAGAIN) { /* no thread to be had: the machine's shortage, not a finding */
		fprintf(stderr, "fuzz_lf: create: %s, input skipped\n", tmo_errname(rc));
		return 0;
	}
	FUZZ_CHECK(rc == 0, "create failed: %s", tmo_errname(rc));
	FUZZ_CHECK(tmo_testing_park(fz.e, 1) == 0, "park failed");

	for (int ops_n = 0; fuzz_more(&in) && ops_n < MAX_OPS; ops_n++) {
		uint8_t op = fuzz_u8(&in);
		int idx = op & 63; /* low bits: which timer; high bits: what */
		int go = 1;
		switch (op >> 6) {
		case 0:
			go = op_arm(0, idx, arm_decode(idx, fuzz_u8(&in), &in));
			break;
		case 1:
			op_cancel(0, idx);
			break;
		case 2: {
			uint8_t s = fuzz_u8(&in);
			int thread = 1 + (s & 1);
			if (s & 2)
				op_cancel(thread, idx);
			else
				go = op_arm(thread, idx, arm_decode(idx, s >> 2, &in));
			break;
		}
		default:
			switch (idx & 7) {
			case 0:
				if (fz.settles < MAX_SETTLES) {
					fz.settles++;
					settle();
				}
				break;
			case 1:
				run_start();
				break;
			case 2:
				run_stop();
				break;
			case 3:
			case 4:
				helper_exit((idx & 7) - 3);
				break;
			case 5:
				go = ring_pass() >= 0;
				break;
			default:
				break; /* checks only */
			}
		}
		if (!go)
			break;
		if (fz.running)
			check_stats();
		else
			check_parked();
	}
	if (getenv("FUZZ_LF_TRACE") != NULL) {
		struct lf_debug d;
		tmo__lf_debug(fz.e, &d);
		fprintf(stderr, "fuzz_lf: stolen %llu, spilled %llu, filed at once %llu, via inbox %llu, "
		        "pages given back %llu\n",
		        (unsigned long long)d.stolen, (unsigned long long)d.spilled,
		        (unsigned long long)d.direct, (unsigned long long)d.inbox,
		        (unsigned long long)d.trims);
		fprintf(stderr, "fuzz_lf: %s res %lld cap %llu end %d: %zu bytes, %d arm records, "
		        "%llu fired, %llu prevented, %d settles%s; %d refused (TMO_EAGAIN; %d re-arms), %d "
		        "helper calls, %d helper exits, %d cancels raced a fire (%d waited)\n",
		        fz.wheel ? "wheel" : "mpsc", (long long)fz.res, (unsigned long long)fz.cap, end,
		        in.pos, fz.n_arms, (unsigned long long)fz.fired,
		        (unsigned long long)fz.prevented, fz.settles, fz.running ? ", running" : "",
		        fz.n_eagain, atomic_load(&fz.n_rearm_refused), fz.n_helper, fz.n_exits, fz.n_raced,
		        fz.n_waited);
	}
	finish(end);
	FUZZ_CHECK(tmo_testing_live_allocs() == allocs,
	           "library allocations: %lld live after destroy, %lld before create",
	           (long long)tmo_testing_live_allocs(), (long long)allocs);
	return 0;
}
