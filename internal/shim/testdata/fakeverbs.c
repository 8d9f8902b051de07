/* A stand-in libibverbs.so.1 for testing the shim on a host without RDMA:
 * one device with two Ethernet ports, RC QPs whose provider completes
 * every work request at once (sends into the send CQ, receives matched
 * against sends of the peer QP in the same process). It exports the
 * IBVERBS_1.1 symbols the shim forwards to, and fake_device() for the
 * probe program.
 *
 * A QP from create_qp_ex that asks for IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
 * posts through the ibv_wr_* API as with rdma-core's providers: its
 * struct ibv_qp_ex (ibv_qp_to_qp_ex@IBVERBS_1.6) has the wr_* functions
 * of the operations asked for; wr_start begins a batch (taking the send
 * queue's lock), each operation starts a WR with the QP's wr_id and
 * wr_flags of that moment, wr_set_* describe its data (inline data copied
 * at once), wr_complete posts the batch, all of it or, with an error,
 * none, and wr_abort drops it.
 *
 * Everything the provider executes, through post_send or wr_complete,
 * goes "on the wire": fake_wire() gives the number of WRs, their payload
 * bytes and a hash over both in order (wr_id, opcode, flags, immediate,
 * remote address and key, atomic operands, SGE lengths and keys, and the
 * bytes of the payload, read at post time, or inline as copied), for a
 * program to print what the provider was given whatever posted it.
 *
 * Completion channels work as libibverbs and the kernel make them: the
 * channel's fd is the read end of a pipe (blocking, as the uverbs event
 * file); a CQ armed by req_notify_cq writes one event (the CQ's address,
 * as struct ib_uverbs_comp_event_desc) when its next completion arrives;
 * ibv_destroy_cq compares the acknowledged events with the reported ones
 * (where libibverbs would wait forever, it says so and fails with EIO). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CQ_DEPTH 4096

struct fake_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* from create_cq_ex: the same leading fields */
	};
	struct ibv_wc wc[CQ_DEPTH];
	unsigned head, tail;
	int armed;         /* req_notify_cq since the last event (under cq.mutex) */
	uint32_t reported; /* events written to the channel (under cq.mutex) */
	struct ibv_wc cur; /* the completion ibv_start_poll / ibv_next_poll is at */
};

struct fake_chan {
	struct ibv_comp_channel ch; /* fd: the pipe's read end */
	int wfd;
};

/* channels' refcnt (the real one takes the context's mutex) */
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_device fake_dev;
static uint32_t next_qpn[2] = {0x100, 0x100};

/* Every open context gets a pipe as its async fd; fake_raise_port
 * writes a port event into all of them, as the kernel does. */
#define MAX_CTX 16
static struct ibv_context *open_ctxs[MAX_CTX];
static int write_fds[MAX_CTX], read_fds[MAX_CTX];

/* async_fd_ok: ctx->async_fd is still the context's own async fd.
 * libibverbs hands the kernel that field with every CQ, QP and SRQ it
 * creates (rdma-core's ibv_icmd_create_cq and the like fill
 * UVERBS_ATTR_CREATE_*_EVENT_FD from it, the object's events going to
 * that file), and the kernel refuses any other file with EBADF: so does
 * the stand-in. */
static int async_fd_ok(struct ibv_context *ctx)
{
	for (int i = 0; i < MAX_CTX; i++)
		if (open_ctxs[i] == ctx && read_fds[i] != ctx->async_fd) {
			errno = EBADF;
			return 0;
		}
	return 1;
}

struct fake_event {
	int type;
	int port;
};

struct ibv_device *fake_device(void)
{
	strcpy(fake_dev.name, "fake0");
	return &fake_dev;
}

void fake_raise_port(int type, int port)
{
	struct fake_event e = {type, port};
	for (int i = 0; i < MAX_CTX; i++)
		if (open_ctxs[i] && write(write_fds[i], &e, sizeof(e)) != sizeof(e))
			abort();
}

