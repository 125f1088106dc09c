/*
 * The lock-free core's fuzz target (tests/fuzz/lf.c): the node pool, read
 * while nothing moves it.  What an arm could take (the TMO_EAGAIN rule at
 * lf.c's top), and the audit: every free node (record caches, spares and homes,
 * the timer thread's cache, depot chains, loose) in exactly one list, each
 * list as long as its count, no cache past LF_CACHE_BOUND, the pool below
 * its soft limit; every timer's word as the model says, a pending timer's
 * node live and its own; the nodes in use at least the pending arms and at
 * most those plus what may be in transit (exactly those at the end of a
 * draining program).
 */
#include "lf_fuzz.h"

/* Free nodes an arm on this thread could take (the rule at lf.c's top). */
int64_t pool_avail(uint64_t own_cache)
{
	struct lf_pool *p = &fz.e->pool;
	uint64_t pages = atomic_load_explicit(&p->populated_pages, memory_order_relaxed);
	uint64_t cap_pages = p->reserved_nodes_cap / PAGE_NODES;
	return (int64_t)(own_cache + tmo__lf_spares_count(fz.e) +
	                 atomic_load_explicit(&p->depot_nodes, memory_order_relaxed) +
	                 (cap_pages - pages) * PAGE_NODES);
}

/* Marks a free list's nodes; returns how many. */
static uint64_t walk_free(struct lf_node *x, uint8_t *seen, uint64_t hwm, const char *what)
{
	uint64_t n = 0;
	for (; x != NULL; x = x->free_next) {
		uintptr_t off = (uintptr_t)((char *)x - fz.e->pool.arena);
		FUZZ_CHECK(off % sizeof *x == 0 && off / sizeof *x < hwm,
		           "%s: a free node outside the populated arena", what);
		uint32_t k = lf_idx_of(fz.e, x);
		FUZZ_CHECK(!seen[k], "node %u is in two free lists, or twice in one (%s)", k, what);
		seen[k] = 1;
		n++;
	}
	return n;
}

/* Marks the nodes of chains linked as the depot's (the depot, a record's
 * spare), each as long as its head counts; returns how many. */
static uint64_t walk_chains(struct lf_node *c, uint8_t *seen, uint64_t hwm, const char *what)
{
	uint64_t total = 0;
	for (; c != NULL; c = (struct lf_node *)atomic_load(&c->aux)) {
		FUZZ_CHECK(lf_idx_of(fz.e, c) < hwm, "%s: a chain outside the arena", what);
		uint32_t want = c->s.chain_n;
		uint64_t n = walk_free(c, seen, hwm, what);
		FUZZ_CHECK(n == want, "%s: a chain holds %llu nodes, counts %u", what,
		           (unsigned long long)n, want);
		total += n;
	}
	return total;
}

/* Every check of the node accounting; `exact`: nothing may be in transit
 * and no ring holds a cancelled arm (the end of a draining program). */
