/* QPs that post through the ibv_wr_* API (ibv_wr_start, ibv_wr_rdma_write,
 * ibv_wr_set_sge, ..., ibv_wr_complete): function pointers of the
 * application's struct ibv_qp_ex, which the provider fills. The shim puts
 * its own in their place (lip_wr_attach): between wr_start and
 * wr_complete they build the batch as a chain of ibv_send_wr in buffers
 * of the QP (inline payloads copied at once, as providers copy them into
 * the WQE); wr_complete hands the chain to the hot path (lip_wr_post),
 * which records it in the shadow ring and issues it through the
 * provider's own ibv_wr_* functions (lip_wr_issue), or, once layer 2
 * diverted the QP, posts it on the backup like any ibv_post_send. Nothing
 * reaches the provider before wr_complete, which is when a provider rings
 * the doorbell anyway.
 *
 * The operations an RC QP of the old API has are followed: SEND (with
 * immediate), RDMA WRITE (with immediate), RDMA READ and the two atomics.
 * A QP that asks for others (local invalidate, memory windows, SEND with
 * invalidate, TSO, atomic write, flush) is left alone (lip_wr_follows). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

/* The send_ops_flags whose operations the shim follows. */
#define LIP_WR_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

struct lip_wrb {
	/* the provider's functions */
	void (*start)(struct ibv_qp_ex *);
	int (*complete)(struct ibv_qp_ex *);
	void (*abort)(struct ibv_qp_ex *);
	void (*rdma_write)(struct ibv_qp_ex *, uint32_t, uint64_t);
	void (*rdma_write_imm)(struct ibv_qp_ex *, uint32_t, uint64_t, __be32);
	void (*rdma_read)(struct ibv_qp_ex *, uint32_t, uint64_t);
	void (*send)(struct ibv_qp_ex *);
	void (*send_imm)(struct ibv_qp_ex *, __be32);
	void (*cmp_swp)(struct ibv_qp_ex *, uint32_t, uint64_t, uint64_t, uint64_t);
	void (*fetch_add)(struct ibv_qp_ex *, uint32_t, uint64_t, uint64_t);
	void (*set_sge)(struct ibv_qp_ex *, uint32_t, uint64_t, uint32_t);
	void (*set_sge_list)(struct ibv_qp_ex *, size_t, const struct ibv_sge *);
	void (*set_inline_data)(struct ibv_qp_ex *, void *, size_t);
	void (*set_inline_data_list)(struct ibv_qp_ex *, size_t, const struct ibv_data_buf *);
	struct ibv_qp_ex *qpx;
	uint32_t cap, max_sge, max_inl;
	/* the batch between wr_start and wr_complete */
	uint32_t n;
	int err;                /* what wr_complete returns: a WR the batch cannot carry */
	struct ibv_send_wr *w;  /* cap WRs */
	unsigned int *flags;    /* the application's wr_flags of each */
	struct ibv_sge *sge;    /* max_sge per WR */
	uint8_t *inl;           /* max_inl bytes per WR */
};

int lip_wr_follows(uint64_t send_ops_flags)
{
	return (send_ops_flags & ~(uint64_t)LIP_WR_OPS) == 0;
}

/* wq is the protected QP of qpx. A batch makes several calls in a row on
 * one QP: the thread keeps the last answer, valid while no QP was removed
 * since (lip_qp_gen). */
static __thread struct {
	struct ibv_qp_ex *qpx;
	struct lip_qp *q;
	uint64_t gen;
} last;

static inline struct lip_qp *wq(struct ibv_qp_ex *qpx)
{
	uint64_t gen = __atomic_load_n(&lip_qp_gen, __ATOMIC_ACQUIRE);
	if (last.qpx == qpx && last.gen == gen)
		return last.q;
	struct lip_qp *q = lip_qp_of(&qpx->qp_base);
	last.qpx = qpx, last.q = q, last.gen = gen;
	return q;
}