static struct ibv_device *dev_list[3];
static struct ibv_device fake_dev1;

/* dev_index: 0 for fake0, 1 for fake1. QP numbers and memory keys are
 * per device, as on hardware: what one device hands out does not move
 * what the other does (the shim's backup resources on fake1 leave the
 * program's numbers on fake0 as they are without it). */
static int dev_index(struct ibv_context *c) { return c->device == &fake_dev1; }

/* FAKE_DEVICES=2 lists a second device, fake1 (a backup for layer 2). */
struct ibv_device **ibv_get_device_list(int *n)
{
	int k = 0;
	dev_list[k++] = fake_device();
	const char *e = getenv("FAKE_DEVICES");
	if (e && strcmp(e, "2") == 0) {
		strcpy(fake_dev1.name, "fake1");
		dev_list[k++] = &fake_dev1;
	}
	dev_list[k] = NULL;
	if (n)
		*n = k;
	return dev_list;
}

void ibv_free_device_list(struct ibv_device **l) {}

const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

static void push(struct fake_cq *c, uint64_t wr_id, uint32_t qpn, enum ibv_wc_opcode op, enum ibv_wc_status st)
{
	struct ibv_wc *w = &c->wc[c->head++ % CQ_DEPTH];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->qp_num = qpn;
	w->opcode = op;
	w->status = st;
	/* an armed CQ gets one event for its next completion, as the kernel's */
	pthread_mutex_lock(&c->cq.mutex);
	if (c->armed && c->cq.channel) {
		uint64_t ev = (uintptr_t)&c->cq;
		if (write(((struct fake_chan *)c->cq.channel)->wfd, &ev, sizeof(ev)) != sizeof(ev))
			abort();
		c->reported++;
		c->armed = 0;
	}
	pthread_mutex_unlock(&c->cq.mutex);
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	pthread_mutex_lock(&cq->mutex);
	c->armed = 1;
	pthread_mutex_unlock(&cq->mutex);
	return 0;
}

/* The QPs: a struct ibv_qp_ex first (only its qp_base for a QP without
 * the ibv_wr_* API), then the batch of the ibv_wr_* API. */
#define FAKE_MAX_SGE 16
#define FAKE_MAX_INLINE 1024

struct fake_wr {
	uint64_t wr_id;
	enum ibv_wr_opcode op;
	unsigned int flags;
	__be32 imm;
	uint32_t rkey;          /* or the invalidated rkey */
	uint64_t raddr, compare_add, swap;
	int num_sge;
	struct ibv_sge sge[FAKE_MAX_SGE];
	int inl;                /* the data is inl_data, copied at wr_set_inline_data */
	uint32_t inl_len;
	uint8_t inl_data[FAKE_MAX_INLINE];
};

struct fake_qp {
	struct ibv_qp_ex qpx;   /* qpx.qp_base: what the application gets */
	int wr_api;             /* created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
	uint32_t max_wr, max_sge, max_inline;
	uint32_t asked;         /* max_send_wr the provider was asked for (fake_qp_asked) */
	pthread_mutex_t sq;     /* the send queue's lock: wr_start to wr_complete / wr_abort */
	int err;                /* what wr_complete returns: a WR the batch cannot carry */
	uint32_t n;             /* WRs of the batch */
	struct fake_wr *batch;  /* max_wr */
};

/* The wire: what the provider executed, in order. */
static pthread_mutex_t wire_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t wire_wrs, wire_bytes, wire_hash = 0xcbf29ce484222325ull;

static void fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		wire_hash = (wire_hash ^ b[i]) * 0x100000001b3ull;
}

static void fnv64(uint64_t v) { fnv(&v, sizeof(v)); }

