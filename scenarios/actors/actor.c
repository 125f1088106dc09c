/* The actors scenario's runtime: see actor.h. */
#include "actor.h"

#include "kit/util.h"

#define MS TMO_NSEC_PER_MSEC

/* ---- messages, actors, receive ------------------------------------------------- */

static void *actor_main(void *p)
{
	struct actor *a = p;
	a->fn(a);
	if (a->link != NULL) {
		a->exit_msg.kind = MSG_EXIT;
		a->exit_msg.from = a;
		tmo_queue_push(&a->link->mbox, &a->exit_msg.node);
	}
	return NULL;
}

/* Actor.spawn_link: start fn on its own thread, linked to `link`. */
int ac_spawn(struct actor *a, actor_fn *fn, void *arg, struct actor *link)
{
	a->fn = fn;
	a->arg = arg;
	a->link = link;
	int rc = tmo_queue_init(&a->mbox);
	if (rc != 0)
		return rc;
	if (pthread_create(&a->th, NULL, actor_main, a) != 0) {
		tmo_queue_destroy(&a->mbox);
		return TMO_EAGAIN;
	}
	return 0;
}

void ac_join(struct actor *a)
{
	pthread_join(a->th, NULL);
	tmo_queue_destroy(&a->mbox);
}

static void marker_cb(struct tmo_timer *t, void *arg)
{
	struct receiver *r = arg;
	(void)t;
	tmo_queue_push(r->mbox, &r->marker.node);
}

struct pop_arg {
	struct tmo_queue *q;
	struct tmo_qnode *n;
};

static intptr_t pop_block(void *arg)
{
	struct pop_arg *p = arg;
	tmo_queue_pop(p->q, TMO_WAIT_FOREVER, &p->n);
	return 1;
}

/* `receive ... after(after_ns)`: 0 with *out = the message, 1 when the after
 * clause runs, or a negative error. */
int ac_receive(struct receiver *r, int64_t after_ns, struct msg **out)
{
	struct tmo_qnode *n = NULL;
	r->receives++;
	*out = NULL;
	if (r->fast_path && tmo_queue_pop(r->mbox, 0, &n) == TMO_WAIT_OK) {
		*out = tmo_container_of(n, struct msg, node);
		return 0;
	}
	r->armed++;
	if (r->via == VIA_SCOPE) {
		struct pop_arg p = {r->mbox, NULL};
		int rc;
		while ((rc = tmo_scope_run(r->eng, after_ns, TMO_SCOPE_THROW, pop_block, &p, NULL,
		                           NULL)) == TMO_EAGAIN &&
		       r->eagain < 100000) {
			r->eagain++; /* a kernel-timer limit shared with other processes: retry */
			sk_sleep_ns(MS);
		}
		if (rc == 0) {
			*out = tmo_container_of(p.n, struct msg, node);
			return 0;
		}
		if (rc != TMO_ETIMEDOUT)
			return rc;
		if (p.n != NULL)
			r->lost++; /* a message taken and then interrupted away */
		r->timeouts++;
		return 1;
	}
	int rc;
	while ((rc = tmo_arm(r->eng, &r->timer, after_ns, marker_cb, r)) == TMO_EAGAIN &&
	       r->eagain < 100000) {
		r->eagain++; /* as above */
		sk_sleep_ns(MS);
	}
	if (rc != 0)
		return rc;
	rc = tmo_queue_pop(r->mbox, TMO_WAIT_FOREVER, &n);
	if (rc != TMO_WAIT_OK)
		return rc < 0 ? rc : TMO_ESYS;
	/* Cancel in every case: it also waits for a callback still running,
	 * so the timer and the marker are ours again before the next arm. */
	int c = tmo_cancel(r->eng, &r->timer);
	if (c < 0)
		return c;
	if (n == &r->marker.node) {
		r->timeouts++;
		return 1;
	}
	if (c == TMO_CANCEL_FIRED || c == TMO_CANCEL_WAITED) {
		/* The callback pushed the marker behind our message. */
		if (tmo_queue_remove(r->mbox, &r->marker.node))
			r->stale_markers++;
		else
			r->lost++; /* cannot happen: the marker vanished */
	}
	*out = tmo_container_of(n, struct msg, node);
	return 0;
}

/* ---- the corpus and the word table ---------------------------------------------- */

static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void ac_corpus_free(struct corpus *c)
{
	for (int i = 0; i < c->nvocab && c->vocab; i++)
		free(c->vocab[i]);
	free(c->vocab);
	for (int i = 0; i < c->ndocs && c->docs; i++) {
		free(c->docs[i].text);
		free(c->docs[i].msgs);
	}
	free(c->docs);
	memset(c, 0, sizeof *c);
}

