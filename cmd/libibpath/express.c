/* The express lane: the data path of a diverted QP once its failover has
 * settled on the backup (both queues in Fallback, nothing owed to the
 * application). Layer 2 (Go) hands such a QP over with its backup QP and
 * CQs and its key translations; from then on its posts go straight to the
 * backup provider with the keys translated, and polls of its CQs drain the
 * backup CQs in C, with the default QP's numbers, as layer 2's Conn would
 * (crossnic/poll.go). Go is called only for a key the tables miss and
 * when the QP surfaces its error. Without it every post and poll of a
 * failed-over QP is a call into Go: fine for bandwidth, ruinous for a
 * latency-bound loop.
 *
 * What the lane does mirrors a crossnic.Conn in steady Fallback:
 * - a backup completion gets the default QP's qp_num (a receive also the
 *   peer's default QP as src_qp); layer 2's own control WRs are dropped;
 * - an error completion on the backup, or the peer's refusal, surfaces
 *   the error: the completion reaches the application, layer 2 is told
 *   (it moves the backup QP to the error state, which flushes the rest),
 *   and later posts go to the backup QP too, to flush behind the older
 *   ones (xl_surfaced_send);
 * - the default QP's completions are flushes of WRs already replayed:
 *   kept from the application until the QP surfaced.
 * Without record a QP leaves the lane only to be destroyed. With record
 * (lip_xl_record: the switch back is on) the lane also keeps the QP's
 * shadow rings, loaded with what layer 2's Conn held: each WR it posts on
 * the backup is recorded as the hot path records a post, each successful
 * completion it hands the application retires what it stands for. When
 * the QP's default port returns, layer 2 takes its CQs off the lane, then
 * the QP (lip_express_off), reads the rings and hands them to the Conn,
 * which switches the traffic back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include "shim.h"

/* ---- key tables ---- */

static struct lip_keytab *keytab_new(uint32_t slots)
{
	struct lip_keytab *t = calloc(1, sizeof(*t) + slots * sizeof(struct lip_key));
	if (t)
		t->mask = slots - 1;
	return t;
}

static inline uint32_t key_hash(uint32_t k) { return (k * 0x9E3779B1u) >> 7; }

static int keytab_get(const struct lip_keytab *t, uint32_t from, uint32_t *to)
{
	for (uint32_t i = 0, h = key_hash(from); i <= t->mask; i++) {
		const struct lip_key *e = &t->e[(h + i) & t->mask];
		if (!__atomic_load_n(&e->used, __ATOMIC_ACQUIRE))
			return 0;
		if (e->from == from) {
			*to = __atomic_load_n(&e->to, __ATOMIC_RELAXED);
			return 1;
		}
	}
	return 0;
}

/* keytab_put adds or updates a mapping; -1 when the table is full. One
 * writer at a time (layer 2 holds its lock). */
static int keytab_put(struct lip_keytab *t, uint32_t from, uint32_t to)
{
	for (uint32_t i = 0, h = key_hash(from); i <= t->mask; i++) {
		struct lip_key *e = &t->e[(h + i) & t->mask];
		if (!e->used) {
			if (2 * (t->n + 1) > t->mask + 1)
				return -1; /* keep probes short: grow at half full */
			e->from = from;
			e->to = to;
			__atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
			t->n++;
			return 0;
		}
		if (e->from == from) {
			__atomic_store_n(&e->to, to, __ATOMIC_RELAXED);
			return 0;
		}
	}
	return -1;
}

struct lip_xl *lip_xl_new(struct ibv_qp *bqp, struct ibv_cq *bcq, struct ibv_cq *brcq, uint32_t peer_qpn)
{
	struct lip_xl *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->bqp = bqp;
	x->bcq = bcq;
	x->brcq = brcq ? brcq : bcq;
	/* The shim's own contexts are not wrapped: their ops are the provider's. */
	x->post_send = bqp->context->ops.post_send;
	x->post_recv = bqp->context->ops.post_recv;
	x->poll_cq = bcq->context->ops.poll_cq;
	x->peer_qpn = peer_qpn;
	x->lk = keytab_new(64);
	x->rk = keytab_new(64);
	if (!x->lk || !x->rk) {
		lip_xl_free(x);
		return NULL;
	}
	return x;
}

void lip_xl_free(struct lip_xl *x)
{
	if (!x)
		return;
	free(x->lk);
	free(x->rk);
	free(x);
}