void fake_wire(uint64_t *wrs, uint64_t *bytes, uint64_t *hash)
{
	pthread_mutex_lock(&wire_mu);
	*wrs = wire_wrs;
	*bytes = wire_bytes;
	*hash = wire_hash;
	pthread_mutex_unlock(&wire_mu);
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return IBV_WC_SEND;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	default:
		return IBV_WC_RDMA_WRITE;
	}
}

/* execute puts one WR on the wire and, signaled, completes it. */
static void execute(struct ibv_qp *qp, const struct fake_wr *w)
{
	int carries = w->op == IBV_WR_RDMA_WRITE || w->op == IBV_WR_RDMA_WRITE_WITH_IMM || w->op == IBV_WR_SEND ||
		      w->op == IBV_WR_SEND_WITH_IMM;
	pthread_mutex_lock(&wire_mu);
	wire_wrs++;
	fnv64(qp->qp_num);
	fnv64(w->wr_id);
	fnv64(w->op);
	fnv64(w->flags & ~IBV_SEND_INLINE);
	fnv64(w->inl);
	if (w->op == IBV_WR_SEND_WITH_IMM || w->op == IBV_WR_RDMA_WRITE_WITH_IMM)
		fnv64(w->imm);
	if (w->op != IBV_WR_SEND && w->op != IBV_WR_SEND_WITH_IMM) {
		fnv64(w->rkey);
		fnv64(w->raddr);
	}
	if (w->op == IBV_WR_ATOMIC_CMP_AND_SWP || w->op == IBV_WR_ATOMIC_FETCH_AND_ADD)
		fnv64(w->compare_add);
	if (w->op == IBV_WR_ATOMIC_CMP_AND_SWP)
		fnv64(w->swap);
	if (w->inl) {
		fnv64(w->inl_len);
		fnv(w->inl_data, w->inl_len);
		wire_bytes += w->inl_len;
	} else if (w->op != IBV_WR_LOCAL_INV) {
		fnv64(w->num_sge);
		for (int i = 0; i < w->num_sge; i++) {
			fnv64(w->sge[i].length);
			fnv64(w->sge[i].lkey);
			if (carries) {
				/* the payload as the HCA reads it: at post time */
				fnv((const void *)(uintptr_t)w->sge[i].addr, w->sge[i].length);
				wire_bytes += w->sge[i].length;
			}
		}
	}
	pthread_mutex_unlock(&wire_mu);
	if (w->flags & IBV_SEND_SIGNALED)
		push((struct fake_cq *)qp->send_cq, w->wr_id, qp->qp_num, wc_opcode(w->op), IBV_WC_SUCCESS);
}

/* refused is the test's way to make the provider refuse a WR. */
static int refused(uint64_t wr_id) { return wr_id == 0xbad; }

/* fake_post_send executes the WRs up to one it refuses. */
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (refused(wr->wr_id)) {
			*bad = wr;
			return ENOMEM;
		}
		struct fake_wr w = {.wr_id = wr->wr_id, .op = wr->opcode, .flags = wr->send_flags, .imm = wr->imm_data};
		if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			w.rkey = wr->wr.atomic.rkey;
			w.raddr = wr->wr.atomic.remote_addr;
			w.compare_add = wr->wr.atomic.compare_add;
			w.swap = wr->wr.atomic.swap;
		} else if (wr->opcode == IBV_WR_LOCAL_INV) {
			w.rkey = wr->invalidate_rkey;
		} else {
			w.rkey = wr->wr.rdma.rkey;
			w.raddr = wr->wr.rdma.remote_addr;
		}
		if (wr->num_sge > FAKE_MAX_SGE) {
			*bad = wr;
			return EINVAL;
		}
		if (wr->send_flags & IBV_SEND_INLINE) {
			/* copied into the WQE: the same bytes as the wr API's */
			w.inl = 1;
			for (int i = 0; i < wr->num_sge; i++) {
				if (wr->sg_list[i].length > FAKE_MAX_INLINE - w.inl_len) {
					*bad = wr;
					return EINVAL;
				}
				memcpy(w.inl_data + w.inl_len, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				w.inl_len += wr->sg_list[i].length;
			}
		} else {
			w.num_sge = wr->num_sge;
			memcpy(w.sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
		}
		execute(qp, &w);
	}
	return 0;
}

