/* The Default-state hot path: record, then call the provider. No
 * allocation, no call into Go. A QP layer 2 diverted (divert.c) goes to
 * layer 2 (lip_hooks) or, once its failover settled, to the express lane
 * (express.c); a post layer 2 hands back because it gave the QP back
 * meanwhile (LIP_HOME, lip_undivert) is posted here. */
#include <errno.h>
#include <time.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "shim.h"

static struct lip_ctx *ctxs[LIP_MAX_CTX];

struct lip_ctx *lip_ctx_of(struct ibv_context *ctx)
{
	for (int i = 0; i < LIP_MAX_CTX; i++) {
		struct lip_ctx *c = __atomic_load_n(&ctxs[i], __ATOMIC_ACQUIRE);
		if (c && c->ctx == ctx)
			return c;
	}
	return NULL;
}

static pthread_mutex_t ctxs_mu = PTHREAD_MUTEX_INITIALIZER;

/* lip_ctx_add takes over ctx's post_send, post_recv and poll_cq. */
struct lip_ctx *lip_ctx_add(struct ibv_context *ctx)
{
	struct lip_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ctx = ctx;
	pthread_mutex_init(&c->mu, NULL);
	c->post_send = ctx->ops.post_send;
	c->post_recv = ctx->ops.post_recv;
	c->poll_cq = ctx->ops.poll_cq;
	c->post_srq_recv = ctx->ops.post_srq_recv;
	pthread_mutex_lock(&ctxs_mu);
	int i;
	for (i = 0; i < LIP_MAX_CTX && ctxs[i]; i++)
		;
	if (i == LIP_MAX_CTX) {
		pthread_mutex_unlock(&ctxs_mu);
		free(c);
		return NULL;
	}
	__atomic_store_n(&ctxs[i], c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctxs_mu);
	ctx->ops.post_send = lip_post_send;
	ctx->ops.post_recv = lip_post_recv;
	ctx->ops.poll_cq = lip_poll_cq;
	if (ctx->ops.post_srq_recv)
		ctx->ops.post_srq_recv = lip_post_srq_recv;
	if (lip_channels && ctx->ops.req_notify_cq) {
		c->req_notify_cq = ctx->ops.req_notify_cq;
		ctx->ops.req_notify_cq = lip_req_notify_cq;
	}
	return c;
}

static void by_ptr_remove(struct ibv_qp *qp);
static void lip_qp_free_now(struct lip_qp *q);

/* lip_ctx_remove gives ctx its operations back and forgets it: its QPs
 * still in the tables leave the process's table (a later QP at the same
 * address must not find them), then, once every post and poll that was
 * inside the hot path has left it (lip_quiesce), its lip_ctx is freed.
 * The lip_qp of the QPs the program did not destroy (their layer 2 state
 * went with the context's, the runtime's Closed) go as destroyed QPs'
 * do (lip_qp_free). */
void lip_ctx_remove(struct ibv_context *ctx)
{
	struct lip_ctx *gone[LIP_MAX_CTX];
	int ngone = 0;
	pthread_mutex_lock(&ctxs_mu);
	for (int i = 0; i < LIP_MAX_CTX; i++) {
		if (ctxs[i] && ctxs[i]->ctx == ctx) {
			struct lip_ctx *c = ctxs[i];
			ctx->ops.post_send = c->post_send;
			ctx->ops.post_recv = c->post_recv;
			ctx->ops.poll_cq = c->poll_cq;
			if (c->post_srq_recv)
				ctx->ops.post_srq_recv = c->post_srq_recv;
			if (c->req_notify_cq)
				ctx->ops.req_notify_cq = c->req_notify_cq;
			struct verbs_context *v = verbs_get_ctx(ctx);
			if (v && c->create_qp_ex)
				v->create_qp_ex = c->create_qp_ex;
			if (v && c->create_cq_ex)
				v->create_cq_ex = c->create_cq_ex;
			__atomic_store_n(&ctxs[i], NULL, __ATOMIC_RELEASE);
			gone[ngone++] = c;
		}
	}
	pthread_mutex_unlock(&ctxs_mu);
	if (!ngone)
		return;
	for (int k = 0; k < ngone; k++)
		lip_srq_drop_ctx(gone[k]);
	for (int k = 0; k < ngone; k++) {
		struct lip_ctx *c = gone[k];
		pthread_mutex_lock(&c->mu);
		for (uint32_t i = 0; i < LIP_QP_SLOTS; i++) {
			struct lip_qp *q = c->slots[i];
			if (q && q != LIP_SLOT_DEAD) {
				lip_nudge_forget(q);
				by_ptr_remove(q->qp);
			} else {
				c->slots[i] = NULL; /* the QPs left are freed below */
			}
		}
		pthread_mutex_unlock(&c->mu);
	}
	__atomic_add_fetch(&lip_qp_gen, 1, __ATOMIC_RELEASE);
	/* a post or poll that found c before it left the table is done with it after this */
	lip_quiesce();
	for (int k = 0; k < ngone; k++) {
		for (uint32_t i = 0; i < LIP_QP_SLOTS; i++)
			if (gone[k]->slots[i])
				lip_qp_free(gone[k]->slots[i]); /* through the graveyard */
		pthread_mutex_destroy(&gone[k]->mu);
		free(gone[k]);
	}
}

static uint32_t pow2(uint32_t n)
{
	uint32_t p = 1;
	while (p < n && p < (1u << 20))
		p <<= 1;
	return p;
}

/* by_ptr finds a protected QP from the application's struct ibv_qp, the
 * one lookup of the post path (it also gives the context). */
static struct lip_qp *by_ptr[LIP_PTR_SLOTS];
static pthread_mutex_t by_ptr_mu = PTHREAD_MUTEX_INITIALIZER;

static inline struct lip_qp *qp_of(struct ibv_qp *qp)
{
	uint32_t h = lip_ptr_hash(qp, LIP_PTR_SLOTS);
	for (uint32_t i = 0; i < LIP_PTR_SLOTS; i++) {
		struct lip_qp *q = __atomic_load_n(&by_ptr[(h + i) & (LIP_PTR_SLOTS - 1)], __ATOMIC_ACQUIRE);
		if (!q)
			return NULL;
		if (q != LIP_SLOT_DEAD && q->qp == qp)
			return q;
	}
	return NULL;
}

