/*
 * The lock-free inbox core (see inbox.h for the design).
 *
 * Memory ordering, in one place:
 *  - A node's plain fields (timer, s.q) are published by the inbox push (a
 *    CK CAS, a full barrier on x86 and a builtin CAS under the TSan
 *    override) and read after the timer thread's exchange of the inbox head.
 *  - The node state word is a C11 atomic: cancel and fire CAS it (acq_rel).
 *    A released node keeps its last state (CANCELLED, CANCEL_PENDING, or
 *    FREE stored with release after its callback); the magazine stacks
 *    carry everything the timer thread saw to the next producer.
 *  - The timer's private words are C11 atomics written as a small seqlock:
 *    the outcome word (this timer's arm count << 2 | outcome) is the
 *    sequence; it never repeats for one timer, so a cancel racing a re-arm
 *    from inside the callback never pairs one arm's node with another arm's
 *    generation.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ck_pr.h>
#include <ck_stack.h>
/* ck_ec.h needs <time.h> first under strict C11. */
#include <ck_ec.h>

#include "inbox.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- node state ---------------------------------------------------------- */

enum {
	ST_FREE = 0,
	ST_QUEUED = 1,
	ST_IN_STRUCT = 2,
	ST_FIRING = 3,
	ST_CANCELLED = 4,
	ST_CANCEL_PENDING = 5,
};
#define ST_BITS 3
#define ST_MASK UINT64_C(7)

static inline uint64_t mkst(uint64_t gen, unsigned st) { return gen << ST_BITS | st; }
/* Slabs come zeroed: a zero state word must read as a FREE node. */
_Static_assert(ST_FREE == 0, "a zeroed node must be free");
static inline unsigned st_of(uint64_t s) { return (unsigned)(s & ST_MASK); }
static inline uint64_t gen_of(uint64_t s) { return s >> ST_BITS; }

/* ---- the timer's private words ------------------------------------------- */

enum { OUT_NONE = 0, OUT_PENDING = 1, OUT_FIRED = 2, OUT_CANCELLED = 3 };

/* Word 0 is the engine the timer was last armed on (NULL: never armed here
 * or anywhere), so a cancel through another engine is recognised. */
struct ib_priv {
	_Atomic(struct tmo *) eng;
	_Atomic(struct tmo__ib_node *) node;
	/* the node's generation for this arm */
	_Atomic uint64_t ngen;
	/* arm count << 2 | OUT_*: written last by arm (release), by the winner
	 * of cancel vs fire, and by destroy for timers it cancels */
	_Atomic uint64_t outcome;
};
TMO__PRIV_FITS(struct ib_priv);

/* ---- futex-backed event counts ------------------------------------------- */

static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	return clock_gettime(CLOCK_MONOTONIC, out);
}

/* ck_ec passes an ABSOLUTE CLOCK_MONOTONIC deadline: FUTEX_WAIT_BITSET takes
 * exactly that (plain FUTEX_WAIT would read it as relative). */
static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expect,
                      const struct timespec *deadline)
{
	(void)st;
	syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expect, deadline, NULL,
	        FUTEX_BITSET_MATCH_ANY);
}

static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const struct ck_ec_ops ec_ops = {
	.gettime = ec_gettime,
	.wait32 = ec_wait32,
	.wake32 = ec_wake32,
};
/* Many threads increment every event count here. */
static const struct ck_ec_mode ec_mode = {.ops = &ec_ops, .single_producer = false};

static int ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ck_ec32_wait sleeps in its own back-off steps (2 ms, then 16 ms, ...) and
 * looks at the caller's deadline only between them, so a 100 us wait took
 * 2 ms and a 2.5 ms one 16 ms (measured).  The predicate clamps each step to
 * our deadline and ends the wait once it has passed. */
static int clamp_to_deadline(const struct ck_ec_wait_state *st, struct timespec *step)
{
	const struct timespec *mine = st->data;
	if (!ts_before(&st->now, mine))
		return 1;
	if (ts_before(mine, step))
		*step = *mine;
	return 0;
}

/* Wait until ec's value differs from v, or until deadline_ns (INT64_MAX:
 * no deadline). */
static void ec_wait_until(struct ck_ec32 *ec, uint32_t v, int64_t deadline_ns)
{
	if (deadline_ns == INT64_MAX) {
		ck_ec32_wait(ec, &ec_mode, v, NULL);
	} else {
		struct timespec ts = tmo__ts_from_ns(deadline_ns);
		ck_ec32_wait_pred(ec, &ec_mode, v, clamp_to_deadline, &ts, &ts);
	}
}

/* One inbox exchange: its nodes in the batch array, and the clock read
 * right after it (with the TSC read beside it, to date each arm). */
struct seg {
	uint32_t start, end;
	int64_t ns;    /* CLOCK_MONOTONIC just after the exchange */
	uint64_t tsc;  /* TSC at the same moment */
	double rate;   /* ns per TSC tick; 0: not calibrated yet */
	double err_ns; /* uncertainty of the (tsc, ns) pair */
	double rel;    /* relative uncertainty of the rate */
};

/* ---- dating arms -----------------------------------------------------------
 *
 * Guarantee 4 (order) needs each arm's own time: stamping a whole inbox
 * exchange with one clock read inverts arms made further apart than the
 * exchange's span, and under load that span is milliseconds (measured:
 * inversions of 0.5 ms for mpsc, 31 ms for wheel in the expiry scenario).
 * A CLOCK_MONOTONIC read costs arm ~25 ns of CPU; the TSC ~10 ns (measured
 * here).  So with an invariant TSC arm records the TSC, and the timer thread
 * converts it with a rate measured against CLOCK_MONOTONIC since the first
 * engine was created, anchored at a (TSC, clock) pair read at the exchange
 * -- usually microseconds after the arm -- and rounded UP by a margin that
 * covers both pairs' read skew, the rate's error over that distance and NTP
 * slew (0.1 %).  The margin is at least a floor (MARGIN_NS, or a twentieth
 * of the resolution if larger) for every arm, so arms keep their order: a
 * varying margin would reorder arms it separates by less.  The result is also capped by the exchange's clock read, itself
 * never earlier than the arm: never early holds whatever the TSC does.
 * Without an invariant TSC, arm reads CLOCK_MONOTONIC. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
static inline uint64_t read_tsc(void) { return __rdtsc(); }
static int tsc_invariant(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
}
#else
static inline uint64_t read_tsc(void) { return 0; }
static int tsc_invariant(void) { return 0; }
#endif

/* Pairs whose two TSC reads are further apart than this are discarded
 * (the thread was preempted between them). */
#define PAIR_MAX_TICKS 20000u
/* The least margin added to a converted arm time (lateness, never
 * earliness); engines with a coarse resolution use resolution / 20. */
#define MARGIN_NS 10000
/* A rate is not used while its relative error may exceed this. */
#define REL_MAX 0.01

static pthread_once_t g_cal_once = PTHREAD_ONCE_INIT;
static int g_use_tsc;
static uint64_t g_cal_tsc, g_cal_width;
static int64_t g_cal_ns;

/* A (TSC, clock) pair; *width_ticks is how far apart the TSC reads were. */
static void tsc_pair(uint64_t *tsc, int64_t *ns, uint64_t *width_ticks)
{
	for (int i = 0;; i++) {
		uint64_t a = read_tsc();
		int64_t t = tmo_now_ns();
		uint64_t b = read_tsc();
		if (b - a <= PAIR_MAX_TICKS || i == 4) {
			*tsc = a + (b - a) / 2;
			*ns = t;
			*width_ticks = b - a;
			return;
		}
	}
}

static void cal_init(void)
{
	g_use_tsc = tsc_invariant();
	if (g_use_tsc)
		tsc_pair(&g_cal_tsc, &g_cal_ns, &g_cal_width);
}