/* The ibv_wr_* API. None of these calls another through the struct
 * ibv_qp_ex: whoever holds the struct may have replaced them. */
static inline struct fake_qp *fq(struct ibv_qp_ex *qpx) { return (struct fake_qp *)qpx; }

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct fake_qp *q = fq(qpx);
	pthread_mutex_lock(&q->sq);
	q->n = 0;
	q->err = 0;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct fake_qp *q = fq(qpx);
	q->n = 0;
	pthread_mutex_unlock(&q->sq);
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct fake_qp *q = fq(qpx);
	int err = q->err;
	for (uint32_t i = 0; i < q->n && !err; i++)
		if (refused(q->batch[i].wr_id))
			err = ENOMEM; /* post_send's refusal: here the whole batch */
	for (uint32_t i = 0; i < q->n && !err; i++)
		execute(&qpx->qp_base, &q->batch[i]);
	q->n = 0;
	pthread_mutex_unlock(&q->sq);
	return err;
}

/* wr_new starts the batch's next WR. */
static struct fake_wr *wr_new(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct fake_qp *q = fq(qpx);
	if (q->n == q->max_wr) {
		q->err = ENOMEM;
		return NULL;
	}
	struct fake_wr *w = &q->batch[q->n++];
	memset(w, 0, offsetof(struct fake_wr, inl_data));
	w->wr_id = qpx->wr_id;
	w->flags = qpx->wr_flags;
	w->op = op;
	return w;
}

/* wr_cur is the WR wr_set_* describe. */
static struct fake_wr *wr_cur(struct ibv_qp_ex *qpx)
{
	struct fake_qp *q = fq(qpx);
	if (q->n == 0) {
		q->err = EINVAL;
		return NULL;
	}
	return &q->batch[q->n - 1];
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_RDMA_WRITE);
	if (w)
		w->rkey = rkey, w->raddr = raddr;
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (w)
		w->rkey = rkey, w->raddr = raddr, w->imm = imm;
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_RDMA_READ);
	if (w)
		w->rkey = rkey, w->raddr = raddr;
}

static void wr_send(struct ibv_qp_ex *qpx) { wr_new(qpx, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm = imm;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (w)
		w->rkey = rkey, w->raddr = raddr, w->compare_add = compare, w->swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, uint64_t add)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (w)
		w->rkey = rkey, w->raddr = raddr, w->compare_add = add;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct fake_wr *w = wr_new(qpx, IBV_WR_LOCAL_INV);
	if (w)
		w->rkey = rkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sge)
{
	struct fake_qp *q = fq(qpx);
	struct fake_wr *w = wr_cur(qpx);
	if (!w)
		return;
	if (n > q->max_sge || n > FAKE_MAX_SGE) {
		q->err = EINVAL;
		return;
	}
	memcpy(w->sge, sge, n * sizeof(*sge));
	w->num_sge = (int)n;
	w->inl = 0;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	wr_set_sge_list(qpx, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *buf)
{
	struct fake_qp *q = fq(qpx);
	struct fake_wr *w = wr_cur(qpx);
	if (!w)
		return;
	uint32_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (buf[i].length > q->max_inline - len || buf[i].length > FAKE_MAX_INLINE - len) {
			q->err = ENOMEM; /* as mlx5: more than max_inline_data */
			return;
		}
		memcpy(w->inl_data + len, buf[i].addr, buf[i].length);
		len += buf[i].length;
	}
	w->inl = 1;
	w->inl_len = len;
	w->num_sge = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf d = {.addr = addr, .length = length};
	wr_set_inline_data_list(qpx, 1, &d);
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (qp->srq) {
		*bad = wr; /* its receives come from the SRQ (rxe_post_recv) */
		return EINVAL;
	}
	for (; wr; wr = wr->next)
		push((struct fake_cq *)qp->recv_cq, wr->wr_id, qp->qp_num, IBV_WC_RECV, IBV_WC_SUCCESS);
	return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	int i = 0;
	for (; i < n && c->tail != c->head; i++)
		wc[i] = c->wc[c->tail++ % CQ_DEPTH];
	return i;
}

