/*
 * tmo/engine.h — an engine built outside the library, loaded at run time.
 *
 * An engine is a `struct tmo_engine_ops` (tmo/tmo.h): its slots, caps and
 * resolution, and the contract tmo.h states above them.  Built into a shared
 * object that exports one symbol, it can be run by everything the library's
 * own engines run under:
 *
 *   ./harness --impl=./my_engine.so --scenario=race --quick
 *   build/release/tests/test_engine_contract ./my_engine.so
 *   scripts/conform ./my_engine.so        (the whole suite, one table)
 *
 * docs/writing-an-engine.md is the guide; examples/engine/ a short engine.
 *
 * The shared object: one file, `cc -shared -fPIC`, headers from
 * `pkg-config --cflags tmo`, NOT linked with -ltmo (the process that loads
 * it has the library; a second copy would be a second core).  It declares
 * its table and exports it:
 *
 *   static const struct tmo_engine_ops my_ops = {.name = "mine", ...};
 *   TMO_ENGINE_EXPORT(my_ops);
 *
 * and calls tmo_engine_thread_enter(self, "mine") first in every thread it
 * starts; it allocates and starts threads through tmo_engine_calloc,
 * tmo_engine_free and tmo_engine_thread_create (the suite's allocation
 * counts and fault injection then reach it).
 *
 * The loader (tmo_engine_load) opens the file (dlopen, RTLD_NOW |
 * RTLD_LOCAL; never closed: the ops live as long as the process), finds
 * TMO_ENGINE_SYMBOL, checks the ABI version and the table's size, then the
 * table itself (tmo_engine_check), and gives the engine the host's services
 * before the first create.  Each refusal is a named error (enum
 * tmo_load_error) with a sentence that says what was wrong.
 */
