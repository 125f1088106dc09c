/* The live engines of one kind, for fork handlers (forkset.h). */
#include "core/forkset.h"

void tmo__fork_set_join(struct tmo__fork_set *s, struct tmo_list *link)
{
	pthread_mutex_lock(&s->mu);
	if (!s->registered) {
		pthread_atfork(s->prepare, s->parent, s->child);
		s->registered = true;
	}
	tmo_list_add(&s->engines, link);
	pthread_mutex_unlock(&s->mu);
}

void tmo__fork_set_leave(struct tmo__fork_set *s, struct tmo_list *link)
{
	pthread_mutex_lock(&s->mu);
	tmo_list_del(link);
	pthread_mutex_unlock(&s->mu);
}
