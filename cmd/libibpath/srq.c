/* The application's shared receive queues in the hot path. An SRQ layer 2
 * follows (the Go side mirrored it: lip_srq_add) has a shadow ring of its
 * receives: every ibv_post_srq_recv (the context's post_srq_recv, taken
 * over at open like post_recv) records its WRs, then calls the provider;
 * a successful receive completion of a QP on it retires, by its wr_id,
 * the oldest outstanding receive with that wr_id (the QPs' CQs are
 * polled in any order, so receives retire out of order: a retired entry
 * is marked done and the ring's tail moves past done entries). Once
 * layer 2 diverted the SRQ (lip_srq_divert: the QPs on it failed over
 * together) its posts go to lip_hooks.post_srq_recv. */
#include <errno.h>
#include <stdlib.h>
#include "shim.h"

#define LIP_SRQ_DEAD ((struct lip_srq *)1)

static struct lip_srq *srqs[LIP_SRQ_SLOTS];
static pthread_mutex_t srqs_mu = PTHREAD_MUTEX_INITIALIZER;

static uint32_t pow2_32(uint32_t n)
{
	uint32_t s = 1;
	while (s < n && s < (1u << 30))
		s <<= 1;
	return s;
}

/* lip_srq_of is the followed SRQ of srq, or NULL. */
struct lip_srq *lip_srq_of(struct ibv_srq *srq)
{
	uint32_t h = lip_ptr_hash(srq, LIP_SRQ_SLOTS);
	for (uint32_t i = 0; i < LIP_SRQ_SLOTS; i++) {
		struct lip_srq *s = __atomic_load_n(&srqs[(h + i) & (LIP_SRQ_SLOTS - 1)], __ATOMIC_ACQUIRE);
		if (!s)
			return NULL;
		if (s != LIP_SRQ_DEAD && s->srq == srq)
			return s;
	}
	return NULL;
}

/* lip_srq_add starts following srq, made with max_wr receives: its ring
 * holds twice as many, for receives retired out of order. NULL (errno
 * ENOMEM, or ENOSPC: the table is full) when it cannot. */
struct lip_srq *lip_srq_add(struct ibv_srq *srq, uint32_t max_wr)
{
	struct lip_ctx *c = lip_ctx_of(srq->context);
	if (!c || !c->post_srq_recv) {
		errno = EINVAL;
		return NULL;
	}
	struct lip_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->srq = srq;
	s->ctx = c;
	s->mask = pow2_32(2 * (max_wr ? max_wr : 1)) - 1;
	s->rq = calloc((size_t)s->mask + 1, sizeof(*s->rq));
	if (!s->rq) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t h = lip_ptr_hash(srq, LIP_SRQ_SLOTS);
	pthread_mutex_lock(&srqs_mu);
	for (uint32_t i = 0; i < LIP_SRQ_SLOTS; i++) {
		struct lip_srq **slot = &srqs[(h + i) & (LIP_SRQ_SLOTS - 1)];
		if (*slot == NULL || *slot == LIP_SRQ_DEAD) {
			__atomic_store_n(slot, s, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&srqs_mu);
			return s;
		}
	}
	pthread_mutex_unlock(&srqs_mu);
	free(s->rq);
	free(s);
	errno = ENOSPC;
	return NULL;
}

/* lip_srq_remove stops following srq (the application destroyed it, or
 * the Go side did not mirror it) and frees its ring once no post or poll
 * is inside the hot path any more. */