/* What arm records: the TSC, or the clock. */
static inline uint64_t arm_stamp(void)
{
	return g_use_tsc ? read_tsc() : (uint64_t)tmo_now_ns();
}

/* The exchange's own clock read, and what converts TSC values. */
static void seg_stamp(struct seg *sg)
{
	if (!g_use_tsc) {
		sg->ns = tmo_now_ns();
		sg->rate = 0;
		return;
	}
	uint64_t w;
	tsc_pair(&sg->tsc, &sg->ns, &w);
	sg->rate = 0;
	if (sg->tsc > g_cal_tsc + g_cal_width + w && sg->ns > g_cal_ns) {
		double rate = (double)(sg->ns - g_cal_ns) / (double)(sg->tsc - g_cal_tsc);
		/* each pair's clock read lies somewhere within its TSC reads */
		double rel = (double)(g_cal_width + w) / (double)(sg->tsc - g_cal_tsc) + 1e-3;
		if (rel <= REL_MAX) {
			sg->rate = rate;
			sg->rel = rel;
			sg->err_ns = (double)w * rate * (1.0 + rel);
		}
	}
}

/* An upper bound on when the arm stamped `st` was called: never earlier. */
static int64_t arm_time(const struct seg *sg, uint64_t st, double floor_ns)
{
	if (!g_use_tsc)
		return (int64_t)st;
	if (sg->rate <= 0)
		return sg->ns; /* not calibrated yet: the exchange's time */
	double d = sg->tsc > st ? (double)(sg->tsc - st) * sg->rate : 0.0;
	double margin = sg->err_ns + 1000.0 + d * sg->rel;
	double up = (double)sg->ns - d + (margin > floor_ns ? margin : floor_ns);
	return up < (double)sg->ns ? (int64_t)up : sg->ns;
}

/* ---- the engine ---------------------------------------------------------- */

#define SLAB_FIRST 1024u
/* Small enough that one growth step stays short even where page faults
 * are slow (a 64 Ki-node slab took up to 127 ms to fault in on this loaded
 * machine, stalling an arm past the progress scenario's 100 ms bound). */
#define SLAB_MAX (8u * 1024u)
/* Idle naps before the timer thread goes back to sleeping until woken. */
#define NAP_IDLE_MAX 4
/* Retry period for nodes the structure could not take (out of memory). */
#define UNFILED_RETRY_NS TMO_NSEC_PER_MSEC
/* A timer thread inside one callback for this long is stalled: producers
 * grow the pool instead of waiting for it. */
#define STALL_NS TMO_NSEC_PER_MSEC
/* The longest a producer waits for recycling (a starved timer thread)
 * before it grows the pool, while the pool is under STARVED_MAX_NODES. */
#define WAIT_MAX_NS (50 * TMO_NSEC_PER_MSEC)
#define STARVED_MAX_NODES (2u * TMO__IB_SOFT_NODES)
/* Inbox exchanges kept before they are handled, and the nodes handled
 * between two exchanges while a burst keeps the timer thread busy. */
#define TMO__IB_SEGS 64u
#define TMO__IB_SEG_NODES 128u
/* Due batches up to this size are sorted by deadline (see due_sort). */
#define DUE_SORT_MAX 4096u
/* Node pointers the timer thread's batch array starts with. */
#define BATCH_FIRST 1024u

/* Nodes, then magazines: one per TMO__IB_MAG nodes, plus slack for the
 * magazines that threads' caches and the timer thread hold part-filled. */
struct slab {
	struct slab *next;
	void *raw; /* the allocation (nodes is it, aligned to 64) */
	uint32_t nnodes, nmags;
	struct tmo__ib_node *nodes;
	struct tmo__ib_mag *mags;
};
#define MAG_SLACK 4u

struct tls_slot;

struct tmo {
	struct tmo_base base;
	const struct tmo__ib_sched *sched;
	uint64_t id; /* never reused: keys thread-local caches */
	int64_t nap_ns;
	double margin_ns; /* floor of the arm-dating margin */

	/* Producers write these; each on its own line. */
	_Alignas(64) ck_stack_t inbox;
	_Alignas(64) ck_stack_t full_mags;  /* timer thread -> producers */
	_Alignas(64) ck_stack_t empty_mags; /* producers -> timer thread */
	_Alignas(64) struct ck_ec32 wake_ec; /* producers -> timer thread */
	_Atomic int napping;                 /* 1: timer thread polls; no wake needed */
	_Alignas(64) struct ck_ec32 done_ec; /* timer thread -> waiting cancels */
	struct ck_ec32 mag_ec;               /* timer thread -> producers waiting
	                                        for a magazine */
	/* the timer whose callback runs now (NULL: none); read by cancel */
	_Atomic(struct tmo_timer *) running;

	/* Timer thread only. */
	_Alignas(64) struct tmo__ib_mag *fill; /* magazine being filled */
	struct tmo__ib_mag *spare;             /* empty magazines, via link */
	struct tmo__ib_node *loose;            /* released with no magazine, via link */
	struct tmo__ib_node *unfiled;
	struct tmo__ib_node *due_head, **due_tail;
	size_t due_count;
	struct tmo__ib_node **batch; /* exchanged chains, each newest first */
	uint32_t batch_cap, batch_used;
	struct seg seg[TMO__IB_SEGS];
	uint32_t nseg;
	int idle_naps;
	int napping_cached;

	/* Written by the timer thread, read by others. */
	_Atomic uint64_t rounds; /* loop count: progress, for waiting producers */
	_Atomic int in_callback; /* running a callback */
	_Atomic int fill_req;    /* a producer asks for the part-filled magazine */
	_Atomic uint64_t fill_ack; /* bumped when such a request was served */
	_Atomic uint64_t published; /* magazines the timer thread handed out */
	_Atomic uint64_t fired;
	_Atomic uint64_t struct_bytes;
	_Atomic uint64_t filed;

	/* Pool growth (grow_lock). */
	pthread_mutex_t grow_lock;
	struct slab *slabs;
	uint32_t next_slab;
	_Atomic uint64_t nodes_total;
	_Atomic uint64_t slab_count;
	_Atomic uint64_t slab_bytes;
	_Atomic uint64_t waits;

	/* g_lock: caches of threads that use this engine, and what departed
	 * caches counted. */
	struct tls_slot *slots;
	uint64_t armed_retired, prevented_retired;

	/* park / stop */
	pthread_mutex_t park_lock;
	pthread_cond_t park_cv;
	int park_req, parked;
	_Atomic int park_flag;
	_Atomic int stop;
	pthread_t thread;

	_Alignas(64) unsigned char sched_state[];
};

static inline void *S(struct tmo *e) { return e->sched_state; }

/* aux: a list link and enum tmo__ib_where in the low bits (nodes are
 * 64-byte aligned). */
static inline unsigned where_of(const struct tmo__ib_node *n) { return (unsigned)(n->aux & 3u); }
static inline struct tmo__ib_node *aux_next(const struct tmo__ib_node *n)
{
	return (struct tmo__ib_node *)(n->aux & ~(uintptr_t)3u);
}
static inline void set_aux(struct tmo__ib_node *n, struct tmo__ib_node *next, unsigned where)
{
	n->aux = (uintptr_t)next | where;
}

/* ---- thread-local caches --------------------------------------------------
 *
 * A thread keeps, per engine it uses, one magazine of free nodes and two
 * counters (arms, prevented cancels: stats sums them, so the fast paths
 * share no counter).  The slot is keyed by the engine's id, which is never reused, so
 * a cache left behind by a destroyed engine is recognised and dropped without
 * touching its nodes (they died with the engine's slabs).  Engines list the
 * slots that name them (under g_lock) so stats can sum the counters and
 * destroy can mark them dead; a thread's exit returns its caches.
 */