/* lip_xl_key adds the backup key of a default one (remote: the peer's
 * rkeys, else local lkeys), growing the table when it is half full (the
 * old one is freed once no poster can be reading it). -1 (errno) when
 * memory is short. */
int lip_xl_key(struct lip_xl *x, int remote, uint32_t from, uint32_t to)
{
	struct lip_keytab **tp = remote ? &x->rk : &x->lk;
	struct lip_keytab *t = *tp;
	if (keytab_put(t, from, to) == 0)
		return 0;
	struct lip_keytab *g = keytab_new(2 * (t->mask + 1));
	if (!g) {
		errno = ENOMEM;
		return -1;
	}
	for (uint32_t i = 0; i <= t->mask; i++)
		if (t->e[i].used)
			keytab_put(g, t->e[i].from, t->e[i].to);
	keytab_put(g, from, to);
	__atomic_store_n(tp, g, __ATOMIC_RELEASE);
	lip_quiesce();
	free(t);
	return 0;
}

int lip_xl_lookup(struct lip_xl *x, int remote, uint32_t from, uint32_t *to)
{
	return keytab_get(__atomic_load_n(remote ? &x->rk : &x->lk, __ATOMIC_ACQUIRE), from, to);
}

/* ---- handing over ---- */

/* lip_xl_record makes x, the lane q is about to go on, keep q's shadow
 * rings: they are loaded with sends and recvs (the WRs the backup holds
 * that the application has not seen complete, in posting order) and the
 * handshake counters. q is diverted and not on the lane, so nothing else
 * touches its rings. 0, or -1 with errno (EINVAL: not diverted; EBUSY: on
 * the lane; ENOSPC: more WRs than a ring holds) and nothing changed. */
int lip_xl_record(struct lip_qp *q, struct lip_xl *x, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs,
		  uint64_t notifs_done, uint64_t recvs_done)
{
	if (!__atomic_load_n(&q->diverted, __ATOMIC_ACQUIRE)) {
		errno = EINVAL;
		return -1;
	}
	if (__atomic_load_n(&q->express, __ATOMIC_ACQUIRE)) {
		errno = EBUSY;
		return -1;
	}
	if (lip_rings_load(q, sends, recvs))
		return -1;
	q->notifs_done = notifs_done;
	q->recvs_done = recvs_done;
	x->record = 1; /* published with q->xl by lip_express_on */
	return 0;
}

/* lip_express_on puts a diverted QP on the express lane; x is the lane's
 * from now on. */
void lip_express_on(struct lip_qp *q, struct lip_xl *x)
{
	q->xl = x;
	__atomic_store_n(&q->express, 1, __ATOMIC_RELEASE);
}

/* lip_express_off takes the QP off the lane before its backup is
 * destroyed: returns once no post or poll is using the lane. The lane
 * stays allocated (a racing hook may still read q->xl). */
void lip_express_off(struct lip_qp *q)
{
	__atomic_store_n(&q->express, 0, __ATOMIC_SEQ_CST);
	lip_quiesce();
}

/* lip_express_surface: layer 2 surfaced the QP's error itself. */
void lip_express_surface(struct lip_qp *q)
{
	if (q->xl)
		__atomic_store_n(&q->xl->surfaced, 1, __ATOMIC_RELEASE);
}

static struct lip_xcq *xcqs[LIP_DCQ_SLOTS];

static struct lip_xcq **xcq_slot(struct ibv_cq *cq, int add)
{
	uint32_t h = lip_ptr_hash(cq, LIP_DCQ_SLOTS);
	for (uint32_t i = 0; i < LIP_DCQ_SLOTS; i++) {
		struct lip_xcq **s = &xcqs[(h + i) & (LIP_DCQ_SLOTS - 1)];
		struct lip_xcq *x = __atomic_load_n(s, __ATOMIC_ACQUIRE);
		if (!x)
			return add ? s : NULL;
		if (x->cq == cq)
			return s;
	}
	return NULL;
}

/* lip_express_cq sets the express QPs completing into cq (n 0: the CQ
 * leaves the lane, its polls go to layer 2 again). Entries are never
 * removed from the table, only emptied, so probes stay valid. Called by
 * layer 2 with its lock held. -1 (errno) when it cannot. */
