/*
 * The throughput scenario's limit: the engine's own structure driven alone
 * (tp.h, struct tp_ds), unlocked on one thread, by the same seed, held and
 * live loops as the engine (bench.c).  wheel files its timers in
 * src/ds/wheel.c, condvar in src/ds/heap.c, mpsc in the near/far heap over
 * a wheel of src/lf/schedule.c (driven through its table, on 64-byte
 * nodes, as mpsc's timer thread drives it); an engine whose
 * structure is not in the tree (thread, libevent, posix, a peer's library,
 * an engine loaded from a file) has none, and its rows say "-".
 *
 * The wheel gets the engine's resolution and is advanced once per batch of
 * the loop, as the engine's timer thread advances its wheels; near/far
 * collects once per batch when its next deadline has come; the heap is
 * the engines' (TMO_HEAP_DEFAULT_ARITY) on malloc.
 */
#include "tp.h"

static const struct {
	const char *engine;
	enum tp_on kind;
} tp_structures[] = {
	{"wheel", TP_WHEEL},
	{"condvar", TP_HEAP},
	{"mpsc", TP_NEAR_FAR},
};

static void *ds_alloc(size_t n) { return malloc(n); }
static void *ds_realloc(void *p, size_t n) { return realloc(p, n); }
static const struct tmo_heap_mem ds_mem = {ds_alloc, free, ds_realloc};

void tp_ds_due(void *ctx, struct lf_node *n)
{
	(void)ctx;
	(void)n;
}

/* n nodes of the engine's arena's kind, zeroed as the arena's are;
 * ds_nodes_init then marks each out of the heap. */
static struct lf_node *lf_nodes_new(size_t n)
{
	struct lf_node *l = aligned_alloc(64, n * sizeof *l);
	if (l != NULL)
		memset(l, 0, n * sizeof *l);
	return l;
}

static void ds_nodes_init(struct tp_ds *d, size_t from, size_t to, int background)
{
	for (size_t i = from; i < to; i++) {
		if (d->kind == TP_NEAR_FAR)
			tmo__heap_node_init(background ? &d->lbg[i].s.heap : &d->ln[i].s.heap);
		else if (d->kind == TP_WHEEL)
			tmo__wheel_node_init(background ? &d->wbg[i] : &d->wn[i]);
		else
			tmo__heap_node_init(background ? &d->hbg[i] : &d->hn[i]);
	}
}

struct tp_ds *tp_ds_new(const struct sk_run *run)
{
	size_t k = 0, n = sizeof tp_structures / sizeof tp_structures[0];
	while (k < n && strcmp(tp_structures[k].engine, run->ops->name) != 0)
		k++;
	if (k == n)
		return NULL;
	struct tp_ds *d = calloc(1, sizeof *d);
	if (d == NULL)
		goto short_of_memory;
	d->kind = tp_structures[k].kind;
	d->name = d->kind == TP_WHEEL ? "wheel" : d->kind == TP_NEAR_FAR ? "near_far" : "heap";
	d->now = tmo_now_ns();
	d->held.at = calloc(HELD_RING, sizeof *d->held.at);
	int rc;
	if (d->kind == TP_WHEEL) {
		d->wn = calloc(HELD_RING, sizeof *d->wn);
		rc = tmo__wheel_init(&d->wheel, run->ops->resolution_ns, d->now);
	} else if (d->kind == TP_NEAR_FAR) {
		d->sc = &tmo__lf_sched_near_far;
		d->ln = lf_nodes_new(HELD_RING);
		d->nf = aligned_alloc(64, (d->sc->size + 63) & ~(size_t)63);
		rc = d->nf == NULL ? TMO_ENOMEM : d->sc->init(d->nf, run->ops->resolution_ns, d->now);
	} else {
		d->hn = calloc(HELD_RING, sizeof *d->hn);
		rc = tmo__heap_init_with(&d->heap, TMO_HEAP_DEFAULT_ARITY, 1024, &ds_mem);
	}
	if (rc != 0 || d->held.at == NULL || (d->wn == NULL && d->hn == NULL && d->ln == NULL)) {
		if (rc == 0 && d->kind == TP_HEAP)
			tmo__heap_fini(&d->heap);
		if (rc == 0 && d->kind == TP_NEAR_FAR)
			d->sc->fini(d->nf);
		free(d->held.at), free(d->wn), free(d->hn), free(d->ln), free(d->nf), free(d);
		goto short_of_memory;
	}
	ds_nodes_init(d, 0, HELD_RING, 0);
	return d;
short_of_memory:
	printf("structure alone: not measured (out of memory)\n");
	return NULL;
}