static int by_ptr_add(struct lip_qp *q)
{
	uint32_t h = lip_ptr_hash(q->qp, LIP_PTR_SLOTS);
	pthread_mutex_lock(&by_ptr_mu);
	for (uint32_t i = 0; i < LIP_PTR_SLOTS; i++) {
		struct lip_qp **s = &by_ptr[(h + i) & (LIP_PTR_SLOTS - 1)];
		if (*s == NULL || *s == LIP_SLOT_DEAD) {
			__atomic_store_n(s, q, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&by_ptr_mu);
			return 0;
		}
	}
	pthread_mutex_unlock(&by_ptr_mu);
	return -1;
}

/* unmark removes the entry at index k of an open-addressing table of n
 * slots (a power of two; its writers' lock held; home gives an entry's
 * first probe). Lookups stop at the first empty slot, so a removed entry
 * must stay a tombstone while a live entry past it was placed past it
 * (its probe sequence runs through it); but tombstones that no live entry
 * needs any more are emptied, or every QP removed would lengthen for
 * good the scans for QPs the table does not hold (a churning program's
 * unprotected QPs, looked up at every post). Over the cluster of k (the
 * run of non-empty slots around it), from its end backwards: a tombstone
 * is emptied when no live entry after it has its home at or before it. A
 * reader racing it finds an empty slot only where no live entry it could
 * be looking for lies beyond. */
/* unmark_full is unmark's sweep for a table without an empty slot, where
 * clusters wrap around: every slot that no live entry's probe path
 * (from its home up to, not including, its slot) runs through is emptied
 * if it is a tombstone. A difference array over the circle counts the
 * paths through each slot; without memory for it nothing changes. */
static void unmark_full(struct lip_qp **slots, uint32_t n, uint32_t (*home)(struct lip_qp *, uint32_t))
{
	int32_t *d = calloc(n + 1, sizeof(*d));
	if (!d)
		return;
	for (uint32_t p = 0; p < n; p++) {
		struct lip_qp *q = slots[p];
		if (q == NULL || q == LIP_SLOT_DEAD)
			continue;
		uint32_t h = home(q, n);
		if (h < p) {
			d[h]++, d[p]--;
		} else if (h > p) { /* wrapped: [h, n) and [0, p) */
			d[h]++, d[n]--;
			d[0]++, d[p]--;
		}
	}
	int32_t through = 0;
	for (uint32_t j = 0; j < n; j++) {
		through += d[j];
		if (slots[j] == LIP_SLOT_DEAD && through == 0)
			__atomic_store_n(&slots[j], NULL, __ATOMIC_RELEASE);
	}
	free(d);
}

static void unmark(struct lip_qp **slots, uint32_t n, uint32_t k, uint32_t (*home)(struct lip_qp *, uint32_t))
{
	__atomic_store_n(&slots[k], LIP_SLOT_DEAD, __ATOMIC_RELEASE);
	uint32_t start = k, end = k, len;
	for (len = 1; len < n && slots[(start - 1) & (n - 1)] != NULL; len++)
		start = (start - 1) & (n - 1);
	for (; len < n && slots[(end + 1) & (n - 1)] != NULL; len++)
		end = (end + 1) & (n - 1);
	if (len >= n) {
		unmark_full(slots, n, home);
		return;
	}
	uint32_t need = len; /* the lowest home offset of the live entries seen */
	for (uint32_t off = len; off-- > 0;) {
		uint32_t j = (start + off) & (n - 1);
		struct lip_qp *q = slots[j];
		if (q == LIP_SLOT_DEAD) {
			if (need > off)
				__atomic_store_n(&slots[j], NULL, __ATOMIC_RELEASE);
		} else {
			uint32_t h = (home(q, n) - start) & (n - 1);
			if (h < need)
				need = h;
		}
	}
}

static uint32_t ptr_home(struct lip_qp *q, uint32_t n) { return lip_ptr_hash(q->qp, n); }
static uint32_t qpn_home(struct lip_qp *q, uint32_t n) { return q->qpn & (n - 1); }

static void by_ptr_remove(struct ibv_qp *qp)
{
	uint32_t h = lip_ptr_hash(qp, LIP_PTR_SLOTS);
	pthread_mutex_lock(&by_ptr_mu);
	for (uint32_t i = 0; i < LIP_PTR_SLOTS; i++) {
		uint32_t k = (h + i) & (LIP_PTR_SLOTS - 1);
		struct lip_qp *s = by_ptr[k];
		if (s == NULL)
			break;
		if (s != LIP_SLOT_DEAD && s->qp == qp) {
			unmark(by_ptr, LIP_PTR_SLOTS, k, ptr_home);
			break;
		}
	}
	pthread_mutex_unlock(&by_ptr_mu);
}

/* lip_table_use counts the slots of the process's QP table (by_ptr) and
 * of c's that hold an entry, and the tombstones among the rest. */
void lip_table_use(struct lip_ctx *c, uint32_t *live, uint32_t *dead)
{
	live[0] = live[1] = dead[0] = dead[1] = 0;
	for (uint32_t i = 0; i < LIP_PTR_SLOTS; i++) {
		struct lip_qp *q = __atomic_load_n(&by_ptr[i], __ATOMIC_ACQUIRE);
		live[0] += q != NULL && q != LIP_SLOT_DEAD;
		dead[0] += q == LIP_SLOT_DEAD;
	}
	for (uint32_t i = 0; c && i < LIP_QP_SLOTS; i++) {
		struct lip_qp *q = __atomic_load_n(&c->slots[i], __ATOMIC_ACQUIRE);
		live[1] += q != NULL && q != LIP_SLOT_DEAD;
		dead[1] += q == LIP_SLOT_DEAD;
	}
}