int lip_express_cq(struct ibv_cq *cq, struct lip_qp **qs, int n)
{
	if (n < 0 || n > LIP_XCQ_QPS) {
		errno = E2BIG;
		return -1;
	}
	struct lip_xcq **s = xcq_slot(cq, 1);
	if (!s) {
		errno = ENOSPC;
		return -1;
	}
	struct lip_xcq *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return -1;
	}
	x->cq = cq;
	x->n = n;
	for (int i = 0; i < n; i++)
		x->q[i] = qs[i];
	struct lip_xcq *old = __atomic_exchange_n(s, x, __ATOMIC_SEQ_CST);
	if (old) {
		lip_quiesce();
		free(old);
	}
	if (n && lip_chan_armed(cq))
		lip_express_arm(cq); /* the application waits for an event of cq */
	return 0;
}

static void arm_backup(struct lip_xl *l, struct ibv_cq *b)
{
	if (!b || !b->context->ops.req_notify_cq)
		return;
	__atomic_fetch_add(&l->arms, 1, __ATOMIC_RELAXED);
	if (b->context->ops.req_notify_cq(b, 0))
		__atomic_fetch_add(&l->arm_errs, 1, __ATOMIC_RELAXED);
}

/* lip_express_arm requests the next event of the backup CQs behind cq
 * on the lane: the application armed cq (channel.c), and its completions
 * come from them. Their events reach layer 2's notifier, which wakes cq
 * (lip_chan_wake). */
void lip_express_arm(struct ibv_cq *cq)
{
	struct lip_thr *t = lip_enter();
	struct lip_xcq **slot = xcq_slot(cq, 0);
	struct lip_xcq *x = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	for (int i = 0; x && i < x->n; i++) {
		struct lip_qp *q = x->q[i];
		struct lip_xl *l = q->xl;
		if (!l || !__atomic_load_n(&q->express, __ATOMIC_ACQUIRE))
			continue;
		if (q->send_cq == cq)
			arm_backup(l, l->bcq);
		if (q->recv_cq == cq)
			arm_backup(l, l->brcq ? l->brcq : l->bcq);
	}
	lip_leave(t);
}

/* ---- posting ---- */

static inline int zero_length(const struct ibv_send_wr *w)
{
	for (int i = 0; i < w->num_sge; i++)
		if (w->sg_list[i].length)
			return 0;
	return 1;
}

/* translate copies w into d with its keys moved to the backup: 0, or 1
 * when a key is not in the tables. */
static int translate(struct lip_xl *x, struct ibv_send_wr *d, struct ibv_sge *sge, const struct ibv_send_wr *w)
{
	/* an opcode the backup cannot carry (crossnic.Replayable) is a miss:
	 * layer 2 surfaces the QP */
	if ((unsigned)w->opcode >= 64 || !(LIP_REPLAYABLE_OPS >> w->opcode & 1))
		return 1;
	*d = *w;
	d->next = NULL;
	d->sg_list = sge;
	for (int i = 0; i < w->num_sge; i++) {
		sge[i] = w->sg_list[i];
		if (!(w->send_flags & IBV_SEND_INLINE) && !lip_xl_lookup(x, 0, sge[i].lkey, &sge[i].lkey))
			return 1;
	}
	switch (w->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (zero_length(w))
			break; /* a zero-length WRITE checks no rkey */
		/* fall through */
	case IBV_WR_RDMA_READ:
		if (!lip_xl_lookup(x, 1, w->wr.rdma.rkey, &d->wr.rdma.rkey))
			return 1;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (!lip_xl_lookup(x, 1, w->wr.atomic.rkey, &d->wr.atomic.rkey))
			return 1;
		break;
	default:
		break;
	}
	return 0;
}

/* translate_recv copies receive w into d with its lkeys moved to the
 * backup: 0, or 1 when a key is not in the tables. */
static inline int translate_recv(struct lip_xl *x, struct ibv_recv_wr *d, struct ibv_sge *sge, const struct ibv_recv_wr *w)
{
	*d = *w;
	d->next = NULL;
	d->sg_list = sge;
	for (int i = 0; i < w->num_sge; i++) {
		sge[i] = w->sg_list[i];
		if (!lip_xl_lookup(x, 0, sge[i].lkey, &sge[i].lkey))
			return 1;
	}
	return 0;
}