/* the largest send queue the stand-in device makes (max_qp_wr) */
#define FAKE_MAX_QP_WR 65536

static struct fake_qp *new_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	if (!async_fd_ok(pd->context))
		return NULL;
	if (attr->cap.max_send_wr > FAKE_MAX_QP_WR) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = pd->context;
	qp->pd = pd;
	qp->qp_context = attr->qp_context;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->qp_num = __atomic_fetch_add(&next_qpn[dev_index(pd->context)], 1, __ATOMIC_RELAXED);
	qp->qp_type = attr->qp_type;
	qp->state = IBV_QPS_RESET;
	q->asked = attr->cap.max_send_wr;
	return q;
}

/* fake_qp_asked is the send queue size the provider was asked for when
 * qp was created (a shim may ask for more than the program did). */
uint32_t fake_qp_asked(struct ibv_qp *qp) { return ((struct fake_qp *)qp)->asked; }

static void free_qp(struct fake_qp *q)
{
	if (q->wr_api)
		pthread_mutex_destroy(&q->sq);
	free(q->batch);
	free(q);
}

/* The send_ops_flags the stand-in has operations for. */
#define FAKE_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
		  IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV)

/* fake_create_qp_ex is the provider's create_qp_ex (not ibv_create_qp,
 * which a preloaded shim interposes). */
static struct ibv_qp *fake_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		errno = EINVAL;
		return NULL;
	}
	int wr_api = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
	uint64_t ops = wr_api ? attr->send_ops_flags : 0;
	if (ops & ~(uint64_t)FAKE_OPS) {
		errno = EOPNOTSUPP; /* as a provider asked for operations it has not */
		return NULL;
	}
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
		.srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all};
	struct fake_qp *q = new_qp(attr->pd, &a);
	if (!q)
		return NULL;
	if (!wr_api)
		return &q->qpx.qp_base;
	q->wr_api = 1;
	q->max_wr = attr->cap.max_send_wr ? attr->cap.max_send_wr : 1;
	q->max_sge = attr->cap.max_send_sge;
	q->max_inline = attr->cap.max_inline_data;
	q->batch = calloc(q->max_wr, sizeof(*q->batch));
	if (!q->batch) {
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&q->sq, NULL);
	struct ibv_qp_ex *x = &q->qpx;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		x->wr_rdma_write = wr_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		x->wr_rdma_write_imm = wr_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_SEND)
		x->wr_send = wr_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		x->wr_send_imm = wr_send_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		x->wr_rdma_read = wr_rdma_read;
	if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	if (ops & IBV_QP_EX_WITH_LOCAL_INV)
		x->wr_local_inv = wr_local_inv;
	return &x->qp_base;
}

/* ibv_qp_to_qp_ex, as libibverbs's: the struct ibv_qp_ex of a QP made for
 * the ibv_wr_* API, NULL for another. */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	return q->wr_api ? &q->qpx : NULL;
}

/* FAKE_MAX_CQE is the device's largest CQ. */
#define FAKE_MAX_CQE 100000

