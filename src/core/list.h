/*
 * An intrusive, circular, doubly linked list with a sentinel head (the
 * Linux list_head shape): embed a struct tmo_list in the element, recover
 * the element with tmo_container_of().  No allocation, O(1) insert and
 * remove of any element.  Not synchronized: the caller's lock guards it.
 */
#ifndef TMO_CORE_LIST_H
#define TMO_CORE_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct tmo_list {
	struct tmo_list *prev, *next;
};

/* A head (or an unlinked element) points at itself. */
#define TMO_LIST_INIT(name) {&(name), &(name)}

static inline void tmo_list_init(struct tmo_list *l) { l->prev = l->next = l; }

static inline bool tmo_list_empty(const struct tmo_list *head) { return head->next == head; }

/* Insert n at the front of head. */
static inline void tmo_list_add(struct tmo_list *head, struct tmo_list *n)
{
	n->prev = head;
	n->next = head->next;
	head->next->prev = n;
	head->next = n;
}

/* Insert n at the back of head (a FIFO: take from head->next). */
static inline void tmo_list_add_tail(struct tmo_list *head, struct tmo_list *n)
{
	tmo_list_add(head->prev, n);
}

/* Unlink n (it then points at itself). */
static inline void tmo_list_del(struct tmo_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	tmo_list_init(n);
}

/* for (each element pointer `it` of `type` linked through `member`).  The
 * loop body must not unlink `it`: use tmo_list_for_each_safe for that. */
#define tmo_list_for_each(it, head, type, member)                                      \
	for (type *it = tmo_container_of((head)->next, type, member);                     \
	     &it->member != (head); it = tmo_container_of(it->member.next, type, member))

/* As above; the body may unlink (and free) `it`. */
#define tmo_list_for_each_safe(it, head, type, member)                                 \
	for (type *it = tmo_container_of((head)->next, type, member),                     \
	          *it##_next = tmo_container_of(it->member.next, type, member);           \
	     &it->member != (head);                                                       \
	     it = it##_next, it##_next = tmo_container_of(it->member.next, type, member))

#endif /* TMO_CORE_LIST_H */