/* The chunk loops of xl_post_send and xl_post_recv: post d[0..k) (copies
 * of src[0..k)) with the provider's post; on an error, *bad is the
 * application's WR the provider refused, and refused(i) runs with its
 * index (the recording marks it and those after it void). */
#define XL_POST(post, bqp, d, src, k, bad, count, refused)              \
	do {                                                             \
		__typeof__(&(d)[0]) bb_ = NULL;                          \
		int r_ = (post)((bqp), (d), &bb_);                       \
		if (r_) {                                                \
			int at_ = 0;                                     \
			for (int i_ = 0; i_ < (k); i_++)                 \
				if (&(d)[i_] == bb_)                     \
					at_ = i_;                        \
			*(bad) = (src)[at_];                             \
			refused(at_);                                    \
			return r_;                                       \
		}                                                        \
		__atomic_fetch_add(&(count), (k), __ATOMIC_RELAXED);     \
	} while (0)

/* A post after the QP surfaced goes where the older WRs are: to the
 * backup QP, which is in the error state (or which layer 2 moves there at
 * once) and flushes it behind them, in its CQ's order, as a plain QP in
 * error would; on the default QP its flush could reach the application
 * before theirs. A WR the backup refuses (its device died), or whose key
 * the tables miss, goes to the default QP with the rest. One WR per
 * provider call: an error is no fast path. */
static int xl_surfaced_send(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct lip_xl *x = q->xl;
	struct ibv_send_wr d, *b = NULL;
	struct ibv_sge sge[LIP_XL_SGE];
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || wr->num_sge > LIP_XL_SGE || translate(x, &d, sge, wr) || x->post_send(x->bqp, &d, &b))
			break;
		__atomic_fetch_add(&x->sends, 1, __ATOMIC_RELAXED);
	}
	return wr ? q->ctx->post_send(q->qp, wr, bad) : 0;
}

/* xl_surfaced_recv: xl_surfaced_send for receives (lkeys only). */
static int xl_surfaced_recv(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct lip_xl *x = q->xl;
	struct ibv_recv_wr d, *b = NULL;
	struct ibv_sge sge[LIP_XL_SGE];
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || wr->num_sge > LIP_XL_SGE || translate_recv(x, &d, sge, wr) || x->post_recv(x->bqp, &d, &b))
			break;
		__atomic_fetch_add(&x->recvs, 1, __ATOMIC_RELAXED);
	}
	return wr ? q->ctx->post_recv(q->qp, wr, bad) : 0;
}

/* xl_post_send posts on the backup QP in chunks of translated copies.
 * LIP_AGAIN when a key misses: the WRs before it were posted, *bad is
 * the first that was not. */
static int xl_post_send(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct lip_xl *x = q->xl;
	if (__atomic_load_n(&x->surfaced, __ATOMIC_ACQUIRE))
		return xl_surfaced_send(q, wr, bad);
	struct ibv_send_wr d[LIP_XL_WRS], *src[LIP_XL_WRS];
	struct ibv_sge sge[LIP_XL_SGE];
	struct ibv_send_wr *w = wr;
	/* recorded under the send queue's lock, which the caller holds
	 * (send_locked) */
	const int rec = x->record;
	while (w) {
		int k = 0, ns = 0, miss = 0;
		while (w && k < LIP_XL_WRS) {
			if (w->num_sge < 0 || w->num_sge > LIP_XL_SGE) {
				if (k)
					break;
				*bad = w;
				return EINVAL;
			}
			if (ns + w->num_sge > LIP_XL_SGE)
				break;
			if (translate(x, &d[k], sge + ns, w)) {
				miss = 1;
				break;
			}
			if (k)
				d[k - 1].next = &d[k];
			src[k++] = w;
			ns += w->num_sge;
			w = w->next;
		}
		if (k) {
			uint64_t first = rec ? lip_ring_sends(q, src[0], k) : 0;
#define XL_SEND_REFUSED(at) (rec ? lip_ring_sends_void(q, first, src[0], k, src[at]) : (void)0)
			XL_POST(x->post_send, x->bqp, d, src, k, bad, x->sends, XL_SEND_REFUSED);
#undef XL_SEND_REFUSED
		}
		if (miss) {
			__atomic_fetch_add(&x->misses, 1, __ATOMIC_RELAXED);
			*bad = w;
			return LIP_AGAIN;
		}
	}
	return 0;
}