struct lip_qp *lip_qp_find(struct lip_ctx *c, uint32_t qpn)
{
	for (uint32_t i = 0; i < LIP_QP_SLOTS; i++) {
		struct lip_qp *q = __atomic_load_n(&c->slots[(qpn + i) & (LIP_QP_SLOTS - 1)], __ATOMIC_ACQUIRE);
		if (!q)
			return NULL;
		if (q != LIP_SLOT_DEAD && q->qpn == qpn)
			return q;
	}
	return NULL;
}

/* insert puts q in c's table and the process's; ENOSPC when either is
 * full. */
static int insert(struct lip_ctx *c, struct lip_qp *q)
{
	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < LIP_QP_SLOTS; i++) {
		struct lip_qp **s = &c->slots[(q->qpn + i) & (LIP_QP_SLOTS - 1)];
		if (*s == NULL || *s == LIP_SLOT_DEAD) {
			if (by_ptr_add(q))
				break;
			__atomic_store_n(s, q, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&c->mu);
			return 0;
		}
	}
	pthread_mutex_unlock(&c->mu);
	errno = ENOSPC;
	return -1;
}

struct lip_qp *lip_qp_add(struct ibv_qp *qp, const struct ibv_qp_init_attr *attr)
{
	struct lip_ctx *c = lip_ctx_of(qp->context);
	if (!c)
		return NULL;
	struct lip_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->qp = qp;
	q->ctx = c;
	q->qpn = qp->qp_num;
	q->sig_all = attr->sq_sig_all;
	q->send_cq = qp->send_cq;
	q->recv_cq = qp->recv_cq;
	if (attr->srq && !(q->srq = lip_srq_of(attr->srq))) {
		free(q);
		errno = EINVAL; /* an SRQ the shim does not follow */
		return NULL;
	}
	q->smask = pow2(attr->cap.max_send_wr ? attr->cap.max_send_wr : 1) - 1;
	q->rmask = pow2(attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1) - 1;
	q->inl_max = attr->cap.max_inline_data < LIP_MAX_INLINE ? attr->cap.max_inline_data : LIP_MAX_INLINE;
	q->sq = calloc(q->smask + 1, sizeof(*q->sq));
	q->rq = calloc(q->rmask + 1, sizeof(*q->rq));
	if (q->inl_max)
		q->inl = calloc(q->smask + 1, q->inl_max);
	errno = ENOMEM;
	if (!q->sq || !q->rq || (q->inl_max && !q->inl))
		goto fail;
	if (!insert(c, q))
		return q;
fail:
	free(q->sq);
	free(q->rq);
	free(q->inl);
	free(q);
	return NULL;
}

uint64_t lip_qp_gen; /* QPs removed: caches of lookups (wrapi.c) compare it */

struct lip_qp *lip_qp_remove(struct ibv_qp *qp)
{
	struct lip_ctx *c = lip_ctx_of(qp->context);
	if (!c)
		return NULL;
	struct lip_qp *gone = NULL;
	pthread_mutex_lock(&c->mu);
	for (uint32_t i = 0; i < LIP_QP_SLOTS; i++) {
		uint32_t k = (qp->qp_num + i) & (LIP_QP_SLOTS - 1);
		struct lip_qp *s = c->slots[k];
		if (s == NULL)
			break;
		if (s != LIP_SLOT_DEAD && s->qp == qp) {
			/* The rings stay allocated: a poller may still hold q. */
			gone = s;
			unmark(c->slots, LIP_QP_SLOTS, k, qpn_home);
			break;
		}
	}
	pthread_mutex_unlock(&c->mu);
	if (gone)
		lip_nudge_forget(gone); /* a nudge on its way posts nothing to it */
	by_ptr_remove(qp);
	__atomic_add_fetch(&lip_qp_gen, 1, __ATOMIC_RELEASE);
	return gone;
}

/* Destroys registered with lip_qp_destroying, over every context: a poll
 * looks for one only while some is under way. */
static int ndestroying;

/* lip_qp_destroying registers (on) or forgets q, which lip_qp_remove took
 * out of the tables for a destroy of its QP that the provider has not
 * answered yet. Meanwhile a poll that finds no QP for a successful
 * completion retires it in q's rings (find_destroying), so that after a
 * refused destroy (lip_qp_restore) the rings hold what the application
 * has not seen complete, and a later failover replays nothing it saw;
 * a post to q meanwhile is recorded in them (destroying_qp).
 * An error in that window reaches the application as plain verbs report
 * it (layer 2 takes none: the runtime's Destroying). Forgotten before q
 * is freed: a poller that found it is inside the hot path, which
 * lip_qp_free waits out. With LIP_DESTROYING destroys under way on the
 * context q is not registered, and its successes pass the hot path by
 * (a failover after a refused destroy would replay their WRs again). */