struct tls_slot {
	_Atomic uint64_t id; /* 0: empty or its engine was destroyed */
	struct tmo *eng;
	struct tmo__ib_mag *mag; /* this thread's cache: NULL or a magazine */
	_Atomic uint64_t armed;     /* written by the owner only */
	_Atomic uint64_t prevented; /* written by the owner only */
	struct tls_slot *next, **pprev; /* engine's list, under g_lock */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t g_next_id = 1;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;

static _Thread_local struct tls_slot tls_slots[TMO__IB_SLOTS];
static _Thread_local unsigned tls_victim;
static _Thread_local int tls_key_set;
/* The engine whose timer thread this is (cancel from a callback: SELF). */
static _Thread_local struct tmo *tls_timer_of;

static inline void bump(_Atomic uint64_t *c)
{
	/* single writer: a plain increment, atomic only so readers see no race */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

static void mags_push_chain(ck_stack_t *st, ck_stack_entry_t *first);
static void mag_give_back(struct tmo *e, struct tmo__ib_mag *m);

/* Give a live slot's nodes and counts back to its engine.  g_lock held. */
static void slot_detach_locked(struct tls_slot *s)
{
	if (atomic_load_explicit(&s->id, memory_order_relaxed) != 0) {
		struct tmo *e = s->eng;
		if (s->mag != NULL)
			mag_give_back(e, s->mag);
		e->armed_retired += atomic_load_explicit(&s->armed, memory_order_relaxed);
		e->prevented_retired += atomic_load_explicit(&s->prevented, memory_order_relaxed);
		*s->pprev = s->next;
		if (s->next != NULL)
			s->next->pprev = s->pprev;
	}
	atomic_store_explicit(&s->id, 0, memory_order_relaxed);
	s->eng = NULL;
	s->mag = NULL;
}

static void tls_exit(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_lock);
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		slot_detach_locked(&tls_slots[i]);
	pthread_mutex_unlock(&g_lock);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, tls_exit) == 0; }

static struct tls_slot *slot_attach(struct tmo *e)
{
	pthread_once(&g_key_once, key_init);
	pthread_mutex_lock(&g_lock);
	if (!tls_key_set && g_key_ok) {
		/* only to have tls_exit run at thread exit */
		tls_key_set = pthread_setspecific(g_key, &tls_slots[0]) == 0;
	}
	struct tls_slot *s = NULL;
	for (unsigned i = 0; i < TMO__IB_SLOTS && s == NULL; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == 0)
			s = &tls_slots[i];
	if (s == NULL)
		s = &tls_slots[tls_victim++ % TMO__IB_SLOTS];
	slot_detach_locked(s); /* returns a victim's nodes; drops a dead one's */
	s->eng = e;
	atomic_store_explicit(&s->armed, 0, memory_order_relaxed);
	atomic_store_explicit(&s->prevented, 0, memory_order_relaxed);
	s->next = e->slots;
	if (s->next != NULL)
		s->next->pprev = &s->next;
	s->pprev = &e->slots;
	e->slots = s;
	atomic_store_explicit(&s->id, e->id, memory_order_relaxed);
	pthread_mutex_unlock(&g_lock);
	return s;
}

static inline struct tls_slot *slot_for(struct tmo *e)
{
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == e->id)
			return &tls_slots[i];
	return slot_attach(e);
}

/* ---- magazines ------------------------------------------------------------ */

/* Push a chain of stack entries (tail unknown) with no walk in the common
 * case: the stack is usually empty right after a producer took it all.  If
 * not, take what is there and walk that (short: it arrived in the window). */
static void mags_push_chain(ck_stack_t *st, ck_stack_entry_t *first)
{
	for (;;) {
		if (ck_pr_cas_ptr(&st->head, NULL, first))
			return;
		ck_stack_entry_t *other = ck_stack_batch_pop_upmc(st);
		if (other == NULL)
			continue;
		ck_stack_entry_t *tail = other;
		while (tail->next != NULL)
			tail = tail->next;
		tail->next = first;
		first = other;
	}
}

static inline struct tmo__ib_mag *mag_of(ck_stack_entry_t *ent)
{
	return tmo_container_of(ent, struct tmo__ib_mag, link);
}

/* Take one full magazine (ABA-free: take the whole stack with one exchange,
 * give the rest back).  NULL if there is none. */
static struct tmo__ib_mag *mag_take_full(struct tmo *e)
{
	ck_stack_entry_t *m = ck_stack_batch_pop_upmc(&e->full_mags);
	if (m == NULL)
		return NULL;
	if (m->next != NULL)
		mags_push_chain(&e->full_mags, m->next);
	return mag_of(m);
}

/* A producer's cache goes back: full(ish) to producers, empty to the timer
 * thread. */
static void mag_give_back(struct tmo *e, struct tmo__ib_mag *m)
{
	ck_stack_push_upmc(m->count > 0 ? &e->full_mags : &e->empty_mags, &m->link);
}

static inline void prefetch_node(const struct tmo__ib_mag *m, uint32_t i)
{
	/* for writing: arm writes the line, and its last holder is usually the
	 * timer thread (it read the node when it recycled it) */
	__builtin_prefetch(m->n[i], 1, 3);
}

/* Allocate a slab of e->next_slab nodes (grow_lock held, or at create).
 * (or `nodes`, if not 0).  With s, its first magazine becomes s's cache. */