/* new_cq is the provider's create_cq and libibverbs's verbs_init_cq. */
static struct fake_cq *new_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch)
{
	if (!async_fd_ok(ctx))
		return NULL;
	if (cqe < 1 || cqe > FAKE_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->cq.context = ctx;
	c->cq.cqe = cqe;
	c->cq.cq_context = cq_ctx;
	c->cq.channel = ch;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	if (ch) {
		pthread_mutex_lock(&chan_mu);
		ch->refcnt++;
		pthread_mutex_unlock(&chan_mu);
	}
	return c;
}

/* The extended CQ's polling (ibv_start_poll, ibv_next_poll,
 * ibv_end_poll and the read_* of the completion it is at). */
static int ex_next(struct ibv_cq_ex *cqx)
{
	struct fake_cq *c = (struct fake_cq *)cqx;
	if (c->tail == c->head)
		return ENOENT;
	c->cur = c->wc[c->tail++ % CQ_DEPTH];
	cqx->wr_id = c->cur.wr_id;
	cqx->status = c->cur.status;
	return 0;
}
static int ex_start(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr) { return ex_next(cqx); }
static void ex_end(struct ibv_cq_ex *cqx) {}
static enum ibv_wc_opcode ex_opcode(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.opcode; }
static uint32_t ex_qp_num(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.qp_num; }
static uint32_t ex_byte_len(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.byte_len; }
static uint32_t ex_vendor_err(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.vendor_err; }
static __be32 ex_imm_data(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.imm_data; }
static unsigned int ex_wc_flags(struct ibv_cq_ex *cqx) { return ((struct fake_cq *)cqx)->cur.wc_flags; }

static struct ibv_cq_ex *fake_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct fake_cq *c = new_cq(ctx, attr->cqe, attr->cq_context, attr->channel);
	if (!c)
		return NULL;
	c->cqx.start_poll = ex_start;
	c->cqx.next_poll = ex_next;
	c->cqx.end_poll = ex_end;
	c->cqx.read_opcode = ex_opcode;
	c->cqx.read_qp_num = ex_qp_num;
	c->cqx.read_byte_len = ex_byte_len;
	c->cqx.read_vendor_err = ex_vendor_err;
	c->cqx.read_imm_data = ex_imm_data;
	c->cqx.read_wc_flags = ex_wc_flags;
	return &c->cqx;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Contexts are verbs_contexts, as rdma-core's providers make them, so the
 * inline ibv_create_qp_ex and ibv_create_cq_ex find create_qp_ex and
 * create_cq_ex. */
struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct verbs_context *v = calloc(1, sizeof(*v));
	struct ibv_context *ctx = &v->context;
	v->sz = sizeof(*v);
	v->create_qp_ex = fake_create_qp_ex;
	v->create_cq_ex = fake_create_cq_ex;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->device = dev;
	int p[2];
	if (pipe(p))
		return NULL;
	ctx->async_fd = p[0];
	for (int i = 0; i < MAX_CTX; i++)
		if (!open_ctxs[i]) {
			open_ctxs[i] = ctx;
			write_fds[i] = p[1], read_fds[i] = p[0];
			break;
		}
	ctx->ops.post_send = fake_post_send;
	ctx->ops.post_recv = fake_post_recv;
	ctx->ops.post_srq_recv = fake_post_srq_recv;
	ctx->ops.poll_cq = fake_poll_cq;
	ctx->ops.req_notify_cq = fake_req_notify_cq;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	for (int i = 0; i < MAX_CTX; i++)
		if (open_ctxs[i] == ctx) {
			open_ctxs[i] = NULL;
			close(write_fds[i]);
		}
	close(ctx->async_fd);
	free(verbs_get_ctx(ctx));
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->phys_port_cnt = 2;
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *a)
{
	struct ibv_port_attr *p = (struct ibv_port_attr *)a;
	if (port < 1 || port > 2)
		return EINVAL;
	p->state = IBV_PORT_ACTIVE;
	/* FAKE_LINK_LAYER=ib: InfiniBand ports (no alternate path all the same) */
	const char *ll = getenv("FAKE_LINK_LAYER");
	p->link_layer = ll && strcmp(ll, "ib") == 0 ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch, int vec)
{
	struct fake_cq *c = new_cq(ctx, cqe, cq_ctx, ch);
	return c ? &c->cq : NULL;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	if (cqe < 1 || cqe > FAKE_MAX_CQE)
		return EINVAL;
	cq->cqe = cqe;
	return 0;
}