void lip_qp_destroying(struct lip_qp *q, int on)
{
	struct lip_ctx *c = q->ctx;
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < LIP_DESTROYING; i++) {
		if (c->destroying[i] == (on ? NULL : q)) {
			__atomic_store_n(&c->destroying[i], on ? q : NULL, __ATOMIC_RELEASE);
			__atomic_add_fetch(&ndestroying, on ? 1 : -1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/* find_destroying is the QP of c registered with lip_qp_destroying whose
 * number is qpn, or NULL. */
static struct lip_qp *find_destroying(struct lip_ctx *c, uint32_t qpn)
{
	if (__builtin_expect(__atomic_load_n(&ndestroying, __ATOMIC_ACQUIRE) == 0, 1))
		return NULL;
	for (int i = 0; i < LIP_DESTROYING; i++) {
		struct lip_qp *q = __atomic_load_n(&c->destroying[i], __ATOMIC_ACQUIRE);
		if (q && q->qpn == qpn)
			return q;
	}
	return NULL;
}

/* lip_qp_restore puts back in the tables q, which lip_qp_remove took
 * out before a destroy of its QP that the provider refused: its rings
 * are as they were, but for the successes polled meanwhile, retired
 * (lip_qp_destroying). -1 (ENOSPC, or EINVAL when its context is gone)
 * if it cannot: q is then freed as a destroyed QP's would be, and its
 * QP passes through. */
int lip_qp_restore(struct lip_qp *q)
{
	struct lip_ctx *c = lip_ctx_of(q->qp->context);
	if (c != q->ctx) {
		errno = EINVAL;
		return -1;
	}
	lip_nudge_revive(q);
	return insert(c, q);
}

/* lip_qp_free frees q, out of the tables (lip_qp_remove) and let go of by
 * layer 2 (the runtime's Destroyed, which takes it off the express
 * lane), with its ibv_wr_* batch. Posts and polls inside the hot path are
 * waited for (lip_quiesce), and so are the Go side's lookups
 * (lip_qp_hold, inside the same protocol); a hold taken before the
 * removal keeps q allocated until its release. q waits in a graveyard of
 * GRAVE QPs first, and is freed when GRAVE more QPs were destroyed after
 * it, or a second has passed, whichever comes first; one still held then
 * waits for the release, and is freed by the next destroy after it. */
#define GRAVE 256
static struct {
	struct lip_qp *q;
	struct timespec at;
} grave[GRAVE];
static unsigned grave_next;
static struct lip_qp *held; /* freed while held (linked by held_next) */
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;
void (*lip_qp_freed_hook)(struct lip_qp *);

void lip_qp_free(struct lip_qp *q)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	struct lip_qp *out[GRAVE];
	int nout = 0;
	pthread_mutex_lock(&grave_mu);
	/* the oldest makes room; those a second old go too */
	unsigned k = grave_next % GRAVE;
	if (grave[k].q)
		out[nout++] = grave[k].q;
	grave[k].q = q, grave[k].at = now;
	grave_next++;
	for (unsigned i = 0; i < GRAVE; i++)
		if (grave[i].q && i != k && now.tv_sec - grave[i].at.tv_sec > 1)
			out[nout++] = grave[i].q, grave[i].q = NULL;
	/* released since they were freed: nothing can find them any more,
	 * and their quiesce was done then */
	struct lip_qp *done = NULL;
	for (struct lip_qp **p = &held; *p;) {
		struct lip_qp *h = *p;
		if (__atomic_load_n(&h->holds, __ATOMIC_ACQUIRE) == 0)
			*p = h->held_next, h->held_next = done, done = h;
		else
			p = &h->held_next;
	}
	pthread_mutex_unlock(&grave_mu);
	while (done) {
		struct lip_qp *h = done;
		done = h->held_next;
		lip_qp_free_now(h);
	}
	if (!nout)
		return;
	lip_quiesce();
	for (int i = 0; i < nout; i++) {
		if (__atomic_load_n(&out[i]->holds, __ATOMIC_ACQUIRE) > 0) {
			pthread_mutex_lock(&grave_mu);
			out[i]->held_next = held, held = out[i];
			pthread_mutex_unlock(&grave_mu);
			continue;
		}
		lip_qp_free_now(out[i]);
	}
}

struct lip_qp *lip_qp_hold(struct ibv_context *ctx, uint32_t qpn)
{
	/* (a thread inside a post or poll already is, for lip_quiesce) */
	struct lip_thr *t = lip_me;
	int nested = t && (__atomic_load_n(&t->seq, __ATOMIC_RELAXED) & 1);
	if (!nested)
		t = lip_enter();
	struct lip_ctx *c = lip_ctx_of(ctx);
	struct lip_qp *q = c ? lip_qp_find(c, qpn) : NULL;
	if (q)
		__atomic_add_fetch(&q->holds, 1, __ATOMIC_ACQ_REL);
	if (!nested)
		lip_leave(t);
	return q;
}

void lip_qp_unhold(struct lip_qp *q) { __atomic_sub_fetch(&q->holds, 1, __ATOMIC_RELEASE); }

/* lip_qp_free_now frees q, which nothing can hold any more. */
static void lip_qp_free_now(struct lip_qp *q)
{
	if (lip_qp_freed_hook)
		lip_qp_freed_hook(q);
	lip_wr_free(q->wrb);
	free(q->sq);
	free(q->rq);
	free(q->inl);
	free(q);
}

/* lip_qp_progress gives q's send ring positions: WRs posted and WRs
 * retired by successful completions (layer 1 learns from them that the
 * peer followed a migration). Both only grow. */
void lip_qp_progress(struct lip_qp *q, uint64_t *posted, uint64_t *retired)
{
	*posted = __atomic_load_n(&q->shead, __ATOMIC_ACQUIRE);
	*retired = __atomic_load_n(&q->stail, __ATOMIC_ACQUIRE);
}

void lip_qp_outstanding(struct lip_qp *q, uint64_t *send, uint64_t *recv)
{
	*send = __atomic_load_n(&q->shead, __ATOMIC_ACQUIRE) - __atomic_load_n(&q->stail, __ATOMIC_ACQUIRE);
	*recv = __atomic_load_n(&q->rhead, __ATOMIC_ACQUIRE) - __atomic_load_n(&q->rtail, __ATOMIC_ACQUIRE);
}

/* Posters of one queue are serialised by a lock held around the whole
 * post (taken before the hot path's section: send_locked), so the ring's
 * order is the order the provider queued the WRs in (what a rewind
 * replays). Pollers retiring entries of one ring are serialised by a
 * second lock per ring, held only for the retirement: several threads
 * polling one CQ (MPI_THREAD_MULTIPLE, progress threads) each retire what
 * their completions stand for, and a tail or counter read by one and
 * written back by the other would lose retirements (entries replayed
 * twice after a failover, wrong counters in the handshake). Providers
 * lock the queue and the CQ inside their calls anyway. The locks are
 * biased to the one thread that uses them (qlock.h): no atomic
 * instruction while a single thread posts to the QP or polls the CQ.
 * With lip_single_poster / lip_single_poller (IBPATH_SINGLE_POSTER=1,
 * IBPATH_SINGLE_POLLER=1) none is taken at all. */
static inline void qlock(struct lip_blk *l) { lip_blk_lock(l, lip_single_poster); }
static inline void qunlock(struct lip_blk *l) { lip_blk_unlock(l, lip_single_poster); }
static inline void tlock(struct lip_blk *l) { lip_blk_lock(l, lip_single_poller); }
static inline void tunlock(struct lip_blk *l) { lip_blk_unlock(l, lip_single_poller); }

/* reserve takes n ring slots (under the queue's lock, or by its only
 * poster). */
static inline uint64_t reserve(uint64_t *head, uint64_t n)
{
	uint64_t h = __atomic_load_n(head, __ATOMIC_RELAXED);
	__atomic_store_n(head, h + n, __ATOMIC_RELEASE);
	return h;
}

static inline void copy_sges(struct ibv_sge *dst, const struct ibv_sge *src, int n, uint32_t *flags)
{
	if (n > LIP_MAX_SGE) {
		*flags |= LIP_SQE_PARTIAL;
		n = LIP_MAX_SGE;
	}
	for (int i = 0; i < n; i++)
		dst[i] = src[i];
}

/* copy_inline keeps the payload of an inline WR: the application may
 * reuse its buffer as soon as the post returns. */
static inline void copy_inline(struct lip_qp *q, uint64_t k, struct lip_sqe *e, const struct ibv_send_wr *w)
{
	uint32_t n = 0;
	uint8_t *dst = q->inl + (k & q->smask) * q->inl_max;
	for (int i = 0; i < w->num_sge; i++) {
		uint32_t len = w->sg_list[i].length;
		if (len > q->inl_max - n) {
			e->flags |= LIP_SQE_PARTIAL;
			return;
		}
		memcpy(dst + n, (const void *)(uintptr_t)w->sg_list[i].addr, len);
		n += len;
	}
	e->inline_len = n;
}

static inline uint64_t send_chain_len(const struct ibv_send_wr *wr)
{
	uint64_t n = 0;
	for (; wr; wr = wr->next)
		n++;
	return n;
}

static inline uint64_t recv_chain_len(const struct ibv_recv_wr *wr)
{
	uint64_t n = 0;
	for (; wr; wr = wr->next)
		n++;
	return n;
}

/* record_send copies w into send ring position k: what a replay needs,
 * the inline payload included (read from w's SGEs now). */
static inline void record_send(struct lip_qp *q, uint64_t k, const struct ibv_send_wr *w)
{
	struct lip_sqe *e = &q->sq[k & q->smask];
	e->wr_id = w->wr_id;
	e->opcode = w->opcode;
	e->send_flags = w->send_flags;
	e->imm = w->imm_data;
	e->num_sge = w->num_sge;
	e->flags = 0;
	e->inline_len = 0;
	if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		e->remote_addr = w->wr.atomic.remote_addr;
		e->rkey = w->wr.atomic.rkey;
		e->compare_add = w->wr.atomic.compare_add;
		e->swap = w->wr.atomic.swap;
	} else {
		e->remote_addr = w->wr.rdma.remote_addr;
		e->rkey = w->wr.rdma.rkey;
	}
	copy_sges(e->sge, w->sg_list, w->num_sge, &e->flags);
	if (w->send_flags & IBV_SEND_INLINE)
		copy_inline(q, k, e, w);
}

/* record_recv copies w into receive ring position k. */
static inline void record_recv(struct lip_qp *q, uint64_t k, const struct ibv_recv_wr *w)
{
	struct lip_rqe *e = &q->rq[k & q->rmask];
	e->wr_id = w->wr_id;
	e->num_sge = w->num_sge;
	e->flags = 0;
	copy_sges(e->sge, w->sg_list, w->num_sge, &e->flags);
}

/* ring_sends records the k WRs of the chain from wr in q's send ring
 * (reserved first, an overrun counted) and returns the first position;
 * ring_sends_void marks the entries from position from that the chain's
 * WR refused (and those after it) void. ring_recvs and ring_recvs_void:
 * the same for receives. Under the queue's lock. */
static inline uint64_t ring_sends(struct lip_qp *q, const struct ibv_send_wr *wr, uint64_t k)
{
	uint64_t first = reserve(&q->shead, k);
	if (first + k - __atomic_load_n(&q->stail, __ATOMIC_ACQUIRE) > (uint64_t)q->smask + 1)
		__atomic_fetch_add(&q->overflow, 1, __ATOMIC_RELAXED);
	uint64_t p = first;
	for (uint64_t i = 0; i < k && wr; i++, wr = wr->next, p++)
		record_send(q, p, wr);
	return first;
}

static inline void ring_sends_void(struct lip_qp *q, uint64_t from, const struct ibv_send_wr *wr, uint64_t k,
				   const struct ibv_send_wr *refused)
{
	for (int on = 0; k-- && wr; wr = wr->next, from++) {
		if (wr == refused)
			on = 1;
		if (on)
			q->sq[from & q->smask].flags |= LIP_SQE_VOID;
	}
}

static inline uint64_t ring_recvs(struct lip_qp *q, const struct ibv_recv_wr *wr, uint64_t k)
{
	uint64_t first = reserve(&q->rhead, k);
	if (first + k - __atomic_load_n(&q->rtail, __ATOMIC_ACQUIRE) > (uint64_t)q->rmask + 1)
		__atomic_fetch_add(&q->overflow, 1, __ATOMIC_RELAXED);
	uint64_t p = first;
	for (uint64_t i = 0; i < k && wr; i++, wr = wr->next, p++)
		record_recv(q, p, wr);
	return first;
}

static inline void ring_recvs_void(struct lip_qp *q, uint64_t from, const struct ibv_recv_wr *wr, uint64_t k,
				   const struct ibv_recv_wr *refused)
{
	for (int on = 0; k-- && wr; wr = wr->next, from++) {
		if (wr == refused)
			on = 1;
		if (on)
			q->rq[from & q->rmask].flags |= LIP_SQE_VOID;
	}
}

/* post_recorded records wr's WRs in q's send ring, then issues them: to
 * the provider's post_send, or (wrapi) through the provider's ibv_wr_*
 * functions (wrapi.c). WRs the provider refused are marked void. Called
 * with the queue's lock held, inside the hot path's section, q not
 * diverted. */
static inline int post_recorded(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad, int wrapi)
{
	uint64_t n = send_chain_len(wr);
	uint64_t first = ring_sends(q, wr, n);
	int ret = wrapi ? lip_wr_issue(q, wr, bad) : q->ctx->post_send(q->qp, wr, bad);
	if (ret && bad && *bad)
		ring_sends_void(q, first, wr, n, *bad); /* WRs from *bad on were not posted */
	return ret;
}

/* recv_recorded: post_recorded for receives, which take the receive
 * queue's lock here (inside the section: no receive holds it across
 * calls). */
static inline int recv_recorded(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	uint64_t n = recv_chain_len(wr);
	qlock(&q->rlock);
	uint64_t first = ring_recvs(q, wr, n);
	int ret = q->ctx->post_recv(q->qp, wr, bad);
	if (ret && bad && *bad)
		ring_recvs_void(q, first, wr, n, *bad);
	qunlock(&q->rlock);
	return ret;
}

/* lip_rings_load empties q's rings and records sends and recvs in them,
 * in order, as their posts would have (lip_undivert: layer 2 gives a
 * diverted QP back with the WRs its default QP holds). Nothing else
 * touches the rings of a diverted QP. Positions stay monotonic: the
 * rings restart empty at their heads. -1 (ENOSPC) when a ring cannot
 * hold its WRs; nothing changed then. */
int lip_rings_load(struct lip_qp *q, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs)
{
	uint64_t ns = send_chain_len(sends), nr = recv_chain_len(recvs);
	if (ns > (uint64_t)q->smask + 1 || nr > (uint64_t)q->rmask + 1) {
		errno = ENOSPC;
		return -1;
	}
	uint64_t s = __atomic_load_n(&q->shead, __ATOMIC_RELAXED);
	uint64_t r = __atomic_load_n(&q->rhead, __ATOMIC_RELAXED);
	uint64_t k = s;
	for (struct ibv_send_wr *w = sends; w; w = w->next, k++)
		record_send(q, k, w);
	k = r;
	for (struct ibv_recv_wr *w = recvs; w; w = w->next, k++)
		record_recv(q, k, w);
	__atomic_store_n(&q->stail, s, __ATOMIC_RELEASE);
	__atomic_store_n(&q->shead, s + ns, __ATOMIC_RELEASE);
	__atomic_store_n(&q->rtail, r, __ATOMIC_RELEASE);
	__atomic_store_n(&q->rhead, r + nr, __ATOMIC_RELEASE);
	__atomic_store_n(&q->overflow, 0, __ATOMIC_RELAXED); /* the rings hold all of it now */
	__atomic_store_n(&q->nudge_mark, 0, __ATOMIC_RELEASE); /* the QP was reset: no nudge is out */
	return 0;
}

/* LIP_HOME_TRIES bounds how often a post that layer 2 gave back
 * (LIP_HOME) finds its QP diverted again. */
#define LIP_HOME_TRIES 8

/* DIVERTED_OR_HOME is the body of send_diverted and recv_diverted: wr,
 * which found q diverted, goes to layer 2 (post_diverted); when it
 * answers LIP_HOME (q came back to the hot path meanwhile), the WRs from
 * the first one layer 2 did not post (from_) are posted in the hot path,
 * recorded (post_home, an expression over from_). WRs layer 2 posted (the
 * express lane's, before a key it missed) stay posted: none goes twice.
 * A QP diverted again goes back to layer 2, at most LIP_HOME_TRIES times. */
#define DIVERTED_OR_HOME(post_diverted, post_home, q, wr, bad, wrtype)              \
	do {                                                                       \
		wrtype *from_ = (wr);                                               \
		for (int try_ = 0; try_ < LIP_HOME_TRIES; try_++) {                 \
			wrtype *b_ = from_; /* LIP_HOME moves it past what was posted */ \
			int r_ = post_diverted((q), from_, &b_);                    \
			if (r_ != LIP_HOME) {                                       \
				if (r_ && (bad))                                    \
					*(bad) = b_;                                \
				return r_;                                          \
			}                                                           \
			if (!(from_ = b_))                                          \
				return 0;                                           \
			struct lip_thr *t_ = lip_enter();                           \
			if (!__atomic_load_n(&(q)->diverted, __ATOMIC_ACQUIRE)) {   \
				r_ = (post_home);                                   \
				lip_leave(t_);                                      \
				return r_;                                          \
			}                                                           \
			lip_leave(t_);                                              \
		}                                                                   \
		if (bad)                                                            \
			*(bad) = from_;                                             \
		return EIO;                                                         \
	} while (0)

/* send_diverted: a post to a diverted QP, with the send queue's lock held
 * (send_locked); a wrapi batch comes home through the provider's wr_*
 * functions. Off the fast path. */
static __attribute__((noinline)) int send_diverted(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad,
						  int wrapi)
{
	DIVERTED_OR_HOME(lip_diverted_post_send, post_recorded(q, from_, bad, wrapi), q, wr, bad, struct ibv_send_wr);
}

/* recv_diverted: send_diverted for receives. */
static __attribute__((noinline)) int recv_diverted(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	DIVERTED_OR_HOME(lip_diverted_post_recv, recv_recorded(q, from_, bad), q, wr, bad, struct ibv_recv_wr);
}

/* send_locked posts wr to q, whose send queue's lock the caller holds:
 * recorded and issued, or to layer 2 once q is diverted. The lock is
 * taken before the hot path's section is entered, never inside it: a
 * divert waits for the threads inside their section, and one of them
 * waiting for this lock could wait for a thread that waits for the
 * divert (wr_start to wr_complete holds the lock while the application
 * may poll a diverted CQ). */
static inline int send_locked(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad, int wrapi)
{
	struct lip_thr *t = lip_enter();
	if (__builtin_expect(__atomic_load_n(&q->diverted, __ATOMIC_RELAXED), 0)) {
		lip_leave(t);
		return send_diverted(q, wr, bad, wrapi);
	}
	int ret = post_recorded(q, wr, bad, wrapi);
	lip_leave(t);
	return ret;
}

/* destroying_qp is the lip_qp of qp, out of the tables for a destroy the
 * provider has not answered yet (lip_qp_destroying), or NULL. A post that
 * races that destroy is recorded in its rings, as a successful
 * completion polled meanwhile is retired there: if the provider refuses
 * the destroy (EBUSY: rdma_rxe's uverbs takes the QP for each post), the
 * rings hold what the QP holds, and a later failover replays it. Not for
 * a QP on the backup: layer 2 makes no call on a QP being destroyed, so
 * such a post goes to the provider, as it did before the destroy began
 * to a QP in error. */
static struct lip_qp *destroying_qp(struct lip_ctx *c, struct ibv_qp *qp)
{
	struct lip_qp *d = find_destroying(c, qp->qp_num);
	return d && d->qp == qp && !__atomic_load_n(&d->diverted, __ATOMIC_ACQUIRE) ? d : NULL;
}

int lip_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct lip_qp *q = lip_record ? qp_of(qp) : NULL;
	if (!q) {
		struct lip_ctx *c = lip_ctx_of(qp->context);
		if (!c)
			return EINVAL;
		if (!lip_record || (q = destroying_qp(c, qp)) == NULL)
			return c->post_send(qp, wr, bad);
	}
	qlock(&q->slock);
	int ret = send_locked(q, wr, bad, 0);
	qunlock(&q->slock);
	return ret;
}