/* 1 (a violation, reported) when d (or NULL) handed out nodes as due. */
int tp_ds_fired(const struct sk_run *run, const struct tp_ds *d)
{
	if (d == NULL || d->fired == 0)
		return 0;
	sk_violation(run, "the %s alone handed out %lld nodes as due, none of them due for 1 s or more",
	             d->name, d->fired);
	return 1;
}

void tp_ds_free(struct tp_ds *d)
{
	if (d == NULL)
		return;
	tp_ds_drain(d);
	if (d->kind == TP_HEAP)
		tmo__heap_fini(&d->heap);
	if (d->kind == TP_NEAR_FAR)
		d->sc->fini(d->nf);
	free(d->held.at), free(d->wn), free(d->hn), free(d->ln), free(d->nf), free(d);
}

int tp_ds_fill(struct tp_ds *d, size_t n, struct sk_rng *rng)
{
	tp_ds_drain(d);
	if (d->kind == TP_WHEEL)
		d->wbg = calloc(n, sizeof *d->wbg);
	else if (d->kind == TP_NEAR_FAR)
		d->lbg = lf_nodes_new(n);
	else
		d->hbg = calloc(n, sizeof *d->hbg);
	if (d->wbg == NULL && d->hbg == NULL && d->lbg == NULL)
		return -1;
	d->nbg = n;
	ds_nodes_init(d, 0, n, 1);
	d->now = tmo_now_ns();
	for (size_t i = 0; i < n; i++) {
		/* tp_arm_background's draws, in its order */
		int64_t timeout = 60 * TMO_NSEC_PER_SEC + (int64_t)sk_below(rng, 3540) * TMO_NSEC_PER_SEC +
		                  (int64_t)sk_below(rng, (uint64_t)TMO_NSEC_PER_SEC);
		if (d->kind == TP_WHEEL) {
			tmo__wheel_add(&d->wheel, &d->wbg[i], d->now + timeout);
		} else if (d->kind == TP_NEAR_FAR) {
			if (tp_nf_insert(d, &d->lbg[i], d->now + timeout) != 0) {
				d->nbg = i;
				return -1;
			}
		} else if (tmo__heap_push(&d->heap, &d->hbg[i], d->now + timeout) != 0) {
			d->nbg = i;
			return -1;
		}
	}
	return 0;
}

size_t tp_ds_drain(struct tp_ds *d)
{
	size_t gone = 0;
	for (size_t i = 0; i < d->nbg; i++) {
		if (d->kind == TP_WHEEL) {
			if (tmo__wheel_contains(&d->wbg[i]))
				tmo__wheel_del(&d->wheel, &d->wbg[i]);
			else
				gone++;
		} else if (d->kind == TP_NEAR_FAR) {
			if (d->sc->contains(&d->lbg[i]))
				d->sc->remove(d->nf, &d->lbg[i]);
			else
				gone++;
		} else {
			if (tmo__heap_contains(&d->hbg[i]))
				tmo__heap_remove(&d->heap, &d->hbg[i]);
			else
				gone++;
		}
	}
	free(d->wbg), free(d->hbg), free(d->lbg);
	d->wbg = NULL, d->hbg = NULL, d->lbg = NULL, d->nbg = 0;
	return gone;
}