static int slab_add(struct tmo *e, struct tls_slot *s, uint32_t nodes)
{
	uint32_t nn = nodes != 0 ? nodes : e->next_slab;
	uint32_t nm = (nn + TMO__IB_MAG - 1) / TMO__IB_MAG + MAG_SLACK;
	size_t node_bytes = (size_t)nn * sizeof(struct tmo__ib_node);
	size_t bytes = node_bytes + (size_t)nm * sizeof(struct tmo__ib_mag);
	struct slab *sl = tmo__malloc(sizeof *sl);
	/* Zeroed memory: a zero node is a FREE node of generation 0, so the
	 * nodes are not touched here; their pages fault in as arms first use
	 * them, spread over many arms instead of stalling this one. */
	void *raw = sl != NULL ? tmo__calloc(1, bytes + 64) : NULL;
	if (raw == NULL) {
		tmo__free(sl);
		return TMO_ENOMEM;
	}
	char *mem = (char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
	sl->raw = raw;
	sl->nnodes = nn;
	sl->nmags = nm;
	sl->nodes = (struct tmo__ib_node *)(void *)mem;
	sl->mags = (struct tmo__ib_mag *)(void *)(mem + node_bytes);

	ck_stack_entry_t *full = NULL, *empty = NULL;
	uint32_t i = 0;
	for (uint32_t k = 0; k < nm; k++) {
		struct tmo__ib_mag *m = &sl->mags[k];
		while (i < nn && m->count < TMO__IB_MAG)
			m->n[m->count++] = &sl->nodes[i++];
		if (m->count > 0 && s != NULL && s->mag == NULL) {
			s->mag = m;
			continue;
		}
		ck_stack_entry_t **list = m->count > 0 ? &full : &empty;
		m->link.next = *list;
		*list = &m->link;
	}
	sl->next = e->slabs;
	e->slabs = sl;
	/* double the pool each time, up to SLAB_MAX per slab: growth is rare */
	uint64_t total = atomic_fetch_add_explicit(&e->nodes_total, nn, memory_order_relaxed) + nn;
	e->next_slab = total > SLAB_MAX ? SLAB_MAX : (uint32_t)total;
	atomic_fetch_add_explicit(&e->slab_count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&e->slab_bytes, bytes + 64 + sizeof *sl, memory_order_relaxed);
	if (empty != NULL)
		mags_push_chain(&e->empty_mags, empty);
	if (full != NULL)
		mags_push_chain(&e->full_mags, full);
	return 0;
}

static uint64_t pending_now(struct tmo *e);

/* Must this producer wait for the timer thread rather than grow the pool?
 * Only when the pool is past its soft cap and more than half of it is NOT
 * pending timers (so most of it is cancelled nodes on their way back), the
 * timer thread is not parked, and it is not stuck in one callback for
 * STALL_NS (arms must not wait on callbacks). */
static int stalled(struct tmo *e, uint64_t rounds0, int64_t t0)
{
	if (atomic_load_explicit(&e->park_flag, memory_order_relaxed))
		return 1;
	/* Past STARVED_MAX_NODES a stall no longer grows the pool: arms then
	 * wait for recycling even behind a long callback.  Bounded memory wins
	 * over arms that never wait: a timer thread preempted inside a short
	 * callback looks exactly like a long callback, and on a loaded machine
	 * that grew the pool by a slab each time, without end. */
	if (atomic_load_explicit(&e->nodes_total, memory_order_relaxed) >= STARVED_MAX_NODES)
		return 0;
	return atomic_load_explicit(&e->in_callback, memory_order_relaxed) &&
	       atomic_load_explicit(&e->rounds, memory_order_relaxed) == rounds0 &&
	       tmo_now_ns() - t0 >= STALL_NS;
}

static int may_grow(struct tmo *e, uint64_t rounds0, int64_t t0)
{
	uint64_t total = atomic_load_explicit(&e->nodes_total, memory_order_relaxed);
	if (total < TMO__IB_SOFT_NODES)
		return 1;
	if (stalled(e, rounds0, t0))
		return 1;
	return total < 2 * pending_now(e) + 2 * TMO__IB_MAG;
}

static void wake_timer(struct tmo *e);

/* May the free nodes really be stranded in other threads' caches?  Each
 * live cache holds at most one magazine, so past STARVED_MAX_NODES plus that
 * much the nodes are in flight through the timer thread, and growing would
 * only grow the pool without end (seen: +1024 nodes a few times a minute
 * under sustain on a loaded machine).  The producer waits instead. */
static int may_strand(struct tmo *e)
{
	uint64_t caches = 1; /* the timer thread's part-filled magazine */
	pthread_mutex_lock(&g_lock);
	for (struct tls_slot *s = e->slots; s != NULL; s = s->next)
		caches++;
	pthread_mutex_unlock(&g_lock);
	return atomic_load_explicit(&e->nodes_total, memory_order_relaxed) <
	       STARVED_MAX_NODES + caches * TMO__IB_MAG;
}

/* Slow path of arm: the cache is empty. */
static int cache_refill(struct tmo *e, struct tls_slot *s)
{
	if (s->mag != NULL) {
		mag_give_back(e, s->mag);
		s->mag = NULL;
	}
	if ((s->mag = mag_take_full(e)) != NULL)
		return 0;
	uint64_t rounds0 = atomic_load_explicit(&e->rounds, memory_order_relaxed);
	int64_t t0 = tmo_now_ns();
	int force = 0, waited = 0;
	for (;;) {
		pthread_mutex_lock(&e->grow_lock);
		int rc = 1;
		/* another producer may have grown the pool meanwhile */
		if ((s->mag = mag_take_full(e)) != NULL)
			rc = 0;
		else if (force || may_grow(e, rounds0, t0))
			/* a stall adds one small slab; need doubles the pool */
			rc = slab_add(e, s, force ? SLAB_FIRST : 0);
		pthread_mutex_unlock(&e->grow_lock);
		if (rc <= 0)
			return rc;
		/* Flow control: free nodes are on their way back through the
		 * timer thread (in the inbox, in the batch it handles, or in its
		 * part-filled magazine).  Ask for that magazine, make sure the
		 * thread is awake and let it run until it answers. */
		if (!waited++)
			atomic_fetch_add_explicit(&e->waits, 1, memory_order_relaxed);
		uint64_t ack = atomic_load_explicit(&e->fill_ack, memory_order_acquire);
		uint64_t pub = atomic_load_explicit(&e->published, memory_order_relaxed);
		atomic_store_explicit(&e->fill_req, 1, memory_order_release);
		wake_timer(e);
		for (;;) {
			/* sleep, not spin: on a busy machine the timer thread
			 * needs this CPU */
			uint32_t v = ck_ec32_value(&e->mag_ec);
			if ((s->mag = mag_take_full(e)) != NULL)
				return 0;
			if (atomic_load_explicit(&e->fill_ack, memory_order_acquire) == ack) {
				ec_wait_until(&e->mag_ec, v, tmo_now_ns() + STALL_NS);
				if ((s->mag = mag_take_full(e)) != NULL)
					return 0;
			}
			if (atomic_load_explicit(&e->fill_ack, memory_order_acquire) != ack) {
				/* It answered and handed out nothing meanwhile, and
				 * nothing is on its way either: the free nodes sit in
				 * other threads' caches.  Grow. */
				if (atomic_load_explicit(&e->published, memory_order_relaxed) == pub &&
				    ck_pr_load_ptr(&e->inbox.head) == NULL && may_strand(e))
					force = 1;
				break;
			}
			uint64_t r = atomic_load_explicit(&e->rounds, memory_order_relaxed);
			if (r != rounds0) {
				rounds0 = r;
				t0 = tmo_now_ns();
			}
			/* A parked thread or a long callback: grow.  Starved of
			 * CPU (no round for WAIT_MAX_NS): grow only while the
			 * pool is under STARVED_MAX_NODES; past it the producer
			 * keeps waiting, which hands the CPU to the timer thread.
			 * Otherwise a machine that starves the timer thread now
			 * and then grows the pool by a slab each time, without
			 * end (sustain: 1.6 MB after 60 s with a build beside). */
			if (stalled(e, rounds0, t0) ||
			    (tmo_now_ns() - t0 >= WAIT_MAX_NS &&
			     atomic_load_explicit(&e->nodes_total, memory_order_relaxed) <
			         STARVED_MAX_NODES)) {
				force = 1;
				break;
			}
		}
	}
}

/* Timer thread: an empty magazine to fill, or NULL. */
static struct tmo__ib_mag *mag_get_empty(struct tmo *e)
{
	if (e->spare == NULL) {
		ck_stack_entry_t *got = ck_stack_batch_pop_upmc(&e->empty_mags);
		e->spare = got != NULL ? mag_of(got) : NULL;
	}
	struct tmo__ib_mag *m = e->spare;
	if (m != NULL) {
		e->spare = m->link.next != NULL ? mag_of(m->link.next) : NULL;
		m->count = 0;
	}
	return m;
}

/* Timer thread: publish the magazine being filled. */
static void fill_publish(struct tmo *e)
{
	if (e->fill != NULL && e->fill->count > 0) {
		ck_stack_push_upmc(&e->full_mags, &e->fill->link);
		e->fill = NULL;
		bump(&e->published);
		ck_ec32_add(&e->mag_ec, &ec_mode, 1);
	}
}

/* Timer thread: a node is free again.  Nothing is written to the node:
 * its state word already says it is resolved (CANCELLED, CANCEL_PENDING or
 * FREE after a fire), and arm starts the next generation from any state. */
static void node_release(struct tmo *e, struct tmo__ib_node *n)
{
	struct tmo__ib_mag *m = e->fill;
	if (UNLIKELY(m == NULL)) {
		m = e->fill = mag_get_empty(e);
		if (m == NULL) {
			/* every magazine is out in caches: keep it until one
			 * comes back (producers grow the pool meanwhile) */
			n->link.next = e->loose != NULL ? &e->loose->link : NULL;
			e->loose = n;
			return;
		}
	}
	m->n[m->count++] = n;
	if (m->count == TMO__IB_MAG) {
		ck_stack_push_upmc(&e->full_mags, &m->link);
		e->fill = NULL;
		bump(&e->published);
		ck_ec32_add(&e->mag_ec, &ec_mode, 1);
	}
}

/* Timer thread: retry loose nodes once magazines came back. */
static void loose_retry(struct tmo *e)
{
	while (e->loose != NULL) {
		if (e->fill == NULL && (e->fill = mag_get_empty(e)) == NULL)
			return;
		struct tmo__ib_node *n = e->loose;
		e->loose = n->link.next != NULL
		                   ? tmo_container_of(n->link.next, struct tmo__ib_node, link)
		                   : NULL;
		node_release(e, n);
	}
}

/* ---- inbox ---------------------------------------------------------------- */

/* ck_stack_push_upmc, but also says whether the inbox was empty: only then
 * may the timer thread be asleep without knowing of work. */
static inline int inbox_push(ck_stack_t *st, ck_stack_entry_t *ent)
{
	ck_stack_entry_t *head = ck_pr_load_ptr(&st->head);
	for (;;) {
		ent->next = head;
		ck_pr_fence_store();
		if (ck_pr_cas_ptr_value(&st->head, head, ent, &head))
			return head == NULL;
	}
}

static inline void inbox_post(struct tmo *e, struct tmo__ib_node *n)
{
	/* seq_cst load after the CAS: pairs with the timer thread's
	 * "napping = 0; fence; look at the inbox" before it sleeps */
	if (inbox_push(&e->inbox, &n->link) &&
	    !atomic_load_explicit(&e->napping, memory_order_seq_cst))
		ck_ec32_add(&e->wake_ec, &ec_mode, 1);
}

/* ---- arm / cancel --------------------------------------------------------- */

int tmo__ib_arm(struct tmo *e, struct tmo_timer *t, int64_t timeout_ns, tmo_callback *cb,
                void *arg)
{
	struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
	if (atomic_load_explicit(&p->eng, memory_order_relaxed) == e &&
	    (atomic_load_explicit(&p->outcome, memory_order_acquire) & 3) == OUT_PENDING)
		return TMO_EARMED;

	struct tls_slot *s = slot_for(e);
	struct tmo__ib_mag *m = s->mag;
	if (UNLIKELY(m == NULL || m->count == 0)) {
		int rc = cache_refill(e, s);
		if (rc != 0)
			return rc;
		m = s->mag;
		for (uint32_t i = 1; i < 4 && i <= m->count; i++)
			prefetch_node(m, m->count - i);
	}
	struct tmo__ib_node *n = m->n[--m->count];
	/* three arms ahead: the miss overlaps this arm and the next two */
	if (m->count >= 3)
		prefetch_node(m, m->count - 3);

	uint64_t gen = gen_of(atomic_load_explicit(&n->state, memory_order_relaxed)) + 1;
	n->timer = t;
	n->s.q.timeout = timeout_ns;
	n->s.q.stamp = arm_stamp();
	atomic_store_explicit(&n->state, mkst(gen, ST_QUEUED), memory_order_relaxed);
	t->cb = cb;
	t->arg = arg;
	/* Seqlock write: the fence orders these after whatever outcome the
	 * previous arm ended with (FIRED, CANCELLED), so a cancel that reads our
	 * node or engine also reads a changed outcome and retries. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&p->eng, e, memory_order_relaxed);
	atomic_store_explicit(&p->node, n, memory_order_relaxed);
	atomic_store_explicit(&p->ngen, gen, memory_order_relaxed);
	/* Before the push: once pushed, the timer thread may write FIRED.  The
	 * count makes every arm's outcome word differ from the previous one's
	 * (node generations are per node and do repeat across nodes). */
	uint64_t seq = (atomic_load_explicit(&p->outcome, memory_order_relaxed) >> 2) + 1;
	atomic_store_explicit(&p->outcome, seq << 2 | OUT_PENDING, memory_order_release);
	bump(&s->armed);
	inbox_post(e, n);
	return 0;
}

static void count_prevented(struct tmo *e) { bump(&slot_for(e)->prevented); }

/* Wait until the callback of (n, gen) has returned. */
static void wait_callback(struct tmo *e, struct tmo__ib_node *n, uint64_t gen)
{
	for (;;) {
		uint32_t v = ck_ec32_value(&e->done_ec);
		if (atomic_load_explicit(&n->state, memory_order_acquire) != mkst(gen, ST_FIRING))
			return;
		ck_ec32_wait(&e->done_ec, &ec_mode, v, NULL);
	}
}

/* A cancel that prevented an arm made by the timer's own callback (a
 * re-arm) returns only after that callback returned, unless it is that
 * callback.  The re-arm's outcome store (which this cancel read) follows the
 * thread's store of `running`, so the load below cannot miss it. */
/* Wait until the timer thread is no longer inside t's callback. */
static void wait_not_running(struct tmo *e, struct tmo_timer *t)
{
	for (;;) {
		uint32_t v = ck_ec32_value(&e->done_ec);
		if (atomic_load_explicit(&e->running, memory_order_acquire) != t)
			return;
		ck_ec32_wait(&e->done_ec, &ec_mode, v, NULL);
	}
}

static int prevented_return(struct tmo *e, struct tmo_timer *t)
{
	if (UNLIKELY(atomic_load_explicit(&e->running, memory_order_acquire) == t) &&
	    tls_timer_of != e)
		wait_not_running(e, t);
	return TMO_CANCEL_PREVENTED;
}

int tmo__ib_cancel(struct tmo *e, struct tmo_timer *t)
{
	struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
	int waited = 0;
	for (;;) {
		/* seqlock read of (outcome, engine, node, generation) */
		uint64_t o = atomic_load_explicit(&p->outcome, memory_order_acquire);
		struct tmo *pe = atomic_load_explicit(&p->eng, memory_order_relaxed);
		struct tmo__ib_node *n = atomic_load_explicit(&p->node, memory_order_relaxed);
		uint64_t gen = atomic_load_explicit(&p->ngen, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->outcome, memory_order_relaxed) != o)
			continue;
		if (pe == NULL || (o & 3) == OUT_NONE)
			return TMO_ENOTARMED;
		if (pe != e)
			return TMO_EWRONGENGINE;
		const uint64_t o_cancelled = (o & ~(uint64_t)3) | OUT_CANCELLED;
		if ((o & 3) == OUT_CANCELLED)
			return waited ? TMO_CANCEL_WAITED : TMO_ENOTARMED;

		if ((o & 3) == OUT_PENDING) {
			uint64_t s = mkst(gen, ST_QUEUED);
			if (atomic_compare_exchange_strong_explicit(&n->state, &s,
			                                            mkst(gen, ST_CANCELLED),
			                                            memory_order_acq_rel,
			                                            memory_order_acquire)) {
				/* still in the inbox: the timer thread drops it when it
				 * pops it, no message needed */
				count_prevented(e);
				atomic_store_explicit(&p->outcome, o_cancelled, memory_order_release);
				return prevented_return(e, t);
			}
			if (s == mkst(gen, ST_IN_STRUCT) &&
			    atomic_compare_exchange_strong_explicit(&n->state, &s,
			                                            mkst(gen, ST_CANCEL_PENDING),
			                                            memory_order_acq_rel,
			                                            memory_order_acquire)) {
				count_prevented(e);
				atomic_store_explicit(&p->outcome, o_cancelled, memory_order_release);
				/* Its inbox link is free while it sits in the structure:
				 * send it back so the timer thread removes it now, not at
				 * its deadline.  Last: the node may be recycled at once. */
				inbox_post(e, n);
				return prevented_return(e, t);
			}
			if (s == mkst(gen, ST_CANCELLED) || s == mkst(gen, ST_CANCEL_PENDING))
				return TMO_ENOTARMED; /* a concurrent cancel won */
			if (s != mkst(gen, ST_FIRING)) {
				/* The node moved on (released, maybe re-armed), so this
				 * arm was resolved.  Fire writes FIRED before it releases
				 * the node; an unchanged PENDING means a concurrent cancel
				 * won and has not yet recorded it. */
				if (atomic_load_explicit(&p->outcome, memory_order_acquire) == o)
					return TMO_ENOTARMED;
				continue;
			}
			/* FIRING: fall through to the wait */
		}

		/* Fired (or firing). */
		if (atomic_load_explicit(&n->state, memory_order_acquire) == mkst(gen, ST_FIRING)) {
			if (tls_timer_of == e)
				return TMO_CANCEL_SELF; /* one callback at a time: ours */
			wait_callback(e, n, gen);
			waited = 1;
			/* Look again: the callback may have re-armed the timer (cancel
			 * that arm), and the re-arm may even be running already. */
			continue;
		}
		/* not running (any more): the callback may have re-armed */
		if (atomic_load_explicit(&p->outcome, memory_order_acquire) != o)
			continue;
		/* The snapshot can be torn by a re-arm from inside the callback
		 * that fired this arm: the re-arm stores node and generation
		 * before its outcome, so (FIRED, the new node, not FIRING) reads
		 * as settled while that callback is still running and about to
		 * publish the new arm (contract/mpsc under TSan: FIRED returned,
		 * callbacks went on).  The fire path sets `running` before it
		 * writes FIRED, which this cancel read: wait for the callback,
		 * then look again. */
		if (UNLIKELY(atomic_load_explicit(&e->running, memory_order_acquire) == t)) {
			if (tls_timer_of == e)
				return TMO_CANCEL_SELF;
			wait_not_running(e, t);
			waited = 1;
			continue;
		}
		return waited ? TMO_CANCEL_WAITED : TMO_CANCEL_FIRED;
	}
}

