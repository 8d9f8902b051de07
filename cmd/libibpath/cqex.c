/* Extended CQs polled with ibv_start_poll, ibv_next_poll and
 * ibv_end_poll. Those are inline calls of function pointers in the CQ's
 * struct ibv_cq_ex, which bypass the hot path: the shim sees none of the
 * completions, so it can neither retire the shadow rings nor hand the
 * program the completions of a backup QP after a failover (the program
 * would wait for them for ever). The shim takes each such CQ's
 * start_poll slot at creation and tells the Go side, which arms none of
 * the CQ's QPs with layer 2 yet. At the CQ's first ibv_poll_cq it tells
 * the Go side, which arms them then (the shim sees the CQ's completions);
 * at its first ibv_start_poll, which stops protecting the CQ's QPs with
 * layer 2 for good (and says so in their status). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include "shim.h"

typedef int (*lip_start_fn)(struct ibv_cq_ex *, struct ibv_poll_cq_attr *);

struct cqex_slot {
	struct ibv_cq_ex *cq; /* NULL: free; CQEX_DEAD: deleted */
	lip_start_fn start;   /* the provider's start_poll */
	int seen;             /* its first ibv_start_poll was told */
	int polled;           /* polled at all (ibv_poll_cq or ibv_start_poll), or gone */
};

/* lip_cqex_unpolled counts the followed CQs not polled yet: layer 2 arms
 * no QP of such a CQ until its first ibv_poll_cq proves the shim sees its
 * completions. lip_poll_cq looks its CQ up only while there are some. */
int lip_cqex_unpolled;

/* polled_once marks s polled; 1 for the one call that did */
static int polled_once(struct cqex_slot *s)
{
	if (__atomic_load_n(&s->polled, __ATOMIC_ACQUIRE) || __atomic_exchange_n(&s->polled, 1, __ATOMIC_ACQ_REL))
		return 0;
	__atomic_fetch_sub(&lip_cqex_unpolled, 1, __ATOMIC_ACQ_REL);
	return 1;
}

#define CQEX_SLOTS 4096
#define CQEX_DEAD ((struct ibv_cq_ex *)1)

static struct cqex_slot cqex[CQEX_SLOTS];
static pthread_mutex_t cqex_mu = PTHREAD_MUTEX_INITIALIZER;

/* fork(2): cqex_mu is held across it, as chan_mu is (channel.c): the
 * child's ibv_destroy_cq takes it. */
static void cqex_fork_lock(void) { pthread_mutex_lock(&cqex_mu); }
static void cqex_fork_unlock(void) { pthread_mutex_unlock(&cqex_mu); }

__attribute__((constructor)) static void cqex_atfork(void)
{
	if (pthread_atfork(cqex_fork_lock, cqex_fork_unlock, cqex_fork_unlock))
		fprintf(stderr, "libibpath: pthread_atfork failed: a child forked without exec may hang in ibv_destroy_cq\n");
}

static struct cqex_slot *cqex_find(struct ibv_cq_ex *cq)
{
	uint32_t h = lip_ptr_hash(cq, CQEX_SLOTS);
	for (uint32_t i = 0; i < CQEX_SLOTS; i++) {
		struct cqex_slot *s = &cqex[(h + i) & (CQEX_SLOTS - 1)];
		struct ibv_cq_ex *c = __atomic_load_n(&s->cq, __ATOMIC_ACQUIRE);
		if (!c)
			return NULL;
		if (c == cq)
			return s;
	}
	return NULL;
}

/* lip_start_poll stands in for the provider's start_poll of an extended
 * CQ the shim follows. */
static int lip_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct cqex_slot *s = cqex_find(cq);
	if (!s)
		return ENOENT; /* never: the slot is taken before the CQ is returned */
	(void)polled_once(s);
	if (!__atomic_load_n(&s->seen, __ATOMIC_RELAXED) && !__atomic_exchange_n(&s->seen, 1, __ATOMIC_ACQ_REL))
		lip_tell_start_poll(ibv_cq_ex_to_cq(cq));
	return s->start(cq, attr);
}

/* lip_cqex_follow takes the start_poll slot of a CQ the program created
 * with ibv_create_cq_ex. A full table follows nothing: the CQ is told at
 * once, as if polled with ibv_start_poll. */
void lip_cqex_follow(struct ibv_cq_ex *cq)
{
	if (!cq->start_poll)
		return; /* a provider without the extended polling */
	pthread_mutex_lock(&cqex_mu);
	uint32_t h = lip_ptr_hash(cq, CQEX_SLOTS);
	for (uint32_t i = 0; i < CQEX_SLOTS; i++) {
		struct cqex_slot *s = &cqex[(h + i) & (CQEX_SLOTS - 1)];
		if (s->cq == NULL || s->cq == CQEX_DEAD) {
			s->start = cq->start_poll;
			s->seen = 0;
			s->polled = 0;
			__atomic_fetch_add(&lip_cqex_unpolled, 1, __ATOMIC_ACQ_REL);
			__atomic_store_n(&s->cq, cq, __ATOMIC_RELEASE);
			cq->start_poll = lip_start_poll;
			pthread_mutex_unlock(&cqex_mu);
			lip_tell_cq_extended(ibv_cq_ex_to_cq(cq));
			return;
		}
	}
	pthread_mutex_unlock(&cqex_mu);
	lip_tell_start_poll(ibv_cq_ex_to_cq(cq));
}

/* lip_cqex_forget: the program destroys cq (a CQ of any kind). It reports
 * whether the shim followed it. */
int lip_cqex_forget(struct ibv_cq *cq)
{
	pthread_mutex_lock(&cqex_mu);
	struct cqex_slot *s = cqex_find((struct ibv_cq_ex *)cq);
	if (s) {
		(void)polled_once(s);
		__atomic_store_n(&s->cq, CQEX_DEAD, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&cqex_mu);
	return s != NULL;
}

/* lip_cqex_polled: the program polls cq with ibv_poll_cq while some
 * followed CQ was never polled (lip_cqex_unpolled). The first such poll
 * of a followed CQ is told, before the poll itself: layer 2 may arm its
 * QPs now, the shim seeing its completions. */
void lip_cqex_polled(struct ibv_cq *cq)
{
	struct cqex_slot *s = cqex_find((struct ibv_cq_ex *)cq);
	if (s && polled_once(s))
		lip_tell_cq_polled(cq);
}