/* xl_post_recv: xl_post_send for receives (lkeys only). */
static int xl_post_recv(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct lip_xl *x = q->xl;
	if (__atomic_load_n(&x->surfaced, __ATOMIC_ACQUIRE))
		return xl_surfaced_recv(q, wr, bad);
	struct ibv_recv_wr d[LIP_XL_WRS], *src[LIP_XL_WRS];
	struct ibv_sge sge[LIP_XL_SGE];
	struct ibv_recv_wr *w = wr;
	const int rec = x->record;
	while (w) {
		int k = 0, ns = 0, miss = 0;
		while (w && k < LIP_XL_WRS) {
			if (w->num_sge < 0 || w->num_sge > LIP_XL_SGE) {
				if (k)
					break;
				*bad = w;
				return EINVAL;
			}
			if (ns + w->num_sge > LIP_XL_SGE)
				break;
			if ((miss = translate_recv(x, &d[k], sge + ns, w)))
				break;
			if (k)
				d[k - 1].next = &d[k];
			src[k++] = w;
			ns += w->num_sge;
			w = w->next;
		}
		if (k && rec) {
			/* recorded and posted under the receive queue's lock,
			 * so that the ring's order is the provider's */
			lip_qp_rlock(q);
			uint64_t first = lip_ring_recvs(q, src[0], k);
#define XL_RECV_REFUSED(at) (lip_ring_recvs_void(q, first, src[0], k, src[at]), lip_qp_runlock(q))
			XL_POST(x->post_recv, x->bqp, d, src, k, bad, x->recvs, XL_RECV_REFUSED);
#undef XL_RECV_REFUSED
			lip_qp_runlock(q);
		} else if (k) {
#define XL_NO_RECORD(at) ((void)(at))
			XL_POST(x->post_recv, x->bqp, d, src, k, bad, x->recvs, XL_NO_RECORD);
#undef XL_NO_RECORD
		}
		if (miss) {
			__atomic_fetch_add(&x->misses, 1, __ATOMIC_RELAXED);
			*bad = w;
			return LIP_AGAIN;
		}
	}
	return 0;
}

/* The dispatch of a diverted QP's posts: the express lane when it is on
 * it, else layer 2; a LIP_AGAIN from either (a key the lane misses, which
 * layer 2 then resolves; a QP that reached the lane while layer 2 was
 * being called) dispatches the WRs not posted yet again. Layer 2's
 * LIP_HOME (it gave the QP back to the hot path meanwhile, posting none
 * of them) is returned with *bad the first WR not posted, which the
 * caller (hotpath.c) posts from in the hot path. */
#define DIVERTED_POST(xl_post, hook, q, wr, bad, wrtype)                           \
	do {                                                                       \
		wrtype *from_ = (wr), *b_ = NULL;                                   \
		for (int try_ = 0; try_ < 8; try_++) {                              \
			struct lip_thr *t_ = lip_enter();                           \
			if (__atomic_load_n(&(q)->express, __ATOMIC_ACQUIRE)) {     \
				int r_ = xl_post((q), from_, &b_);                  \
				lip_leave(t_);                                      \
				if (r_ != LIP_AGAIN) {                              \
					if (r_ && (bad))                            \
						*(bad) = b_;                        \
					return r_;                                  \
				}                                                   \
				from_ = b_;                                         \
			} else {                                                    \
				lip_leave(t_);                                      \
			}                                                           \
			int r_ = (hook)((q)->qp, from_, (bad));                     \
			if (r_ == LIP_HOME && (bad))                                \
				*(bad) = from_;                                     \
			if (r_ != LIP_AGAIN)                                        \
				return r_;                                          \
		}                                                                   \
		if (bad)                                                            \
			*(bad) = from_;                                             \
		return EIO; /* layer 2 neither resolved the keys nor surfaced */    \
	} while (0)

int lip_diverted_post_send(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	DIVERTED_POST(xl_post_send, lip_hooks.post_send, q, wr, bad, struct ibv_send_wr);
}

int lip_diverted_post_recv(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	DIVERTED_POST(xl_post_recv, lip_hooks.post_recv, q, wr, bad, struct ibv_recv_wr);
}

/* ---- polling ---- */

/* A QP that surfaced during a poll: layer 2 is told once the poll left
 * the hot path. */
struct xl_surf {
	int n;
	struct lip_qp *q[LIP_XCQ_QPS];
	struct ibv_wc wc[LIP_XCQ_QPS];
};