/* ---- the timer thread ----------------------------------------------------- */

static void due_append(void *ctx, struct tmo__ib_node *n)
{
	struct tmo *e = ctx;
	set_aux(n, NULL, TMO__IB_NOWHERE);
	*e->due_tail = n;
	e->due_tail = (struct tmo__ib_node **)(void *)&n->aux;
	e->due_count++;
}

static void file_node(struct tmo *e, struct tmo__ib_node *n, int64_t deadline)
{
	if (e->sched->insert(S(e), n, deadline) == 0) {
		set_aux(n, NULL, TMO__IB_IN_STRUCT);
	} else {
		n->s.when = deadline;
		set_aux(n, e->unfiled, TMO__IB_UNFILED);
		e->unfiled = n;
	}
}

static void handle(struct tmo *e, struct tmo__ib_node *n, const struct seg *sg)
{
	uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
	uint64_t gen = gen_of(s);
	switch (st_of(s)) {
	case ST_QUEUED: {
		/* both <= 2^62: no overflow */
		int64_t deadline = arm_time(sg, n->s.q.stamp, e->margin_ns) + n->s.q.timeout;
		if (!atomic_compare_exchange_strong_explicit(&n->state, &s, mkst(gen, ST_IN_STRUCT),
		                                             memory_order_acq_rel,
		                                             memory_order_acquire)) {
			node_release(e, n); /* cancelled meanwhile */
			break;
		}
		file_node(e, n, deadline);
		break;
	}
	case ST_CANCELLED:
		node_release(e, n);
		break;
	case ST_CANCEL_PENDING:
		switch (where_of(n)) {
		case TMO__IB_IN_STRUCT:
			e->sched->remove(S(e), n);
			set_aux(n, NULL, TMO__IB_NOWHERE);
			node_release(e, n);
			break;
		case TMO__IB_UNFILED:
			set_aux(n, aux_next(n), TMO__IB_DROP); /* released by the retry pass */
			break;
		default:
			node_release(e, n); /* it was collected as due before its cancel */
			break;
		}
		break;
	default:
		/* FREE / IN_STRUCT / FIRING nodes are never in the inbox */
		abort();
	}
}