/* CHILD_PASS: in a child forked without exec (lip_child, interpose.c)
 * the shim passes every verb straight through, the ibv_wr_* functions of
 * a QP it inherited included: the call goes to the provider's function
 * at once, with none of the shim's locks and nothing recorded (a lock a
 * lost thread of the parent held stays held there, and a post to a QP
 * layer 2 carried would enter the Go side, which did not follow the
 * fork). */
#define CHILD_PASS(qpx, fn, ...)                                          \
	do {                                                              \
		if (__builtin_expect(lip_child, 0)) {                     \
			struct lip_qp *q_ = wq(qpx);                      \
			if (q_)                                           \
				q_->wrb->fn((qpx), ##__VA_ARGS__);        \
			return;                                           \
		}                                                         \
	} while (0)

/* cur is the last WR of qpx's batch (the one set_* calls describe), with
 * the batch in *bp; NULL when there is none (the batch's error set). */
static struct ibv_send_wr *cur(struct ibv_qp_ex *qpx, struct lip_wrb **bp)
{
	struct lip_qp *q = wq(qpx);
	if (!q)
		return NULL;
	struct lip_wrb *b = *bp = q->wrb;
	if (b->n == 0) {
		b->err = EINVAL;
		return NULL;
	}
	return &b->w[b->n - 1];
}

/* add starts the batch's next WR, with the wr_id and flags the
 * application set on the QP. */
static struct ibv_send_wr *add(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct lip_qp *q = wq(qpx);
	if (!q)
		return NULL;
	struct lip_wrb *b = q->wrb;
	if (b->n == b->cap) {
		b->err = ENOMEM; /* more WRs than the send queue holds */
		return NULL;
	}
	uint32_t i = b->n++;
	struct ibv_send_wr *w = &b->w[i];
	w->next = NULL;
	w->wr_id = qpx->wr_id;
	w->opcode = op;
	w->send_flags = qpx->wr_flags;
	w->sg_list = &b->sge[(size_t)i * b->max_sge];
	w->num_sge = 0;
	w->imm_data = 0;
	b->flags[i] = qpx->wr_flags;
	if (i)
		b->w[i - 1].next = w;
	return w;
}

static void x_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	CHILD_PASS(qpx, rdma_write, rkey, addr);
	struct ibv_send_wr *w = add(qpx, IBV_WR_RDMA_WRITE);
	if (w)
		w->wr.rdma.rkey = rkey, w->wr.rdma.remote_addr = addr;
}

static void x_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	CHILD_PASS(qpx, rdma_write_imm, rkey, addr, imm);
	struct ibv_send_wr *w = add(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (w)
		w->wr.rdma.rkey = rkey, w->wr.rdma.remote_addr = addr, w->imm_data = imm;
}

static void x_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	CHILD_PASS(qpx, rdma_read, rkey, addr);
	struct ibv_send_wr *w = add(qpx, IBV_WR_RDMA_READ);
	if (w)
		w->wr.rdma.rkey = rkey, w->wr.rdma.remote_addr = addr;
}

static void x_send(struct ibv_qp_ex *qpx)
{
	CHILD_PASS(qpx, send);
	add(qpx, IBV_WR_SEND);
}

static void x_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	CHILD_PASS(qpx, send_imm, imm);
	struct ibv_send_wr *w = add(qpx, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = imm;
}

static void x_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	CHILD_PASS(qpx, cmp_swp, rkey, addr, compare, swap);
	struct ibv_send_wr *w = add(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (w)
		w->wr.atomic.rkey = rkey, w->wr.atomic.remote_addr = addr, w->wr.atomic.compare_add = compare, w->wr.atomic.swap = swap;
}

static void x_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t add_)
{
	CHILD_PASS(qpx, fetch_add, rkey, addr, add_);
	struct ibv_send_wr *w = add(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (w)
		w->wr.atomic.rkey = rkey, w->wr.atomic.remote_addr = addr, w->wr.atomic.compare_add = add_;
}

static void x_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sge)
{
	CHILD_PASS(qpx, set_sge_list, n, sge);
	struct lip_wrb *b;
	struct ibv_send_wr *w = cur(qpx, &b);
	if (!w)
		return;
	if (n > b->max_sge) {
		b->err = EINVAL;
		return;
	}
	memcpy(w->sg_list, sge, n * sizeof(*sge));
	w->num_sge = (int)n;
	w->send_flags &= ~IBV_SEND_INLINE;
}