#ifndef TMO_ENGINE_H
#define TMO_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tmo/tmo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever struct tmo_engine_ops, struct tmo_base, struct tmo_timer,
 * struct tmo_stats (an engine's stats op fills it) or struct
 * tmo_engine_host changes layout or meaning: an engine built against
 * another version is refused (TMO_LOAD_EABI), never run.  3: tmo_stats
 * gained `skewed`. */
#define TMO_ENGINE_ABI_VERSION 3u

/* The one symbol the loader looks up. */
#define TMO_ENGINE_SYMBOL "tmo_engine_abi"

/* What the process that loaded the engine offers it.  Set by the loader
 * before the engine's first create; never changes afterwards. */
struct tmo_engine_host {
	uint32_t abi_version;
	/* Call first thing in every thread the engine starts (timer threads,
	 * the threads that run callbacks): names the thread "tmo-<engine>" (the
	 * tests count an engine's threads by that name) and lets the core
	 * refuse tmo_destroy() and tmo_testing_park() from that thread with
	 * TMO_EDEADLK, as tmo.h promises for every engine. */
	void (*thread_enter)(struct tmo *self, const char *engine);
	/* The library's allocator and thread creation.  Engines that use them
	 * are seen by the suite as the library's own engines are: the caps test
	 * counts arm's and cancel's allocations (TMO_CAP_NO_ALLOC), the fault
	 * tests make the N-th allocation or thread creation fail and check that
	 * the call returns a named error and leaks nothing, and the leak checks
	 * count what is live (tmo/testing.h). */
	void *(*calloc)(size_t nmemb, size_t size); /* NULL when it fails */
	void (*free)(void *p);
	/* pthread_create: 0, or TMO_EAGAIN when it fails. */
	int (*thread_create)(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
	                     void *arg);
	/* The cross-engine deadlock check (tmo.h, tmo_cancel: TMO_EDEADLK), which
	 * every engine whose cancel waits for a running callback joins: on the
	 * thread that runs callbacks, cb_begin() just before each callback and
	 * cb_end() just after it, keeping cb_begin's value where a cancel reads
	 * it (under the engine's lock, with the running timer); a cancel about
	 * to wait for that running callback calls wait_begin(value) first, and
	 * on TMO_EDEADLK returns it at once, having changed nothing; after the
	 * wait, wait_end(). */
	uint64_t (*cb_begin)(void);
	void (*cb_end)(void);
	int (*wait_begin)(uint64_t ref); /* 0: wait; TMO_EDEADLK: do not */
	void (*wait_end)(void);
};

/* The exported symbol. */
struct tmo_engine_abi {
	uint32_t abi_version; /* TMO_ENGINE_ABI_VERSION the engine was built with */
	uint32_t ops_size;    /* sizeof(struct tmo_engine_ops) it was built with */
	const struct tmo_engine_ops *ops;
	/* Where the loader stores the host's services (the engine's own
	 * variable, defined by TMO_ENGINE_EXPORT). */
	const struct tmo_engine_host **host;
};

/* Defined by TMO_ENGINE_EXPORT inside the engine's shared object. */
extern const struct tmo_engine_host *tmo_engine_host_ __attribute__((visibility("hidden")));

/* Export `ops` (a struct tmo_engine_ops object) as this shared object's
 * engine.  Once per shared object, at file scope. */
#define TMO_ENGINE_EXPORT(ops)                                                         \
	const struct tmo_engine_host *tmo_engine_host_;                                    \
	extern __attribute__((visibility("default"))) const struct tmo_engine_abi          \
	    tmo_engine_abi;                                                                \
	const struct tmo_engine_abi tmo_engine_abi = {                                     \
	    TMO_ENGINE_ABI_VERSION, (uint32_t)sizeof(struct tmo_engine_ops), &(ops),       \
	    &tmo_engine_host_}

/* The host's services (struct tmo_engine_host), for use inside a shared
 * object that uses TMO_ENGINE_EXPORT, from its first create on. */
static inline void tmo_engine_thread_enter(struct tmo *self, const char *engine)
{
	tmo_engine_host_->thread_enter(self, engine);
}
static inline void *tmo_engine_calloc(size_t nmemb, size_t size)
{
	return tmo_engine_host_->calloc(nmemb, size);
}
static inline void tmo_engine_free(void *p) { tmo_engine_host_->free(p); }
static inline int tmo_engine_thread_create(pthread_t *th, const pthread_attr_t *attr,
                                           void *(*fn)(void *), void *arg)
{
	return tmo_engine_host_->thread_create(th, attr, fn, arg);
}
static inline uint64_t tmo_engine_cb_begin(void) { return tmo_engine_host_->cb_begin(); }
static inline void tmo_engine_cb_end(void) { tmo_engine_host_->cb_end(); }
static inline int tmo_engine_wait_begin(uint64_t ref) { return tmo_engine_host_->wait_begin(ref); }
static inline void tmo_engine_wait_end(void) { tmo_engine_host_->wait_end(); }

/* ---- the loader (in the library) ----------------------------------------- */

enum tmo_load_error {
	TMO_LOAD_OK = 0,
	TMO_LOAD_ENOFILE = -1,  /* no such file */
	TMO_LOAD_EDLOPEN = -2,  /* dlopen refused it: not a shared object, another
	                           architecture, an unresolved symbol */
	TMO_LOAD_ENOSYM = -3,   /* it exports no TMO_ENGINE_SYMBOL */
	TMO_LOAD_EABI = -4,     /* built against another TMO_ENGINE_ABI_VERSION,
	                           or another size of struct tmo_engine_ops */
	TMO_LOAD_ETABLE = -5,   /* the table is wrong (tmo_engine_check) */
};

/* "TMO_LOAD_ENOSYM" for an enum tmo_load_error, "TMO_LOAD_?" otherwise. */
const char *tmo_load_errname(int err);

/* Load the engine in the shared object at `path`.  Returns 0 and sets *out,
 * or a negative enum tmo_load_error with a sentence in why[0..whylen) (may
 * be NULL).  Loading the same file again gives the same table. */
int tmo_engine_load(const char *path, const struct tmo_engine_ops **out, char *why,
                    size_t whylen);

/* Whether a table can be run: a name (1..31 characters of [A-Za-z0-9_.-],
 * none of the built-in engines' names, not "all"), a summary, the slots
 * create, destroy, arm, cancel and stats non-NULL (destroy_forked and
 * testing may be NULL), only enum tmo_cap bits in caps (never the retired
 * 1u << 3), 0 < resolution_ns <= 1 s, and TMO_CAP_PARK exactly when
 * testing->park is set.  Returns 0, or TMO_LOAD_ETABLE with the first
 * problem in `why`. */
int tmo_engine_check(const struct tmo_engine_ops *ops, char *why, size_t whylen);

/* Whether an --impl word names a shared object rather than a built-in
 * engine: it contains '/' or ends in ".so". */
int tmo_engine_is_path(const char *word);

#ifdef __cplusplus
}
#endif
#endif /* TMO_ENGINE_H */