/* Make the batch array hold at least `want` pointers (timer thread).
 * Returns 0 if it could not grow. */
static int batch_reserve(struct tmo *e, uint64_t want)
{
	if (want <= e->batch_cap)
		return 1;
	uint64_t cap = e->batch_cap;
	while (cap < want)
		cap *= 2;
	if (cap > UINT32_MAX)
		return 0;
	struct tmo__ib_node **b = tmo__malloc((size_t)cap * sizeof *b);
	if (b == NULL)
		return 0;
	memcpy(b, e->batch, (size_t)e->batch_used * sizeof *b);
	tmo__free(e->batch);
	e->batch = b;
	e->batch_cap = (uint32_t)cap;
	return 1;
}

/* Take the inbox with one exchange and append it to the batch array as a
 * segment stamped with the clock read just after the exchange.  Returns 0
 * if the inbox was empty, or the array is full (the chain then stays in the
 * inbox: nothing is lost, it is taken later). */
static int take_segment(struct tmo *e)
{
	if (e->nseg == TMO__IB_SEGS || ck_pr_load_ptr(&e->inbox.head) == NULL)
		return 0;
	/* Unhandled nodes are distinct (a node re-enters the inbox only once
	 * handled), so the pool size bounds what the array must hold. */
	if (!batch_reserve(e, atomic_load_explicit(&e->nodes_total, memory_order_relaxed)) &&
	    e->nseg > 0)
		return 0;
	ck_stack_entry_t *p = ck_stack_batch_pop_upmc(&e->inbox);
	/* read after the exchange: no arm in it was called later */
	struct seg *sg = &e->seg[e->nseg];
	seg_stamp(sg);
	uint32_t start = e->batch_used, k = start;
	while (p != NULL && k < e->batch_cap) {
		e->batch[k++] = tmo_container_of(p, struct tmo__ib_node, link);
		p = p->next;
	}
	if (UNLIKELY(p != NULL)) {
		/* Only when the array could not grow (out of memory) and this is
		 * the first segment: the older rest of the chain is handled at
		 * once, oldest first, after reversing it in place. */
		ck_stack_entry_t *rev = NULL;
		while (p != NULL) {
			ck_stack_entry_t *next = p->next;
			p->next = rev;
			rev = p;
			p = next;
		}
		while (rev != NULL) {
			struct tmo__ib_node *n = tmo_container_of(rev, struct tmo__ib_node, link);
			/* read the link first: once the node is filed a cancel may
			 * push it again, rewriting it */
			rev = rev->next;
			handle(e, n, sg);
		}
	}
	sg->start = start;
	sg->end = k;
	e->nseg++;
	e->batch_used = k;
	return 1;
}

/* Handle everything in the inbox.  Each exchanged chain comes newest-first
 * and is handled oldest first, so arms of equal deadline keep their order;
 * it is walked once into an array (a read of each node: the walk is where
 * the misses are) rather than reversed in place, which would dirty every
 * node.  While handling, the inbox is taken again every TMO__IB_SEG_NODES
 * nodes: a chain's stamp is then at most that long after its arms, so
 * stamps of arms made further apart than that keep their order (guarantee
 * 4) even when a burst keeps the thread busy for long. */
static int drain(struct tmo *e)
{
	e->nseg = 0;
	e->batch_used = 0;
	if (!take_segment(e))
		return 0;
	uint32_t handled = 0;
	for (uint32_t si = 0; si < e->nseg; si++) {
		const struct seg *sg = &e->seg[si];
		for (uint32_t i = sg->end; i > sg->start;) {
			handle(e, e->batch[--i], sg);
			if (++handled % TMO__IB_SEG_NODES == 0)
				take_segment(e);
		}
		/* the last segment done: anything new arrived meanwhile? */
		if (si + 1 == e->nseg)
			take_segment(e);
	}
	return 1;
}