static void x_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	CHILD_PASS(qpx, set_sge, lkey, addr, length);
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	x_set_sge_list(qpx, 1, &s);
}

static void x_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *buf)
{
	CHILD_PASS(qpx, set_inline_data_list, n, buf);
	struct lip_wrb *b;
	struct ibv_send_wr *w = cur(qpx, &b);
	if (!w)
		return;
	uint8_t *dst = b->inl + (size_t)(w - b->w) * b->max_inl;
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (buf[i].length > b->max_inl - len) {
			b->err = EINVAL; /* the provider refuses more than max_inline_data too */
			return;
		}
		memcpy(dst + len, buf[i].addr, buf[i].length);
		len += buf[i].length;
	}
	/* one SGE over the copy: what a replay sends */
	w->sg_list[0] = (struct ibv_sge){.addr = (uintptr_t)dst, .length = (uint32_t)len, .lkey = 0};
	w->num_sge = 1;
	w->send_flags |= IBV_SEND_INLINE;
}

static void x_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	CHILD_PASS(qpx, set_inline_data, addr, length);
	struct ibv_data_buf d = {.addr = addr, .length = length};
	x_set_inline_data_list(qpx, 1, &d);
}

static void x_start(struct ibv_qp_ex *qpx)
{
	CHILD_PASS(qpx, start);
	struct lip_qp *q = wq(qpx);
	if (!q)
		return;
	lip_qp_lock(q);
	q->wrb->n = 0;
	q->wrb->err = 0;
}

static void x_abort(struct ibv_qp_ex *qpx)
{
	CHILD_PASS(qpx, abort);
	struct lip_qp *q = wq(qpx);
	if (!q)
		return;
	q->wrb->n = 0;
	lip_qp_unlock(q);
}

static int x_complete(struct ibv_qp_ex *qpx)
{
	struct lip_qp *q = wq(qpx);
	if (!q)
		return EINVAL;
	if (__builtin_expect(lip_child, 0))
		return q->wrb->complete(qpx); /* (CHILD_PASS) */
	struct lip_wrb *b = q->wrb;
	if (b->err || b->n == 0) {
		int err = b->err;
		b->n = 0;
		lip_qp_unlock(q);
		return err;
	}
	b->w[b->n - 1].next = NULL;
	/* emptied while the lock is held: lip_wr_post releases it once the
	 * chain was posted, and another thread's batch may begin at once */
	b->n = 0;
	struct ibv_send_wr *bad = NULL;
	return lip_wr_post(q, b->w, &bad);
}

/* lip_wr_issue posts a recorded batch through the provider's ibv_wr_*
 * functions: all of it or, when its wr_complete fails, none (*bad the
 * first). */
int lip_wr_issue(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct lip_wrb *b = q->wrb;
	struct ibv_qp_ex *qpx = b->qpx;
	b->start(qpx);
	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		qpx->wr_id = w->wr_id;
		qpx->wr_flags = b->flags[w - b->w];
		switch (w->opcode) {
		case IBV_WR_RDMA_WRITE:
			b->rdma_write(qpx, w->wr.rdma.rkey, w->wr.rdma.remote_addr);
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			b->rdma_write_imm(qpx, w->wr.rdma.rkey, w->wr.rdma.remote_addr, w->imm_data);
			break;
		case IBV_WR_RDMA_READ:
			b->rdma_read(qpx, w->wr.rdma.rkey, w->wr.rdma.remote_addr);
			break;
		case IBV_WR_SEND:
			b->send(qpx);
			break;
		case IBV_WR_SEND_WITH_IMM:
			b->send_imm(qpx, w->imm_data);
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
			b->cmp_swp(qpx, w->wr.atomic.rkey, w->wr.atomic.remote_addr, w->wr.atomic.compare_add, w->wr.atomic.swap);
			break;
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			b->fetch_add(qpx, w->wr.atomic.rkey, w->wr.atomic.remote_addr, w->wr.atomic.compare_add);
			break;
		default:
			break; /* add() makes no other */
		}
		if (w->send_flags & IBV_SEND_INLINE)
			b->set_inline_data(qpx, (void *)(uintptr_t)w->sg_list[0].addr, w->sg_list[0].length);
		else
			b->set_sge_list(qpx, (size_t)w->num_sge, w->sg_list);
	}
	int ret = b->complete(qpx);
	if (ret)
		*bad = wr;
	return ret;
}