static void surface(struct lip_qp *q, const struct ibv_wc *w, struct xl_surf *s)
{
	if (__atomic_exchange_n(&q->xl->surfaced, 1, __ATOMIC_ACQ_REL))
		return; /* already surfaced: layer 2 knows */
	if (s->n < LIP_XCQ_QPS) {
		s->q[s->n] = q;
		s->wc[s->n++] = *w;
	}
}

/* backup_wcs turns k completions polled from q's backup CQ into what the
 * application sees, in place; returns how many it keeps. */
static int backup_wcs(struct lip_qp *q, struct ibv_wc *wc, int k, struct xl_surf *s)
{
	struct lip_xl *x = q->xl;
	int kept = 0;
	for (int i = 0; i < k; i++) {
		struct ibv_wc w = wc[i];
		/* any of layer 2's own WRs, not only the control messages:
		 * none is the application's (a fence's completion, were one
		 * to reach the lane, would otherwise go to the application) */
		int ctrl = w.wr_id >= LIP_OWN_WRID_MIN && w.wr_id <= LIP_CTRL_SEND_WRID;
		if (w.status != IBV_WC_SUCCESS) {
			surface(q, &w, s);
			if (ctrl)
				continue;
		} else if (ctrl) {
			__atomic_fetch_add(&x->own, 1, __ATOMIC_RELAXED);
			/* the peer's refusal surfaces; other control messages
			 * (an acknowledgement, the peer's PSN announcement)
			 * change nothing once both queues are on the backup */
			if (w.wr_id == LIP_CTRL_RECV_WRID && (w.opcode & IBV_WC_RECV) &&
			    (ntohl(w.imm_data) & LIP_CTRL_REFUSE_MASK) == LIP_CTRL_REFUSE)
				surface(q, &w, s);
			continue;
		} else {
			__atomic_fetch_add(&x->completions, 1, __ATOMIC_RELAXED);
			if (w.opcode & IBV_WC_RECV)
				w.src_qp = x->peer_qpn;
			if (x->record)
				lip_ring_retire(q, &w);
		}
		w.qp_num = q->qpn;
		wc[kept++] = w;
	}
	return kept;
}

/* default_wcs handles k completions polled from the application's CQ:
 * flushes of an express QP's default QP are kept from the application
 * until it surfaced; other QPs' completions pass, retired in the hot
 * path's rings. Returns how many it keeps, in place. */
static int default_wcs(struct lip_ctx *c, struct ibv_wc *wc, int k)
{
	int kept = 0;
	struct lip_qp *last = NULL;
	for (int i = 0; i < k; i++) {
		if (!last || last->qpn != wc[i].qp_num)
			last = lip_qp_find(c, wc[i].qp_num);
		if (last && wc[i].status != IBV_WC_SUCCESS && lip_nudge_wc(last, &wc[i]))
			continue; /* layer 1's nudge (nudge.c) */
		if (last && __atomic_load_n(&last->express, __ATOMIC_ACQUIRE)) {
			if (wc[i].status != IBV_WC_SUCCESS && !__atomic_load_n(&last->xl->surfaced, __ATOMIC_ACQUIRE)) {
				__atomic_fetch_add(&last->xl->hidden, 1, __ATOMIC_RELAXED);
				continue;
			}
		} else if (last && !__atomic_load_n(&last->diverted, __ATOMIC_ACQUIRE)) {
			lip_retire_wc(c, &wc[i]);
		}
		wc[kept++] = wc[i];
	}
	return kept;
}

static int poll_backups(struct lip_xcq *x, struct ibv_cq *cq, int n, struct ibv_wc *wc, struct xl_surf *s)
{
	int got = 0;
	for (int i = 0; i < x->n && got < n; i++) {
		struct lip_qp *q = x->q[i];
		if (!__atomic_load_n(&q->express, __ATOMIC_ACQUIRE))
			continue;
		struct lip_xl *l = q->xl;
		struct ibv_cq *b[2];
		int nb = 0;
		if (q->send_cq == cq)
			b[nb++] = l->bcq;
		if (q->recv_cq == cq && (nb == 0 || l->brcq != l->bcq))
			b[nb++] = l->brcq;
		for (int j = 0; j < nb && got < n; j++) {
			/* a CQ that filled the request may hold more: what
			 * backup_wcs drops (layer 2's own WRs) is polled
			 * again, for a poll that returns less than asked
			 * means an empty CQ to the application (one that
			 * then waits for an event would wait for ever) */
			for (;;) {
				int want = n - got;
				int k = l->poll_cq(b[j], want, wc + got);
				if (k < 0)
					return got ? got : k;
				got += backup_wcs(q, wc + got, k, s);
				if (k < want || got >= n)
					break;
			}
		}
	}
	return got;
}

