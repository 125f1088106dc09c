/*
 * The live engines of one kind, for that kind's pthread_atfork handlers
 * (condvar, libevent and thread take their engines' locks before a fork so
 * that a child inherits consistent state; see each engine's header).
 *
 * Rule: an engine joins its kind's set at the end of create and leaves it
 * first thing in destroy and destroy_forked.  The handlers are registered
 * once, by the first join.  `mu` guards the list; the prepare handler takes
 * it and the parent and child handlers release it, so no engine joins or
 * leaves across a fork, and the handlers walk `engines` under it.
 */
#ifndef TMO_CORE_FORKSET_H
#define TMO_CORE_FORKSET_H

#include <pthread.h>
#include <stdbool.h>

#include "core/list.h"

struct tmo__fork_set {
	pthread_mutex_t mu;
	struct tmo_list engines;
	bool registered; /* under mu */
	void (*prepare)(void), (*parent)(void), (*child)(void);
};

#define TMO__FORK_SET_INIT(name, prepare, parent, child)                               \
	{PTHREAD_MUTEX_INITIALIZER, TMO_LIST_INIT((name).engines), false, prepare, parent, \
	 child}

/* Define the set `name` (`linkage`: static, or empty for one the engine's
 * other files share) and declare its handlers, static functions of this
 * file defined after it; parent and child may be the same function. */
#define TMO__FORK_SET(linkage, name, prepare, parent, child)                           \
	static void prepare(void), parent(void), child(void);                           \
	linkage struct tmo__fork_set name = TMO__FORK_SET_INIT(name, prepare, parent, child)

/* Join (registering the handlers on first use) and leave; each takes mu. */
void tmo__fork_set_join(struct tmo__fork_set *s, struct tmo_list *link);
void tmo__fork_set_leave(struct tmo__fork_set *s, struct tmo_list *link);

#endif /* TMO_CORE_FORKSET_H */