/* lip_wr_free frees a batch of lip_wr_attach's (NULL: nothing). */
void lip_wr_free(struct lip_wrb *b)
{
	if (!b)
		return;
	free(b->w);
	free(b->flags);
	free(b->sge);
	free(b->inl);
	free(b);
}

/* lip_wr_attach takes over the ibv_wr_* functions of q, whose struct
 * ibv_qp_ex is qpx and whose queue was granted cap (send WRs, SGEs,
 * inline bytes). -1 (errno) when it cannot; q then posts as the provider
 * made it, not followed. */
int lip_wr_attach(struct lip_qp *q, struct ibv_qp_ex *qpx, const struct ibv_qp_cap *cap)
{
	if (!qpx->wr_start || !qpx->wr_complete || !qpx->wr_abort || !qpx->wr_set_sge_list || !qpx->wr_set_inline_data) {
		errno = EOPNOTSUPP; /* issuing needs these */
		return -1;
	}
	struct lip_wrb *b = calloc(1, sizeof(*b));
	if (!b)
		return -1;
	b->qpx = qpx;
	b->cap = cap->max_send_wr ? cap->max_send_wr : 1;
	b->max_sge = cap->max_send_sge ? cap->max_send_sge : 1;
	b->max_inl = cap->max_inline_data;
	b->w = calloc(b->cap, sizeof(*b->w));
	b->flags = calloc(b->cap, sizeof(*b->flags));
	b->sge = calloc((size_t)b->cap * b->max_sge, sizeof(*b->sge));
	b->inl = b->max_inl ? calloc(b->cap, b->max_inl) : NULL;
	if (!b->w || !b->flags || !b->sge || (b->max_inl && !b->inl)) {
		free(b->w);
		free(b->flags);
		free(b->sge);
		free(b->inl);
		free(b);
		errno = ENOMEM;
		return -1;
	}
	b->start = qpx->wr_start, b->complete = qpx->wr_complete, b->abort = qpx->wr_abort;
	b->rdma_write = qpx->wr_rdma_write, b->rdma_write_imm = qpx->wr_rdma_write_imm, b->rdma_read = qpx->wr_rdma_read;
	b->send = qpx->wr_send, b->send_imm = qpx->wr_send_imm;
	b->cmp_swp = qpx->wr_atomic_cmp_swp, b->fetch_add = qpx->wr_atomic_fetch_add;
	b->set_sge = qpx->wr_set_sge, b->set_sge_list = qpx->wr_set_sge_list;
	b->set_inline_data = qpx->wr_set_inline_data, b->set_inline_data_list = qpx->wr_set_inline_data_list;
	q->wrb = b;
	/* an operation the provider did not fill (not asked for) stays
	 * unfilled: the application must not call it */
#define TAKE(f, x) if (qpx->f) qpx->f = x
	TAKE(wr_rdma_write, x_rdma_write);
	TAKE(wr_rdma_write_imm, x_rdma_write_imm);
	TAKE(wr_rdma_read, x_rdma_read);
	TAKE(wr_send, x_send);
	TAKE(wr_send_imm, x_send_imm);
	TAKE(wr_atomic_cmp_swp, x_cmp_swp);
	TAKE(wr_atomic_fetch_add, x_fetch_add);
	TAKE(wr_set_inline_data_list, x_set_inline_data_list);
	TAKE(wr_set_sge, x_set_sge);
#undef TAKE
	qpx->wr_set_sge_list = x_set_sge_list, qpx->wr_set_inline_data = x_set_inline_data;
	qpx->wr_start = x_start, qpx->wr_complete = x_complete, qpx->wr_abort = x_abort;
	return 0;
}