/* lip_wr_post is wr_complete's post of a QP that posts through the
 * ibv_wr_* API (wrapi.c): the batch it built, as a chain, with the
 * queue's lock held since wr_start (released here, once the chain, which
 * the next batch reuses, was posted). */
int lip_wr_post(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int ret = send_locked(q, wr, bad, 1);
	qunlock(&q->slock);
	return ret;
}

/* lip_qp_lock / lip_qp_unlock: wr_start to wr_complete or wr_abort
 * (wrapi.c) hold the send queue's lock, as providers do. */
void lip_qp_lock(struct lip_qp *q)
{
	LIP_CHILD_CHECK("a send queue's lock");
	qlock(&q->slock);
}
void lip_qp_unlock(struct lip_qp *q) { qunlock(&q->slock); }

/* lip_qp_of is the protected QP of the application's struct ibv_qp. */
struct lip_qp *lip_qp_of(struct ibv_qp *qp) { return qp_of(qp); }

int lip_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct lip_qp *q = lip_record ? qp_of(qp) : NULL;
	if (!q || q->srq) { /* (a QP on an SRQ has no receive queue: the provider says so) */
		struct lip_ctx *c = lip_ctx_of(qp->context);
		if (!c)
			return EINVAL;
		if (q || !lip_record || (q = destroying_qp(c, qp)) == NULL || q->srq)
			return c->post_recv(qp, wr, bad);
	}
	struct lip_thr *t = lip_enter();
	if (__builtin_expect(__atomic_load_n(&q->diverted, __ATOMIC_RELAXED), 0)) {
		lip_leave(t);
		return recv_diverted(q, wr, bad);
	}
	int ret = recv_recorded(q, wr, bad);
	lip_leave(t);
	return ret;
}