/* ndocs documents of about `words` words each, from a vocabulary of nvocab
 * random words with a skewed (Zipf-like) frequency; separators include
 * punctuation and digits, which the mapper's scan skips as /[a-z]+/i does. */
int ac_corpus_make(struct corpus *c, uint64_t seed, int ndocs, int words, int nvocab)
{
	struct sk_rng rng = {seed ^ UINT64_C(0x5eed0f0c0de)};
	memset(c, 0, sizeof *c);
	c->vocab = calloc((size_t)nvocab, sizeof *c->vocab);
	c->docs = calloc((size_t)ndocs, sizeof *c->docs);
	if (c->vocab == NULL || c->docs == NULL)
		goto oom;
	c->nvocab = nvocab;
	c->ndocs = ndocs;
	for (int i = 0; i < nvocab; i++) {
		int len = 2 + (int)sk_below(&rng, 9);
		c->vocab[i] = malloc((size_t)len + 1);
		if (c->vocab[i] == NULL)
			goto oom;
		for (int k = 0; k < len; k++)
			c->vocab[i][k] = (char)((sk_below(&rng, 5) == 0 ? 'A' : 'a') + sk_below(&rng, 26));
		c->vocab[i][len] = 0;
	}
	static const char *seps[] = {" ", " ", " ", ", ", ". ", "\n", " - ", " 42 ", "'", "(1) "};
	for (int d = 0; d < ndocs; d++) {
		int n = words / 2 + (int)sk_below(&rng, (uint64_t)words);
		size_t cap = (size_t)n * 16 + 16, len = 0;
		char *t = malloc(cap);
		if (t == NULL)
			goto oom;
		for (int w = 0; w < n; w++) {
			double u = (double)sk_below(&rng, 1u << 30) / (double)(1u << 30);
			const char *word = c->vocab[(int)(u * u * u * nvocab)];
			const char *sep = seps[sk_below(&rng, sizeof seps / sizeof seps[0])];
			size_t wl = strlen(word), sl = strlen(sep);
			memcpy(t + len, word, wl);
			len += wl;
			memcpy(t + len, sep, sl);
			len += sl;
		}
		t[len] = 0;
		/* Count what the scan will see (a separator like "'" joins nothing:
		 * letters on both sides of it are two words). */
		uint32_t seen = 0;
		for (size_t i = 0; i < len; i++)
			if (is_alpha(t[i]) && (i == 0 || !is_alpha(t[i - 1])))
				seen++;
		c->docs[d].text = t;
		c->docs[d].len = len;
		c->docs[d].words = seen;
		c->docs[d].msgs = calloc(seen, sizeof(struct msg));
		if (c->docs[d].msgs == NULL)
			goto oom;
		c->total_words += seen;
	}
	return 0;
oom:
	ac_corpus_free(c);
	return TMO_ENOMEM;
}

int ac_table_init(struct table *t, size_t expect)
{
	t->cap = 16;
	while (t->cap < expect * 2)
		t->cap <<= 1;
	t->e = calloc(t->cap, sizeof *t->e);
	t->used = 0;
	t->total = 0;
	return t->e == NULL ? TMO_ENOMEM : 0;
}

static uint64_t fnv(const char *w, uint32_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)w[i]) * UINT64_C(0x100000001b3);
	return h;
}

struct entry *ac_table_slot(struct table *t, const char *w, uint32_t len)
{
	size_t i = (size_t)fnv(w, len) & (t->cap - 1);
	for (;; i = (i + 1) & (t->cap - 1)) {
		struct entry *e = &t->e[i];
		if (e->w == NULL || (e->len == len && memcmp(e->w, w, len) == 0))
			return e;
	}
}

/* The table never fills: it is sized for twice the vocabulary. */
void ac_table_add(struct table *t, const char *w, uint32_t len, uint64_t n)
{
	struct entry *e = ac_table_slot(t, w, len);
	if (e->w == NULL) {
		e->w = w;
		e->len = len;
		t->used++;
	}
	e->count += n;
	t->total += n;
}

/* The mapper's `scan(/[a-z]+/i)`: the next word at or after *pos.  Returns
 * 0 at the end of the document. */
int ac_next_word(const struct doc *d, size_t *pos, const char **w, uint32_t *len)
{
	size_t i = *pos;
	while (i < d->len && !is_alpha(d->text[i]))
		i++;
	if (i >= d->len)
		return 0;
	size_t s = i;
	while (i < d->len && is_alpha(d->text[i]))
		i++;
	*w = d->text + s;
	*len = (uint32_t)(i - s);
	*pos = i;
	return 1;
}