void audit(int exact)
{
	struct tmo *e = fz.e;
	struct lf_pool *p = &e->pool;
	uint64_t hwm = (uint64_t)atomic_load(&p->hwm_pages) * PAGE_NODES;
	uint64_t populated = atomic_load(&p->populated_pages) * PAGE_NODES;
	FUZZ_CHECK(populated <= hwm && hwm <= p->reserved_nodes_cap,
	           "pool: %llu nodes populated, %llu ever, cap %llu", (unsigned long long)populated,
	           (unsigned long long)hwm, (unsigned long long)p->reserved_nodes_cap);
	FUZZ_CHECK(populated < SOFT_NODES, "pool: %llu nodes for %d timers",
	           (unsigned long long)populated, TIMERS);
	uint8_t *seen = calloc(hwm + 1, 1);
	FUZZ_CHECK(seen != NULL, "out of memory");

	uint64_t free_n = 0, attached = 0;
	for (struct lf_rec *r = atomic_load(&e->recs); r != NULL; r = atomic_load(&r->next)) {
		uint64_t n = walk_free(r->cache, seen, hwm, "a record's cache");
		FUZZ_CHECK(n == r->cache_n, "a record's cache holds %llu nodes, counts %u",
		           (unsigned long long)n, r->cache_n);
		FUZZ_CHECK(n <= LF_CACHE_BOUND,
		           "a record's cache holds %llu free nodes, more than LF_CACHE_BOUND (%d), that "
		           "no other thread can take (the depot holds %llu, %llu nodes populated)",
		           (unsigned long long)n, LF_CACHE_BOUND,
		           (unsigned long long)atomic_load(&p->depot_nodes), (unsigned long long)populated);
		free_n += n;
		attached += r->attached != 0;
		uint64_t spare = walk_chains(atomic_load(&r->spare), seen, hwm, "a record's spare");
		FUZZ_CHECK(spare == atomic_load(&r->spare_n) && spare <= LF_SPARE_MAX,
		           "a record's spare holds %llu nodes, counts %u (at most %d)",
		           (unsigned long long)spare, atomic_load(&r->spare_n), LF_SPARE_MAX);
		free_n += spare;
		uint64_t home = walk_free(atomic_load(&r->home), seen, hwm, "a record's home");
		FUZZ_CHECK(home == atomic_load(&r->home_n), "a record's home holds %llu nodes, counts %u",
		           (unsigned long long)home, atomic_load(&r->home_n));
		free_n += home;
	}
	uint64_t n = walk_free(e->tt_rec->cache, seen, hwm, "the timer thread's cache");
	FUZZ_CHECK(n == e->tt_rec->cache_n, "the timer thread's cache holds %llu nodes, counts %u",
	           (unsigned long long)n, e->tt_rec->cache_n);
	free_n += n;
	uint64_t dw = atomic_load(&p->depot);
	uint64_t depot = walk_chains((uint32_t)dw ? lf_node_at(e, (uint32_t)dw - 1) : NULL, seen, hwm,
	                             "the depot");
	FUZZ_CHECK(depot == atomic_load(&p->depot_nodes), "depot holds %llu nodes, counts %llu",
	           (unsigned long long)depot, (unsigned long long)atomic_load(&p->depot_nodes));
	free_n += depot;
	/* loose nodes are linked through `link`, which shares free_next's place */
	if (p->loose.head != NULL)
		free_n += walk_free(lf_node_of_link(p->loose.head), seen, hwm, "loose");

	uint64_t pending = 0;
	for (int i = 0; i <= TIMERS; i++) {
		struct tmodel *m = &fz.m[i];
		uint64_t w = atomic_load(lf_timer_word(&fz.t[i]));
		if (!is_pending(m)) {
			FUZZ_CHECK(lf_word_out(w) == m->out, "timer %d (%s): word outcome %u, model %u", i,
			           state_name[m->st], lf_word_out(w), m->out);
			continue;
		}
		pending++;
		FUZZ_CHECK(lf_word_out(w) == LF_PENDING, "timer %d (%s): word outcome %u, not pending",
		           i, state_name[m->st], lf_word_out(w));
		uint32_t k = lf_word_idx(w);
		FUZZ_CHECK(k < hwm, "timer %d: its node %u is outside the arena", i, k);
		struct lf_node *x = lf_node_at(e, k);
		uint64_t s = atomic_load(&x->state);
		unsigned st = lf_st_of(s);
		FUZZ_CHECK(lf_gen_of(s) == lf_word_gen(w) &&
		               (st == LF_RING || st == LF_QUEUED || st == LF_IN_STRUCT),
		           "timer %d (pending): its node %u has moved on (state %u, generation %llu, "
		           "the arm's %llu)",
		           i, k, st, (unsigned long long)lf_gen_of(s), (unsigned long long)lf_word_gen(w));
		FUZZ_CHECK(x->timer == &fz.t[i], "timer %d: its node %u names another timer", i, k);
		FUZZ_CHECK(seen[k] == 0, "timer %d (pending): its node %u is %s", i, k,
		           seen[k] == 1 ? "in a free list" : "another pending timer's too");
		seen[k] = 2;
	}
	free(seen);

	FUZZ_CHECK(free_n <= populated, "pool: %llu free nodes of %llu", (unsigned long long)free_n,
	           (unsigned long long)populated);
	uint64_t in_use = populated - free_n;
	uint64_t slack = exact ? 0 : LF_RING_SLOTS * attached + fz.prevents_since_settle;
	FUZZ_CHECK(in_use >= pending && in_use - pending <= slack,
	           "pool: %llu nodes in use, %llu pending arms, at most %llu more in transit "
	           "(a leak%s)",
	           (unsigned long long)in_use, (unsigned long long)pending, (unsigned long long)slack,
	           exact ? ": the program drained everything" : "");
}