/* retire_send retires the oldest outstanding send entries up to and
 * including the one a send completion stands for: the next signaled
 * entry (a signaled completion also retires the unsignaled WRs before
 * it, which completed in order). Entries the provider refused are
 * skipped. */
static void retire_send(struct lip_qp *q)
{
	tlock(&q->stlock);
	uint64_t head = __atomic_load_n(&q->shead, __ATOMIC_ACQUIRE);
	uint64_t t = __atomic_load_n(&q->stail, __ATOMIC_RELAXED);
	while (t < head) {
		struct lip_sqe *e = &q->sq[t & q->smask];
		t++;
		if (e->flags & LIP_SQE_VOID)
			continue;
		if (e->opcode == IBV_WR_SEND || e->opcode == IBV_WR_SEND_WITH_IMM || e->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
		    e->opcode == IBV_WR_SEND_WITH_INV)
			q->notifs_done++;
		if (q->sig_all || (e->send_flags & IBV_SEND_SIGNALED))
			break;
	}
	__atomic_store_n(&q->stail, t, __ATOMIC_RELEASE);
	tunlock(&q->stlock);
	/* layer 1's nudge (nudge.c): this QP's send completions pass the
	 * shim's filter; one posted after a nudge freed its slot */
	if (__builtin_expect(!q->sends_polled, 0))
		__atomic_store_n(&q->sends_polled, 1, __ATOMIC_RELEASE);
	if (__builtin_expect(__atomic_load_n(&q->nudge_mark, __ATOMIC_RELAXED) != 0, 0))
		lip_nudge_done(q, t);
}