/* Retry nodes the structure could not take; due ones go straight to due. */
static void retry_unfiled(struct tmo *e, int64_t now)
{
	struct tmo__ib_node *n = e->unfiled, *keep = NULL;
	e->unfiled = NULL;
	while (n != NULL) {
		struct tmo__ib_node *next = aux_next(n);
		if (where_of(n) == TMO__IB_DROP) {
			set_aux(n, NULL, TMO__IB_NOWHERE);
			node_release(e, n);
		} else if (n->s.when <= now) {
			due_append(e, n);
		} else if (e->sched->insert(S(e), n, n->s.when) == 0) {
			set_aux(n, NULL, TMO__IB_IN_STRUCT);
		} else {
			set_aux(n, keep, TMO__IB_UNFILED);
			keep = n;
		}
		n = next;
	}
	e->unfiled = keep;
}

/* Stable merge sort of a due list (linked through aux, where bits 0) by the
 * structure's deadline.  A wheel hands out one tick's nodes in no
 * particular order; arms whose call times differ by a hair more than a tick
 * can still share a tick (the arm is dated inside the call, not at its
 * start), and would then run in either order. */
static struct tmo__ib_node *due_sort(struct tmo *e, struct tmo__ib_node *list, size_t n)
{
	if (n < 2)
		return list;
	struct tmo__ib_node *a = list, *b, *p = list;
	for (size_t i = 1; i < n / 2; i++)
		p = aux_next(p);
	b = aux_next(p);
	set_aux(p, NULL, TMO__IB_NOWHERE);
	a = due_sort(e, a, n / 2);
	b = due_sort(e, b, n - n / 2);
	struct tmo__ib_node *head = NULL, **tail = &head;
	while (a != NULL && b != NULL) {
		struct tmo__ib_node **from = e->sched->deadline(b) < e->sched->deadline(a) ? &b : &a;
		struct tmo__ib_node *x = *from;
		*from = aux_next(x);
		*tail = x;
		tail = (struct tmo__ib_node **)(void *)&x->aux;
	}
	*tail = a != NULL ? a : b;
	return head;
}

static void fire_due(struct tmo *e, struct tmo__ib_node *n)
{
	while (n != NULL) {
		struct tmo__ib_node *next = aux_next(n);
		set_aux(n, NULL, TMO__IB_NOWHERE);
		uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
		uint64_t gen = gen_of(s);
		/* CANCEL_PENDING: its cancel won and pushed it; the inbox
		 * delivers it next round and releases it then */
		if (st_of(s) == ST_IN_STRUCT &&
		    atomic_compare_exchange_strong_explicit(&n->state, &s, mkst(gen, ST_FIRING),
		                                            memory_order_acq_rel,
		                                            memory_order_acquire)) {
			struct tmo_timer *t = n->timer;
			struct ib_priv *p = TMO__PRIV(struct ib_priv, t);
			/* read before the callback: it may free or re-arm the timer */
			tmo_callback *cb = t->cb;
			void *arg = t->arg;
			atomic_store_explicit(&e->running, t, memory_order_relaxed);
			uint64_t o = atomic_load_explicit(&p->outcome, memory_order_relaxed);
			atomic_store_explicit(&p->outcome, (o & ~(uint64_t)3) | OUT_FIRED,
			                      memory_order_release);
			/* seqlock: a re-arm inside the callback writes after this */
			atomic_thread_fence(memory_order_release);
			bump(&e->fired);
			atomic_store_explicit(&e->in_callback, 1, memory_order_relaxed);
			cb(t, arg);
			atomic_store_explicit(&e->in_callback, 0, memory_order_relaxed);
			atomic_store_explicit(&e->running, NULL, memory_order_release);
			atomic_store_explicit(&n->state, mkst(gen, ST_FREE), memory_order_release);
			/* after that store: a cancel waiting on FIRING wakes */
			ck_ec32_add(&e->done_ec, &ec_mode, 1);
			node_release(e, n);
		}
		n = next;
	}
}

static void park_hook(struct tmo *e)
{
	pthread_mutex_lock(&e->park_lock);
	if (e->park_req) {
		e->parked = 1;
		pthread_cond_broadcast(&e->park_cv);
		while (e->park_req && !atomic_load(&e->stop))
			pthread_cond_wait(&e->park_cv, &e->park_lock);
		e->parked = 0;
	}
	pthread_mutex_unlock(&e->park_lock);
}

static void *timer_main(void *arg)
{
	struct tmo *e = arg;
	tls_timer_of = e;
	tmo__thread_engine = e;
	for (;;) {
		if (UNLIKELY(atomic_load_explicit(&e->park_flag, memory_order_acquire)))
			park_hook(e);
		if (UNLIKELY(atomic_load_explicit(&e->stop, memory_order_acquire)))
			break;
		atomic_store_explicit(&e->rounds, atomic_load_explicit(&e->rounds, memory_order_relaxed) + 1,
		                      memory_order_relaxed);

		int busy = drain(e);
		int64_t now = tmo_now_ns();
		if (UNLIKELY(e->loose != NULL))
			loose_retry(e);
		if (UNLIKELY(atomic_load_explicit(&e->fill_req, memory_order_acquire))) {
			/* a producer found no free magazine: hand over ours */
			atomic_store_explicit(&e->fill_req, 0, memory_order_relaxed);
			fill_publish(e);
			atomic_fetch_add_explicit(&e->fill_ack, 1, memory_order_release);
			ck_ec32_add(&e->mag_ec, &ec_mode, 1);
		}

		e->due_head = NULL;
		e->due_tail = &e->due_head;
		e->due_count = 0;
		if (UNLIKELY(e->unfiled != NULL))
			retry_unfiled(e, now);
		e->sched->collect(S(e), now, due_append, e);
		atomic_store_explicit(&e->filed, e->sched->count(S(e)), memory_order_relaxed);
		atomic_store_explicit(&e->struct_bytes,
		                      e->sched->bytes(S(e)) + (uint64_t)e->batch_cap * sizeof *e->batch,
		                      memory_order_relaxed);
		if (e->due_head != NULL) {
			/* a burst due at one instant (one deadline) gains nothing
			 * from sorting: it is skipped above DUE_SORT_MAX */
			if (e->sched->deadline != NULL && e->due_count <= DUE_SORT_MAX)
				e->due_head = due_sort(e, e->due_head, e->due_count);
			fire_due(e, e->due_head);
			continue; /* callbacks took time: look again before sleeping */
		}

		int64_t wake_at = e->sched->next_deadline(S(e));
		if (e->unfiled != NULL && wake_at - now > UNFILED_RETRY_NS)
			wake_at = now + UNFILED_RETRY_NS;
		int nap = 0;
		if (e->nap_ns > 0) {
			if (busy)
				e->idle_naps = 0;
			else if (e->idle_naps < NAP_IDLE_MAX)
				e->idle_naps++;
			if (e->idle_naps < NAP_IDLE_MAX) {
				nap = 1;
				if (wake_at - now > e->nap_ns)
					wake_at = now + e->nap_ns;
			}
		}
		if (nap != e->napping_cached) {
			atomic_store_explicit(&e->napping, nap, memory_order_seq_cst);
			e->napping_cached = nap;
		}
		uint32_t v = ck_ec32_value(&e->wake_ec);
		/* Dekker with inbox_post: napping = 0 is visible before we look at
		 * the inbox, or the producer's push is visible to us. */
		atomic_thread_fence(memory_order_seq_cst);
		if (ck_pr_load_ptr(&e->inbox.head) != NULL)
			continue;
		if (atomic_load_explicit(&e->park_flag, memory_order_acquire) ||
		    atomic_load_explicit(&e->stop, memory_order_acquire))
			continue;
		ec_wait_until(&e->wake_ec, v, wake_at);
	}
	return NULL;
}

static void wake_timer(struct tmo *e) { ck_ec32_add(&e->wake_ec, &ec_mode, 1); }

/* ---- create / destroy ------------------------------------------------------ */

static void free_slabs(struct tmo *e)
{
	while (e->slabs != NULL) {
		struct slab *sl = e->slabs;
		e->slabs = sl->next;
		tmo__free(sl->raw);
		tmo__free(sl);
	}
}