void lip_srq_remove(struct ibv_srq *srq)
{
	struct lip_srq *gone = NULL;
	uint32_t h = lip_ptr_hash(srq, LIP_SRQ_SLOTS);
	pthread_mutex_lock(&srqs_mu);
	for (uint32_t i = 0; i < LIP_SRQ_SLOTS; i++) {
		struct lip_srq **slot = &srqs[(h + i) & (LIP_SRQ_SLOTS - 1)];
		if (!*slot)
			break;
		if (*slot != LIP_SRQ_DEAD && (*slot)->srq == srq) {
			gone = *slot;
			/* the next slot empty: no probe passes here, no tombstone */
			struct lip_srq *next = srqs[(h + i + 1) & (LIP_SRQ_SLOTS - 1)];
			__atomic_store_n(slot, next ? LIP_SRQ_DEAD : NULL, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&srqs_mu);
	if (!gone)
		return;
	lip_quiesce();
	free(gone->rq);
	free(gone);
}

/* lip_post_srq_recv is the context's post_srq_recv: record, then the
 * provider; layer 2's once the SRQ is diverted. The lock is never
 * skipped: an SRQ is shared by QPs whatever one poster promised. */
int lip_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct lip_srq *s = lip_record ? lip_srq_of(srq) : NULL;
	if (!s) {
		struct lip_ctx *c = lip_ctx_of(srq->context);
		if (c && c->post_srq_recv)
			return c->post_srq_recv(srq, wr, bad);
		if (bad)
			*bad = wr;
		return EINVAL;
	}
	struct lip_thr *t = lip_enter();
	if (__builtin_expect(__atomic_load_n(&s->diverted, __ATOMIC_RELAXED), 0)) {
		lip_leave(t);
		return lip_hooks.post_srq_recv(srq, wr, bad);
	}
	lip_blk_lock(&s->plock, 0);
	uint64_t first = __atomic_load_n(&s->head, __ATOMIC_RELAXED), k = first;
	for (struct ibv_recv_wr *w = wr; w; w = w->next, k++) {
		struct lip_rqe *e = &s->rq[k & s->mask];
		e->wr_id = w->wr_id;
		e->num_sge = w->num_sge;
		e->flags = 0;
		if (w->num_sge > LIP_MAX_SGE)
			e->flags |= LIP_SQE_PARTIAL;
		for (int i = 0; i < w->num_sge && i < LIP_MAX_SGE; i++)
			e->sge[i] = w->sg_list[i];
	}
	if (k - __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) > (uint64_t)s->mask + 1)
		__atomic_fetch_add(&s->overflow, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->head, k, __ATOMIC_RELEASE);
	int ret = s->ctx->post_srq_recv(srq, wr, bad);
	if (ret && bad && *bad) {
		int refused = 0;
		k = first;
		for (struct ibv_recv_wr *w = wr; w; w = w->next, k++) {
			if (w == *bad)
				refused = 1;
			if (refused)
				s->rq[k & s->mask].flags |= LIP_SQE_VOID;
		}
	}
	lip_blk_unlock(&s->plock, 0);
	lip_leave(t);
	return ret;
}

/* lip_srq_retire retires the oldest outstanding receive of s with wr_id
 * (a successful completion of a QP on it); 0 when none is outstanding. */
int lip_srq_retire(struct lip_srq *s, uint64_t wr_id)
{
	int found = 0;
	lip_blk_lock(&s->tlock, 0);
	uint64_t head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
	uint64_t t = __atomic_load_n(&s->tail, __ATOMIC_RELAXED);
	for (uint64_t k = t; k < head; k++) {
		struct lip_rqe *e = &s->rq[k & s->mask];
		if (!(e->flags & (LIP_SQE_VOID | LIP_RQE_DONE)) && e->wr_id == wr_id) {
			e->flags |= LIP_RQE_DONE;
			found = 1;
			break;
		}
	}
	while (t < head && (s->rq[t & s->mask].flags & (LIP_SQE_VOID | LIP_RQE_DONE)))
		t++;
	__atomic_store_n(&s->tail, t, __ATOMIC_RELEASE);
	lip_blk_unlock(&s->tlock, 0);
	return found;
}

/* lip_srq_divert hands s to layer 2: its posts go to lip_hooks from now
 * on; returns once no post or poll is left inside the hot path, after
 * which nothing but layer 2 reads the ring. -1 (EALREADY) when it was
 * diverted already. */
int lip_srq_divert(struct lip_srq *s)
{
	if (__atomic_exchange_n(&s->diverted, 1, __ATOMIC_SEQ_CST)) {
		errno = EALREADY;
		return -1;
	}
	lip_quiesce();
	return 0;
}

/* lip_srq_drop_ctx stops following the SRQs of c (its context is being
 * closed): a context opened later at the same address must not find
 * them. Their rings are freed once no post or poll is inside the hot
 * path. */
void lip_srq_drop_ctx(struct lip_ctx *c)
{
	struct lip_srq *gone[64];
	int n;
	do {
		n = 0;
		pthread_mutex_lock(&srqs_mu);
		for (uint32_t i = 0; i < LIP_SRQ_SLOTS && n < 64; i++) {
			struct lip_srq *s = srqs[i];
			if (s && s != LIP_SRQ_DEAD && s->ctx == c) {
				__atomic_store_n(&srqs[i], LIP_SRQ_DEAD, __ATOMIC_RELEASE);
				gone[n++] = s;
			}
		}
		pthread_mutex_unlock(&srqs_mu);
		if (!n)
			return;
		lip_quiesce();
		for (int k = 0; k < n; k++) {
			free(gone[k]->rq);
			free(gone[k]);
		}
	} while (n == 64);
}