/* retire_recv retires the receive a successful receive completion of q
 * (wr_id) stands for: the oldest of its own, or the SRQ's with wr_id. */
static void retire_recv(struct lip_qp *q, uint64_t wr_id)
{
	if (q->srq) {
		if (lip_srq_retire(q->srq, wr_id)) {
			tlock(&q->rtlock);
			q->recvs_done++;
			tunlock(&q->rtlock);
		}
		return;
	}
	tlock(&q->rtlock);
	uint64_t head = __atomic_load_n(&q->rhead, __ATOMIC_ACQUIRE);
	uint64_t t = __atomic_load_n(&q->rtail, __ATOMIC_RELAXED);
	while (t < head) {
		struct lip_rqe *e = &q->rq[t & q->rmask];
		t++;
		if (!(e->flags & LIP_SQE_VOID)) {
			q->recvs_done++;
			break;
		}
	}
	__atomic_store_n(&q->rtail, t, __ATOMIC_RELEASE);
	tunlock(&q->rtlock);
}

/* The express lane's recording (express.c, with lane->record): a QP
 * carried on its backup keeps its rings as the hot path keeps them, so
 * that layer 2 can take it off the lane with what the backup holds. The
 * lane records the application's WRs before posting their translated
 * copies, marks those the backup refused, and retires what each
 * successful completion it hands the application stands for. Sends are
 * recorded under the send queue's lock its caller holds (send_locked);
 * receives under the receive queue's (lip_qp_rlock). */
uint64_t lip_ring_sends(struct lip_qp *q, const struct ibv_send_wr *wr, int k) { return ring_sends(q, wr, (uint64_t)k); }

void lip_ring_sends_void(struct lip_qp *q, uint64_t from, const struct ibv_send_wr *wr, int k, const struct ibv_send_wr *refused)
{
	ring_sends_void(q, from, wr, (uint64_t)k, refused);
}