int tmo__ib_create(const struct tmo__ib_params *p, const struct tmo_config *cfg,
                   struct tmo **out)
{
	pthread_once(&g_cal_once, cal_init);
	int64_t res = cfg->resolution_ns > 0 ? cfg->resolution_ns : p->resolution_ns;
	struct tmo *e = tmo__aligned_alloc(64, sizeof *e + p->sched->size);
	if (e == NULL)
		return TMO_ENOMEM;
	memset(e, 0, sizeof *e + p->sched->size);
	e->base.ops = p->ops;
	e->sched = p->sched;
	e->id = atomic_fetch_add(&g_next_id, 1);
	e->margin_ns = res / 20 > MARGIN_NS ? (double)(res / 20) : (double)MARGIN_NS;
	/* the poll period scales with a configured resolution */
	e->nap_ns = p->nap_ns > 0 && p->resolution_ns > 0 ? p->nap_ns * res / p->resolution_ns : 0;
	if (p->nap_ns > 0 && e->nap_ns <= 0)
		e->nap_ns = 1;
	ck_stack_init(&e->inbox);
	ck_stack_init(&e->full_mags);
	ck_stack_init(&e->empty_mags);
	ck_ec32_init(&e->wake_ec, 0);
	ck_ec32_init(&e->done_ec, 0);
	ck_ec32_init(&e->mag_ec, 0);
	e->next_slab = SLAB_FIRST;

	int rc = TMO_ESYS;
	if (pthread_mutex_init(&e->grow_lock, NULL) != 0)
		goto fail_free;
	if (pthread_mutex_init(&e->park_lock, NULL) != 0)
		goto fail_grow;
	if (pthread_cond_init(&e->park_cv, NULL) != 0)
		goto fail_park;
	rc = e->sched->init(S(e), res, tmo_now_ns());
	if (rc != 0)
		goto fail_cv;
	rc = TMO_ENOMEM;
	e->batch_cap = BATCH_FIRST;
	e->batch = tmo__malloc(BATCH_FIRST * sizeof *e->batch);
	if (e->batch == NULL)
		goto fail_sched;
	rc = slab_add(e, NULL, 0);
	if (rc != 0)
		goto fail_batch;
	rc = tmo__thread_create(&e->thread, NULL, timer_main, e);
	if (rc != 0)
		goto fail_slabs;
	*out = e;
	return 0;

fail_slabs:
	free_slabs(e);
fail_batch:
	tmo__free(e->batch);
fail_sched:
	e->sched->fini(S(e));
fail_cv:
	pthread_cond_destroy(&e->park_cv);
fail_park:
	pthread_mutex_destroy(&e->park_lock);
fail_grow:
	pthread_mutex_destroy(&e->grow_lock);
fail_free:
	tmo__free(e);
	return rc;
}

void tmo__ib_destroy(struct tmo *e)
{
	atomic_store_explicit(&e->stop, 1, memory_order_release);
	pthread_mutex_lock(&e->park_lock);
	pthread_cond_broadcast(&e->park_cv);
	pthread_mutex_unlock(&e->park_lock);
	wake_timer(e);
	pthread_join(e->thread, NULL);

	/* No arm or cancel runs now (the contract).  Every arm still QUEUED or
	 * filed is cancelled: record it in its timer so the timer reads as idle
	 * (it may be armed again elsewhere). */
	for (struct slab *sl = e->slabs; sl != NULL; sl = sl->next) {
		for (uint32_t i = 0; i < sl->nnodes; i++) {
			struct tmo__ib_node *n = &sl->nodes[i];
			uint64_t s = atomic_load_explicit(&n->state, memory_order_acquire);
			if (st_of(s) == ST_QUEUED || st_of(s) == ST_IN_STRUCT) {
				struct ib_priv *p = TMO__PRIV(struct ib_priv, n->timer);
				uint64_t o = atomic_load_explicit(&p->outcome, memory_order_relaxed);
				atomic_store_explicit(&p->outcome, (o & ~(uint64_t)3) | OUT_CANCELLED,
				                      memory_order_release);
			}
		}
	}

	/* Caches still naming this engine die with it: mark them dead (their
	 * owners drop them without touching the nodes). */
	pthread_mutex_lock(&g_lock);
	while (e->slots != NULL) {
		struct tls_slot *s = e->slots;
		e->slots = s->next;
		atomic_store_explicit(&s->id, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g_lock);

	e->sched->fini(S(e));
	free_slabs(e);
	tmo__free(e->batch);
	pthread_cond_destroy(&e->park_cv);
	pthread_mutex_destroy(&e->park_lock);
	pthread_mutex_destroy(&e->grow_lock);
	tmo__free(e);
}

/* ---- stats, park, debug ----------------------------------------------------- */

/* Arms minus fires minus prevented cancels, from every thread's counters. */
static uint64_t counts(struct tmo *e, uint64_t *fired_out, uint64_t *prevented_out)
{
	uint64_t armed, prevented;
	pthread_mutex_lock(&g_lock);
	armed = e->armed_retired;
	prevented = e->prevented_retired;
	for (struct tls_slot *s = e->slots; s != NULL; s = s->next) {
		armed += atomic_load_explicit(&s->armed, memory_order_relaxed);
		prevented += atomic_load_explicit(&s->prevented, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g_lock);
	uint64_t fired = atomic_load_explicit(&e->fired, memory_order_relaxed);
	if (fired_out != NULL)
		*fired_out = fired;
	if (prevented_out != NULL)
		*prevented_out = prevented;
	return armed > fired + prevented ? armed - fired - prevented : 0;
}

static uint64_t pending_now(struct tmo *e) { return counts(e, NULL, NULL); }

int tmo__ib_stats(struct tmo *e, struct tmo_stats *out)
{
	uint64_t fired, prevented;
	out->pending = counts(e, &fired, &prevented);
	out->held_nodes = atomic_load_explicit(&e->nodes_total, memory_order_relaxed);
	out->held_bytes = atomic_load_explicit(&e->slab_bytes, memory_order_relaxed) +
	                  atomic_load_explicit(&e->struct_bytes, memory_order_relaxed);
	out->threads = 1;
	out->fired = fired;
	out->cancelled = prevented;
	return 0;
}

int tmo__ib_park(struct tmo *e, int on)
{
	pthread_mutex_lock(&e->park_lock);
	if (on) {
		e->park_req = 1;
		atomic_store_explicit(&e->park_flag, 1, memory_order_release);
		wake_timer(e);
		while (!e->parked)
			pthread_cond_wait(&e->park_cv, &e->park_lock);
	} else {
		e->park_req = 0;
		atomic_store_explicit(&e->park_flag, 0, memory_order_release);
		pthread_cond_broadcast(&e->park_cv);
	}
	pthread_mutex_unlock(&e->park_lock);
	return 0;
}

void *tmo__ib_timer_node(const struct tmo_timer *t, uint64_t *gen)
{
	const struct ib_priv *p = (const struct ib_priv *)(const void *)t->tmo_private;
	if (gen != NULL)
		*gen = atomic_load_explicit(&p->ngen, memory_order_relaxed);
	return atomic_load_explicit(&p->node, memory_order_relaxed);
}

void tmo__ib_debug(struct tmo *e, struct tmo__ib_debug *out)
{
	out->filed = atomic_load_explicit(&e->filed, memory_order_relaxed);
	out->slabs = atomic_load_explicit(&e->slab_count, memory_order_relaxed);
	out->waits = atomic_load_explicit(&e->waits, memory_order_relaxed);
	out->cache_count = 0;
	for (unsigned i = 0; i < TMO__IB_SLOTS; i++)
		if (atomic_load_explicit(&tls_slots[i].id, memory_order_relaxed) == e->id &&
		    tls_slots[i].mag != NULL)
			out->cache_count = tls_slots[i].mag->count;
}
