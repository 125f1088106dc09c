/*
 * A small, CORRECT Concurrency Kit program: producers hand heap nodes to one
 * consumer through a ck_stack inbox (ck_stack_push_upmc / _batch_pop_upmc,
 * the shape of the mpsc engine's inbox).  The consumer reads what the
 * producers wrote into each node and frees it.
 *
 * Purpose (tests/seeded/sanitizers.cmake): in the TSan build, compiled with the CK
 * header override (cmake/ck_tsan.cmake), it must report no race.  Compiled
 * against the system CK headers, TSan cannot see CK's synchronisation and
 * reports false races: that contrast is what proves the override works.
 *
 * All threads stay alive until the consumer has seen every node (a final
 * barrier), so a report against a producer's accesses is never lost because
 * its thread had already exited.
 *
 * Exit status: 0 when every node arrived once with the payload its producer
 * wrote; 1 otherwise (TSan's own exit status when it reports).
 * Usage: ck_tsan_proof [producers [nodes_per_producer]]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <ck_pr.h>
#include <ck_stack.h>

struct node {
	ck_stack_entry_t entry; /* first: the stack hands back &entry */
	uint64_t producer;
	uint64_t seq;
	uint64_t check; /* producer * 2^32 + seq, written before the push */
};

static ck_stack_t inbox = CK_STACK_INITIALIZER;
static pthread_barrier_t start, finish;
static unsigned int producers_done;
static long nproducers = 2, nnodes = 20000;

static void *producer(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;

	pthread_barrier_wait(&start);
	for (long i = 0; i < nnodes; i++) {
		struct node *n = malloc(sizeof *n);
		if (n == NULL)
			abort();
		n->producer = id;
		n->seq = (uint64_t)i;
		n->check = (id << 32) + (uint64_t)i;
		ck_stack_push_upmc(&inbox, &n->entry);
	}
	ck_pr_inc_uint(&producers_done);
	pthread_barrier_wait(&finish);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		nproducers = strtol(argv[1], NULL, 10);
	if (argc > 2)
		nnodes = strtol(argv[2], NULL, 10);
	if (nproducers < 1 || nproducers > 64 || nnodes < 1) {
		fprintf(stderr, "usage: %s [producers 1..64 [nodes_per_producer >= 1]]\n", argv[0]);
		return 2;
	}

	pthread_t th[64];
	uint64_t *next_seq = calloc((size_t)nproducers, sizeof *next_seq);
	long received = 0, bad = 0;

	if (next_seq == NULL)
		return 1;
	pthread_barrier_init(&start, NULL, (unsigned)nproducers + 1);
	pthread_barrier_init(&finish, NULL, (unsigned)nproducers + 1);
	for (long p = 0; p < nproducers; p++)
		if (pthread_create(&th[p], NULL, producer, (void *)(uintptr_t)p) != 0)
			return 1;
	pthread_barrier_wait(&start);

	for (;;) {
		/* Read the counter before popping: once every producer is done,
		 * a pop after that read sees every push. */
		unsigned int done = ck_pr_load_uint(&producers_done);
		ck_stack_entry_t *e = ck_stack_batch_pop_upmc(&inbox);

		/* The consumer owns the chain it popped: read each payload the
		 * producer wrote before its push, then free the node. */
		while (e != NULL) {
			struct node *n = (struct node *)(void *)e;
			e = e->next;
			if (n->producer >= (uint64_t)nproducers ||
			    n->check != (n->producer << 32) + n->seq)
				bad++;
			else
				next_seq[n->producer]++;
			received++;
			free(n);
		}
		if (done == (unsigned int)nproducers && ck_pr_load_ptr(&inbox.head) == NULL)
			break;
	}
	pthread_barrier_wait(&finish);
	for (long p = 0; p < nproducers; p++)
		pthread_join(th[p], NULL);

	for (long p = 0; p < nproducers; p++)
		if (next_seq[p] != (uint64_t)nnodes)
			bad++;
	free(next_seq);
	printf("ck_tsan_proof: %ld producers x %ld nodes: received %ld, bad %ld\n", nproducers,
	       nnodes, received, bad);
	return received == nproducers * nnodes && bad == 0 ? 0 : 1;
}