uint64_t lip_ring_recvs(struct lip_qp *q, const struct ibv_recv_wr *wr, int k) { return ring_recvs(q, wr, (uint64_t)k); }

void lip_ring_recvs_void(struct lip_qp *q, uint64_t from, const struct ibv_recv_wr *wr, int k, const struct ibv_recv_wr *refused)
{
	ring_recvs_void(q, from, wr, (uint64_t)k, refused);
}

void lip_ring_retire(struct lip_qp *q, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS)
		return;
	if (wc->opcode & IBV_WC_RECV)
		retire_recv(q, wc->wr_id);
	else
		retire_send(q);
}

/* lip_qp_dump writes every QP the hot path knows and its rings' state
 * to fd (lip_debug_state; no lock: see lip_chan_dump): the sends posted
 * and retired, the oldest one outstanding, the receives likewise, the
 * handshake counters. A program that waits for ever on a QP of the hot
 * path shows there whether a WR it posted is still outstanding. */
void lip_qp_dump(int fd)
{
	for (int i = 0; i < LIP_MAX_CTX; i++) {
		struct lip_ctx *c = __atomic_load_n(&ctxs[i], __ATOMIC_ACQUIRE);
		if (!c)
			continue;
		for (uint32_t j = 0; j < LIP_QP_SLOTS; j++) {
			struct lip_qp *q = __atomic_load_n(&c->slots[j], __ATOMIC_ACQUIRE);
			if (!q || q == LIP_SLOT_DEAD)
				continue;
			uint64_t sh = q->shead, st = q->stail, rh = q->rhead, rt = q->rtail;
			dprintf(fd, "  qp %#x: armed %d diverted %d express %d sends %llu retired %llu recvs %llu retired %llu "
				    "notifs_done %llu recvs_done %llu overflow %llu",
				q->qpn, q->armed, q->diverted, q->express, (unsigned long long)sh, (unsigned long long)st,
				(unsigned long long)rh, (unsigned long long)rt, (unsigned long long)q->notifs_done,
				(unsigned long long)q->recvs_done, (unsigned long long)q->overflow);
			if (q->sq && st < sh) {
				const struct lip_sqe *e = &q->sq[st & q->smask];
				dprintf(fd, "; oldest send wr_id %#llx opcode %u flags %#x", (unsigned long long)e->wr_id, e->opcode,
					e->send_flags);
			}
			if (q->rq && rt < rh)
				dprintf(fd, "; oldest recv wr_id %#llx", (unsigned long long)q->rq[rt & q->rmask].wr_id);
			dprintf(fd, "\n");
		}
	}
}

void lip_qp_rlock(struct lip_qp *q) { qlock(&q->rlock); }
void lip_qp_runlock(struct lip_qp *q) { qunlock(&q->rlock); }

/* lip_retire_wc accounts for one successful completion of c's QPs. */
void lip_retire_wc(struct lip_ctx *c, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS)
		return;
	struct lip_qp *q = lip_qp_find(c, wc->qp_num);
	if (!q)
		return;
	if (wc->opcode & IBV_WC_RECV)
		retire_recv(q, wc->wr_id);
	else
		retire_send(q);
}

int lip_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct lip_ctx *c = lip_ctx_of(cq->context);
	if (!c)
		return EINVAL;
	if (!lip_record)
		return c->poll_cq(cq, n, wc);
	if (__builtin_expect(__atomic_load_n(&lip_cqex_unpolled, __ATOMIC_RELAXED) != 0, 0))
		lip_cqex_polled(cq); /* (outside the poll: it may call the Go side) */
	struct lip_thr *t = lip_enter();
	if (__builtin_expect(__atomic_load_n(&lip_ndcq, __ATOMIC_RELAXED) != 0, 0) && lip_cq_diverted(cq)) {
		lip_leave(t);
		return lip_diverted_poll_cq(c, cq, n, wc);
	}
	int got = c->poll_cq(cq, n, wc);
	struct lip_qp *last = NULL;
	for (int i = 0; i < got; i++) {
		if (!last || last->qpn != wc[i].qp_num)
			last = lip_qp_find(c, wc[i].qp_num);
		if (!last) {
			struct lip_qp *d;
			if (wc[i].status == IBV_WC_SUCCESS && (d = find_destroying(c, wc[i].qp_num)) != NULL) {
				if (wc[i].opcode & IBV_WC_RECV)
					retire_recv(d, wc[i].wr_id);
				else
					retire_send(d);
			}
			continue;
		}
		if (wc[i].status != IBV_WC_SUCCESS) {
			if (__builtin_expect(lip_nudge_wc(last, &wc[i]), 0) && !lip_nudge_fault(last, &wc[i])) {
				/* layer 1's nudge: its flush is no one's (nudge.c) */
				memmove(&wc[i], &wc[i + 1], (size_t)(got - i - 1) * sizeof(*wc));
				got--;
				i--;
				continue;
			}
			/* The opcode of an error completion is undefined: its
			 * entry stays outstanding. An armed QP's error (its
			 * nudge's too: lip_nudge_fault) goes to layer 2 with the
			 * rest of the batch, which is its now; the application
			 * gets what came before. So does the error of a QP
			 * diverted while this poll was past the CQ's check (a
			 * PORT_ERR's divert sets the flag, then waits for this
			 * poll to leave): layer 2 owns it already, and the
			 * application must not see the fault. */
			if (__atomic_load_n(&last->armed, __ATOMIC_ACQUIRE)) {
				/* the rest of the batch without nudges' flushes */
				got = i + 1 + lip_nudge_drop(c, wc + i + 1, got - i - 1);
				lip_leave(t);
				lip_hooks.intercept(cq, wc + i, got - i);
				if (__atomic_load_n(&last->diverted, __ATOMIC_ACQUIRE))
					return i;
				/* Layer 2 could not take the QP: nothing was taken,
				 * the batch goes on as plain verbs. */
				t = lip_enter();
			}
			continue;
		}
		if (wc[i].opcode & IBV_WC_RECV)
			retire_recv(last, wc[i].wr_id);
		else
			retire_send(last);
	}
	lip_leave(t);
	return got;
}