/* libibverbs waits until every event the kernel reported is acknowledged:
 * a program (or shim) that miscounts would hang there. */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	struct ibv_comp_channel *ch = cq->channel;
	pthread_mutex_lock(&cq->mutex);
	uint32_t acked = cq->comp_events_completed, reported = c->reported;
	pthread_mutex_unlock(&cq->mutex);
	if (acked != reported) {
		fprintf(stderr, "fakeverbs: ibv_destroy_cq: %u events acknowledged, %u reported: libibverbs would wait forever\n",
			acked, reported);
		return EIO;
	}
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(c);
	if (ch) {
		pthread_mutex_lock(&chan_mu);
		ch->refcnt--;
		pthread_mutex_unlock(&chan_mu);
	}
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct fake_chan *c = calloc(1, sizeof(*c));
	int p[2];
	if (!c)
		return NULL;
	if (pipe2(p, O_CLOEXEC)) {
		int err = errno;
		free(c);
		errno = err;
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = p[0];
	c->wfd = p[1];
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct fake_chan *c = (struct fake_chan *)ch;
	pthread_mutex_lock(&chan_mu);
	int busy = ch->refcnt != 0;
	pthread_mutex_unlock(&chan_mu);
	if (busy)
		return EBUSY;
	close(ch->fd);
	close(c->wfd);
	free(c);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	uint64_t ev;
	if (read(ch->fd, &ev, sizeof(ev)) != sizeof(ev))
		return -1;
	*cq = (struct ibv_cq *)(uintptr_t)ev;
	*cq_ctx = (*cq)->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct fake_qp *q = new_qp(pd, attr);
	return q ? &q->qpx.qp_base : NULL;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (mask & IBV_QP_ALT_PATH)
		return EINVAL; /* as ib_core on RoCE */
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

/* FAKE_DESTROY_QP_BUSY=N: the first N destroys are refused (EBUSY, as
 * the kernel refuses a QP still in use), the QP left as it was. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	static int busy = -1;
	if (busy < 0) {
		const char *e = getenv("FAKE_DESTROY_QP_BUSY");
		busy = e ? atoi(e) : 0;
	}
	if (busy > 0) {
		busy--;
		errno = EBUSY;
		return EBUSY;
	}
	free_qp((struct fake_qp *)qp);
	return 0;
}

/* SRQs: receives posted (post_srq_recv, as the inline verb calls it) wait
 * in order until fake_srq_deliver hands some to a QP on the SRQ, which
 * completes them into its receive CQ. */
#define FAKE_SRQ_WR 256
struct fake_srq {
	struct ibv_srq srq;
	uint32_t max_wr;
	uint64_t wr_id[FAKE_SRQ_WR];
	unsigned head, tail;
};

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_srq *s = (struct fake_srq *)srq;
	for (; wr; wr = wr->next) {
		if (refused(wr->wr_id) || s->head - s->tail >= s->max_wr) {
			*bad = wr;
			return ENOMEM;
		}
		s->wr_id[s->head++ % FAKE_SRQ_WR] = wr->wr_id;
	}
	return 0;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!async_fd_ok(pd->context))
		return NULL;
	if (attr->attr.max_wr == 0 || attr->attr.max_wr > FAKE_SRQ_WR) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_srq *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->srq.context = pd->context;
	s->srq.pd = pd;
	s->srq.srq_context = attr->srq_context;
	s->max_wr = attr->attr.max_wr;
	return &s->srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask) { return mask & IBV_SRQ_MAX_WR ? EINVAL : 0; }

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct fake_srq *s = (struct fake_srq *)srq;
	*attr = (struct ibv_srq_attr){.max_wr = s->max_wr, .max_sge = 1};
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq) { free(srq); return 0; }