static int poll_default(struct lip_ctx *c, struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0;
	for (;;) { /* as poll_backups: what default_wcs keeps back is polled again */
		int want = n - got;
		int k = c->poll_cq(cq, want, wc + got);
		if (k < 0)
			return got ? got : k;
		got += default_wcs(c, wc + got, k);
		if (k < want || got >= n)
			return got;
	}
}

/* xl_poll fills wc from the backup CQs of cq's express QPs and from cq
 * itself, alternating which goes first so neither starves the other. */
static int xl_poll(struct lip_ctx *c, struct lip_xcq *x, struct ibv_cq *cq, int n, struct ibv_wc *wc, struct xl_surf *s)
{
	static __thread unsigned turn __attribute__((tls_model("initial-exec")));
	int first_default = turn++ & 1;
	int got = 0, k;
	if (first_default) {
		if ((k = poll_default(c, cq, n, wc)) < 0)
			return k;
		got = k;
	}
	if (got < n) {
		if ((k = poll_backups(x, cq, n - got, wc + got, s)) < 0)
			return got ? got : k;
		got += k;
	}
	if (!first_default && got < n) {
		if ((k = poll_default(c, cq, n - got, wc + got)) < 0)
			return got ? got : k;
		got += k;
	}
	return got;
}

/* lip_diverted_poll_cq polls a diverted CQ: on the express lane when it
 * is on it, else through layer 2 (which answers LIP_AGAIN when the CQ
 * reached the lane meanwhile). */
int lip_diverted_poll_cq(struct lip_ctx *c, struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	for (int try = 0; try < 8; try++) {
		struct lip_thr *t = lip_enter();
		struct lip_xcq **slot = xcq_slot(cq, 0);
		struct lip_xcq *x = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
		if (x && x->n) {
			struct xl_surf s;
			s.n = 0;
			int got = xl_poll(c, x, cq, n, wc, &s);
			lip_leave(t);
			for (int i = 0; i < s.n; i++)
				lip_hooks.surfaced(s.q[i]->qp, &s.wc[i]);
			return got;
		}
		lip_leave(t);
		int got = lip_hooks.poll_cq(cq, n, wc);
		if (got != LIP_AGAIN)
			return got;
	}
	/* Layer 2 kept answering "again" without the CQ on the lane: a state
	 * that is on its way to change. No completion this time; a negative
	 * count would be the CQ's failure to the program (MPI and NCCL abort). */
	return 0;
}

/* lip_xl_dump writes every CQ on the lane and its QPs' counters to fd
 * (lip_debug_state; no lock: see lip_chan_dump). */
void lip_xl_dump(int fd)
{
	for (int i = 0; i < LIP_DCQ_SLOTS; i++) {
		struct lip_xcq *x = xcqs[i];
		if (!x || !x->n)
			continue;
		dprintf(fd, "  lane CQ %p: %d QPs\n", (void *)x->cq, x->n);
		for (int j = 0; j < x->n && j < LIP_XCQ_QPS; j++) {
			struct lip_qp *q = x->q[j];
			struct lip_xl *l = q->xl;
			if (!l) {
				dprintf(fd, "    QP %#x: express %d, no lane\n", q->qpn, q->express);
				continue;
			}
			dprintf(fd,
				"    QP %#x on backup QP %#x (CQs %p %p): express %d surfaced %d sends %llu recvs %llu "
				"completions %llu hidden %llu misses %llu own %llu arms %llu refused %llu\n",
				q->qpn, l->bqp->qp_num, (void *)l->bcq, (void *)l->brcq, q->express, l->surfaced,
				(unsigned long long)l->sends, (unsigned long long)l->recvs,
				(unsigned long long)l->completions, (unsigned long long)l->hidden,
				(unsigned long long)l->misses, (unsigned long long)l->own, (unsigned long long)l->arms,
				(unsigned long long)l->arm_errs);
		}
	}
}