/* fake_srq_deliver: n messages arrive on qp, which receives through an
 * SRQ: each takes the SRQ's oldest receive (none left: the rest wait). */
int fake_srq_deliver(struct ibv_qp *qp, int n)
{
	struct fake_srq *s = (struct fake_srq *)qp->srq;
	int k = 0;
	for (; s && k < n && s->tail != s->head; k++)
		push((struct fake_cq *)qp->recv_cq, s->wr_id[s->tail++ % FAKE_SRQ_WR], qp->qp_num, IBV_WC_RECV, IBV_WC_SUCCESS);
	return k;
}

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct fake_event e;
	ssize_t n = read(ctx->async_fd, &e, sizeof(e));
	if (n != sizeof(e)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	memset(ev, 0, sizeof(*ev));
	ev->event_type = e.type;
	ev->element.port_num = e.port;
	return 0;
}
void ibv_ack_async_event(struct ibv_async_event *ev) {}

/* Stubs of the other verbs the shim's own code links against (verbs/ibv):
 * the stand-in does not implement them. */
int ibv_dereg_mr(struct ibv_mr *mr) { free(mr); return 0; }
__be64 ibv_get_device_guid(struct ibv_device *d) { return 0; }
int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) { memset(gid, 0, sizeof(*gid)); return 0; }
/* ibv_query_qp answers only for the QP's capabilities (IBV_QP_CAP alone):
 * the send queue the provider made, as it was asked. */
int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia)
{
	if (mask != IBV_QP_CAP)
		return ENOSYS;
	memset(a, 0, sizeof(*a));
	memset(ia, 0, sizeof(*ia));
	a->cap.max_send_wr = ia->cap.max_send_wr = fake_qp_asked(qp);
	ia->srq = qp->srq;
	return 0;
}
/* ibv_reg_mr_iova2 registers anything (an implicit on-demand-paging
 * region, NULL and SIZE_MAX, included): the stand-in touches no memory.
 * FAKE_NO_IMPLICIT_ODP=1: the second device has no implicit ODP and
 * refuses such a region with EINVAL, as mlx5 without
 * IB_ODP_SUPPORT_IMPLICIT and rdma_rxe do. */
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	static uint32_t next_key[2] = {0x100, 0x100};
	const char *no_implicit = getenv("FAKE_NO_IMPLICIT_ODP");
	if (!addr && len == SIZE_MAX && dev_index(pd->context) == 1 && no_implicit && strcmp(no_implicit, "1") == 0) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = mr->rkey = __atomic_fetch_add(&next_key[dev_index(pd->context)], 1, __ATOMIC_RELAXED);
	return mr;
}
/* ibv_rereg_mr changes what flags name; a new translation gets new keys.
 * A NULL address with IBV_REREG_MR_CHANGE_TRANSLATION is an input error
 * (the region unchanged), as libibverbs's checks make it. */
#ifndef FAKE_NO_REREG /* a libibverbs without it: the shim's call then fails, never aborts */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access)
{
	static uint32_t next_key[2] = {0x8000, 0x8000};
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !len))
		return IBV_REREG_MR_ERR_INPUT;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = len;
		mr->lkey = mr->rkey = __atomic_fetch_add(&next_key[dev_index(mr->context)], 1, __ATOMIC_RELAXED);
	}
	return 0;
}
#endif
/* ibv_reg_dmabuf_mr registers any open fd (a dma-buf's stands in): the
 * region is at iova; a closed fd fails with EBADF. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access)
{
	if (fcntl(fd, F_GETFD) < 0) {
		errno = EBADF;
		return NULL;
	}
	return ibv_reg_mr_iova2(pd, (void *)(uintptr_t)iova, len, iova, access);
}
int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags, size_t size) { return ENOSYS; }
